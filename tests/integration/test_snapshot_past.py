"""Snapshots of an earlier committed batch (``snapshot create --batch K`` / ``--at TIME``): a
job started from one continues exactly from batch K; batches the checkpoint no longer holds
are refused with the range it does hold, and nothing is created."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest

from sparkpoint import api
from sparkpoint.storage.home import Home
from sparkpoint.testing import (
    expected_hourly_counts,
    output_rows,
    sink_files_up_to,
    write_clicks,
)
from tests.conftest import EXAMPLES, SHUFFLE_PARTITIONS
from tests.support.cli import files_committed, sparkpoint, start, wait_for
from tests.support.state_formats import CHANGELOG, every_state_format

JOB = EXAMPLES / "clicks_job.py"
pytestmark = pytest.mark.spark
# Few enough that the first batches are cleaned up, enough to hold the batch we go back to.
RETAIN = 8


def _files_read(home: Home, job: str, batch: int) -> int:
    """How many input files the job had read once ``batch`` committed (log offset + 1)."""
    text = (home.checkpoint_dir(job) / "offsets" / str(batch)).read_text()
    for line in text.split("\n")[2:]:
        name, _, body = line.partition(":")
        if name == "clicks" and body != "-":
            return int(json.loads(body)["logOffset"]) + 1
    return 0


@every_state_format
def test_snapshot_of_an_earlier_batch_continues_from_that_batch(
    spark: object, home: Home, tmp_path: Path, provider: str, changelog: str
) -> None:
    conf = {"spark.sql.streaming.stateStore.providerClass": provider,
            # State versions as a zip plus changelogs, or changelogs alone.
            CHANGELOG: changelog,
            "spark.sql.streaming.minBatchesToRetain": str(RETAIN),
            # The sink log stays uncompacted, so the files of batches 0..K can be told apart.
            "spark.sql.streaming.fileSink.log.compactInterval": "1000"}
    inp, out1, out2 = tmp_path / "in", tmp_path / "out1", tmp_path / "out2"
    events = write_clicks(inp, range(0, 9))

    def params(out: Path) -> dict[str, str]:
        return {"input": str(inp), "output": str(out), "files_per_batch": "1"}

    first = api.run(home, JOB, "v1", params=params(out1), conf=conf, until_caught_up=True,
                    spark=spark)  # type: ignore[arg-type]

    shown = sparkpoint(home, "jobs", "show", "v1", "--json")
    assert shown.code == 0, shown.err
    held = shown.json()["snapshottable_batches"]
    numbers = [entry["batch"] for entry in held]
    # Spark purged the oldest batches (how soon after a batch is its own business) and keeps
    # the newest ones; every batch in between is held.
    assert numbers == list(range(numbers[0], first.last_batch + 1))
    assert numbers[0] > 0 and len(numbers) <= RETAIN
    assert "can be snapshotted" in sparkpoint(home, "jobs", "show", "v1").out
    # Go back to the first held batch that had read 5 of the 9 files: the hour 00:00 was
    # emitted before it, the hour 01:00 only after it.
    batch = next(e["batch"] for e in held if _files_read(home, "v1", e["batch"]) >= 5)
    assert batch < first.last_batch

    created = sparkpoint(home, "snapshot", "create", "v1", "past", "--batch", str(batch),
                         "--json")
    assert created.code == 0, created.err
    assert created.json()["batch_id"] == batch
    assert sparkpoint(home, "snapshot", "verify", "past").code == 0
    # A time as 'jobs show' printed it, without a zone (local time; the tests run in UTC).
    batch_time = next(e["batch_time"] for e in held if e["batch"] == batch)
    at = sparkpoint(home, "snapshot", "create", "v1", "past_at", "--at",
                    batch_time.removesuffix("Z"), "--json")
    assert at.code == 0, at.err
    assert at.json()["batch_id"] == batch

    api.run(home, JOB, "v2", params=params(out2), conf=conf, from_snapshot="past",
            until_caught_up=True, spark=spark)  # type: ignore[arg-type]

    def rows(out: Path, up_to: int = 1 << 30) -> object:
        # Through the sink logs: reading the directories would need the session to share
        # the jobs' compact interval.
        return output_rows(spark, out, sink_files_up_to(out, up_to))  # type: ignore[arg-type]

    everything, up_to_batch, after = rows(out1), rows(out1, batch), rows(out2)
    assert up_to_batch and after, "the input is too small to emit rows on both sides of K"
    assert after == everything - up_to_batch
    assert up_to_batch + after == expected_hourly_counts(events)


def test_batches_not_held_are_refused_and_nothing_is_created(
    spark: object, home: Home, tmp_path: Path
) -> None:
    inp = tmp_path / "in"
    write_clicks(inp, range(0, 6))
    conf = {"spark.sql.streaming.minBatchesToRetain": "2"}
    result = api.run(home, JOB, "v1", conf=conf, until_caught_up=True, spark=spark,  # type: ignore[arg-type]
                     params={"input": str(inp), "output": str(tmp_path / "o"),
                             "files_per_batch": "1"})
    last = result.last_batch
    held = [entry["batch"] for entry in
            sparkpoint(home, "jobs", "show", "v1", "--json").json()["snapshottable_batches"]]
    assert held[-1] == last and 0 < held[0] < last

    for args, found in (
        (["--batch", "0"], "batch 0 is no longer held"),
        (["--batch", str(last + 1)], f"batch {last + 1} is not committed"),
        (["--at", "2001-01-01T00:00:00Z"], "no batch it records has a time at or before"),
    ):
        refused = sparkpoint(home, "snapshot", "create", "v1", "old", *args)
        assert refused.code == 4, refused.err
        assert "[BATCH_NOT_HELD]" in refused.err and found in refused.err
        assert f"holds batches {held[0]} (time " in refused.err
        assert f"to {last} (time " in refused.err
        as_json = sparkpoint(home, "snapshot", "create", "v1", "old", *args, "--json")
        assert as_json.code == 4
        error = as_json.json()["error"]
        assert error["code"] == "BATCH_NOT_HELD"
        assert [entry["batch"] for entry in error["held"]] == held
    assert sparkpoint(home, "snapshot", "list", "--json").json() == []

    bad = sparkpoint(home, "snapshot", "create", "v1", "old", "--at", "yesterday")
    assert bad.code == 2 and "--at: expected an ISO 8601 time" in bad.err
    both = sparkpoint(home, "snapshot", "create", "v1", "old", "--at", "2026-01-01",
                      "--batch", "1")
    assert both.code == 2 and "either --batch or --at" in both.err


def test_earlier_batch_of_a_running_job(spark: object, home: Home, tmp_path: Path) -> None:
    inp, out = tmp_path / "in", tmp_path / "out"
    events = write_clicks(inp, range(0, 7))
    log = tmp_path / "live.log"
    proc = start(home, "run", str(JOB), "--job", "live", "--param", f"input={inp}",
                 "--param", f"output={out}", "--param", "files_per_batch=1",
                 "--conf", f"spark.sql.shuffle.partitions={SHUFFLE_PARTITIONS}",
                 "--conf", "spark.sql.streaming.fileSink.log.compactInterval=1000", log=log)
    try:
        wait_for(lambda: files_committed(home, "live", "clicks") == 7, 180, "7 files", log)
        held = sparkpoint(home, "jobs", "show", "live", "--json").json()["snapshottable_batches"]
        # The hour 00:00 is emitted by then, the hours after it only later.
        batch = next(e["batch"] for e in held if _files_read(home, "live", e["batch"]) >= 5)
        created = sparkpoint(home, "snapshot", "create", "live", "back", "--batch", str(batch),
                             "--json")
        assert created.code == 0, created.err
        assert created.json()["batch_id"] == batch
        shown = sparkpoint(home, "jobs", "show", "live", "--json").json()
        assert shown["status"] == "running" and proc.poll() is None
        assert sparkpoint(home, "jobs", "stop", "live", "--wait").code == 0
        assert proc.wait(timeout=120) == 0
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)

    events += write_clicks(inp, range(7, 10))
    api.run(home, JOB, "from-back", params={"input": str(inp), "output": str(tmp_path / "o2"),
                                             "files_per_batch": "1"},
            conf={"spark.sql.streaming.fileSink.log.compactInterval": "1000"},
            from_snapshot="back", until_caught_up=True, spark=spark)  # type: ignore[arg-type]
    before = output_rows(spark, out, sink_files_up_to(out, batch))  # type: ignore[arg-type]
    after = output_rows(spark, tmp_path / "o2",  # type: ignore[arg-type]
                        sink_files_up_to(tmp_path / "o2", 1 << 30))
    assert before and after
    assert before + after == expected_hourly_counts(events)
