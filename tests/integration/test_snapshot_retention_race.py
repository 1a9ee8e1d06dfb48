"""A snapshot of a running job whose upload to S3 outlasts Spark's retention of the state
version it holds: Spark's maintenance deletes that version from the checkpoint while the
upload is in flight, and the snapshot must still be complete, verifiable and continuable."""

from __future__ import annotations

import json
import re
import signal
import subprocess
from pathlib import Path

import pytest

from sparkpoint import api
from sparkpoint.snapshot import export
from sparkpoint.storage.home import Home
from sparkpoint.testing import expected_hourly_counts, output_rows, sink_files_up_to, write_clicks
from tests.conftest import EXAMPLES, SHUFFLE_PARTITIONS
from tests.support.cli import _env, command, files_committed, sparkpoint, start, wait_for
from tests.support.s3 import S3Server
from tests.support.slow_proxy import slow_proxy

JOB = EXAMPLES / "clicks_job.py"
pytestmark = pytest.mark.spark
RETAIN = 2
CONF = ["--conf", f"spark.sql.shuffle.partitions={SHUFFLE_PARTITIONS}",
        # Keep the file sink log uncompacted so the test can tell which batch wrote which file.
        "--conf", "spark.sql.streaming.fileSink.log.compactInterval=1000",
        # Spark keeps only the newest RETAIN state versions and cleans up several times a
        # second: a version is gone a few batches after it was committed.
        "--conf", f"spark.sql.streaming.minBatchesToRetain={RETAIN}",
        "--conf", "spark.sql.streaming.stateStore.maintenanceInterval=200ms"]
_STATE_FILE = re.compile(r"^(\d+)\.(zip|changelog)$")


def _latest_commit(checkpoint: Path) -> int:
    return max(int(p.name) for p in (checkpoint / "commits").iterdir() if p.name.isdigit())


def _partitions_holding(checkpoint: Path, version: int) -> list[Path]:
    """State partition directories that still hold a file of ``version``."""
    holding = []
    for partition in (checkpoint / "state").glob("*/*"):
        if partition.is_dir() and partition.name.isdigit() and any(
            (m := _STATE_FILE.match(entry.name)) and int(m.group(1)) == version
            for entry in partition.iterdir()
        ):
            holding.append(partition)
    return holding


def test_snapshot_upload_outlasting_retention_publishes_a_complete_snapshot(
    spark: object, s3_server: S3Server, home: Home, tmp_path: Path
) -> None:
    bucket = s3_server.new_bucket()
    snapshots = f"s3://{bucket}/snaps"
    inp, out = tmp_path / "in", tmp_path / "out"
    checkpoint = home.checkpoint_dir("fast")
    events = write_clicks(inp, range(0, 3))
    log = tmp_path / "job.log"
    proc = start(home, "run", str(JOB), "--job", "fast", "--param", f"input={inp}",
                 "--param", f"output={out}", "--param", "files_per_batch=1", *CONF, log=log)
    try:
        wait_for(lambda: files_committed(home, "fast", "clicks") == 3, 180, "3 files", log)
        # A slow store whose uploads of state files wait until the race has been observed.
        with slow_proxy(s3_server.endpoint, latency=0.1, bytes_per_second=1e6,
                        hold=rf"^PUT /{bucket}/snaps/\.files/") as proxy:
            create = subprocess.Popen(
                command(home, "--snapshots", snapshots, "snapshot", "create", "fast", "s1",
                        "--json"),
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                env=_env(extra={"AWS_ENDPOINT_URL": proxy.endpoint}),
            )
            try:
                wait_for(lambda: proxy.held_count() > 0 or create.poll() is not None, 180,
                         "the snapshot's upload to start")
                assert create.poll() is None, create.communicate()[1]
                # The snapshot holds a batch committed before its upload started, so its
                # state version is at most this one + 1; Spark deletes versions oldest first.
                newest_at_upload = _latest_commit(checkpoint)
                # More input while the upload waits: the job commits one batch per file, and
                # after RETAIN of them that version is past retention.
                events += write_clicks(inp, range(3, 3 + RETAIN + 3))
                wait_for(lambda: not _partitions_holding(checkpoint, newest_at_upload + 1), 180,
                         f"Spark to delete state version {newest_at_upload + 1}", log)
            finally:
                proxy.release()
                created_out, created_err = create.communicate(timeout=300)
        assert create.returncode == 0, created_err
        batch = json.loads(created_out)["batch_id"]
        assert batch <= newest_at_upload
        # The race really happened: the checkpoint no longer holds the snapshot's version.
        assert not _partitions_holding(checkpoint, batch + 1)
        assert proc.poll() is None, "the job stopped: the snapshot did not race a running job"
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            proc.wait(timeout=120)

    verified = sparkpoint(home, "--snapshots", snapshots, "snapshot", "verify", "s1", "--json")
    assert verified.code == 0 and verified.json()["ok"], verified.out + verified.err

    # A new job from the snapshot redoes what the old job did after it, and no more.
    events += write_clicks(inp, range(8, 10))
    continued = Home(home.root, snapshots)
    api.run(continued, JOB, "from-s1", params={"input": str(inp), "output": str(tmp_path / "o2")},
            from_snapshot="s1", until_caught_up=True, spark=spark)  # type: ignore[arg-type]
    before = output_rows(spark, out, sink_files_up_to(out, batch))  # type: ignore[arg-type]
    after = output_rows(spark, tmp_path / "o2")  # type: ignore[arg-type]
    assert after, "the continued job emitted nothing: the test input is too small"
    assert before + after == expected_hourly_counts(events)


def test_export_starts_over_when_spark_deletes_files_before_they_are_linked(
    spark: object, s3_server: S3Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The narrow window before the files are linked: the job commits its next batch and
    Spark's cleanup deletes the state version being exported. The export starts over from
    the newest batch instead of failing with a missing file."""
    home = Home(tmp_path / "home", f"s3://{s3_server.new_bucket()}/snaps")
    inp = tmp_path / "in"
    write_clicks(inp, range(0, 3))
    api.run(home, JOB, "v1", params={"input": str(inp), "output": str(tmp_path / "out"),
                                     "files_per_batch": "1"},
            until_caught_up=True, spark=spark)  # type: ignore[arg-type]
    checkpoint = home.checkpoint_dir("v1")
    newest = _latest_commit(checkpoint)
    # The checkpoint as it was just before the job committed its newest batch.
    pending = tmp_path / "pending-commit"
    (checkpoint / "commits" / str(newest)).rename(pending)
    real_locate = export.locate_version

    def locate_while_spark_moves_on(partition_dir: Path, version: int,
                                    unique_id: str | None = None) -> object:
        if pending.exists():
            # What the running job does meanwhile: it commits batch `newest`, and the cleanup
            # deletes the state version the export was about to take (that of batch newest-1).
            pending.rename(checkpoint / "commits" / str(newest))
            for partition in _partitions_holding(checkpoint, newest):
                for entry in partition.iterdir():
                    match = _STATE_FILE.match(entry.name)
                    if match and int(match.group(1)) == newest:
                        entry.unlink()
        return real_locate(partition_dir, version, unique_id)

    monkeypatch.setattr(export, "locate_version", locate_while_spark_moves_on)
    said: list[str] = []
    manifest = api.snapshot_create(home, "v1", "s1", echo=said.append)
    assert not pending.exists(), "the export never looked for state files"
    assert manifest.batch_id == newest
    assert any("starting over from the newest batch" in line for line in said), said
    assert api.snapshot_verify(home, "s1") == []
