"""A home and a snapshot store in S3 (moto's server, Spark through s3a) under the faults a
user meets: a `jobs delete` cut off, then a new job of the same name; a snapshot's file
changed in the bucket before a start copies it.

On main before this change:
- the new job continued the deleted job's checkpoint (it read nothing of its input again,
  its output stayed empty), and the next `jobs list` on any machine deleted its record and
  checkpoint while it ran;
- a start copying, inside the bucket, state files that carry only an xxh3 checksum (a
  snapshot of a job whose home is a machine's local disk) checked them by size alone: the
  changed file went into the new job, which ran.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from sparkpoint import api
from sparkpoint.crash_points import CRASH_ENV, CRASH_EXIT_CODE
from sparkpoint.errors import SnapshotDamagedError
from sparkpoint.runtime.registry import JobRegistry
from sparkpoint.storage.home import Home
from sparkpoint.testing import expected_hourly_counts, output_rows, write_clicks
from tests.integration.test_remote_home import JOB
from tests.support.cli import sparkpoint
from tests.support.s3 import S3Server

pytestmark = pytest.mark.spark


def _machine(tmp_path: Path, name: str) -> dict[str, str]:
    return {"SPARKPOINT_SCRATCH": str(tmp_path / name)}


def _params(inp: Path, out: Path) -> dict[str, str]:
    return {"input": str(inp), "output": str(out), "files_per_batch": "1"}


def _run(spark: Any, home: Home, job: str, inp: Path, out: Path, **start: Any) -> Any:
    """A run in this process (the session reaches s3a), as the CLI's run does."""
    return api.run(home, JOB, job, params=_params(inp, out), until_caught_up=True,
                   spark=spark, **start)


def test_a_new_job_after_a_cut_off_delete_starts_from_nothing_and_is_kept(
    spark: Any, s3_server: S3Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bucket = s3_server.new_bucket()
    monkeypatch.setenv("SPARKPOINT_SCRATCH", str(tmp_path / "machine_b"))
    home = Home.resolve(f"s3://{bucket}/home")
    inp = tmp_path / "in"
    events = write_clicks(inp, range(0, 6))
    _run(spark, home, "v1", inp, tmp_path / "out1")
    cut = sparkpoint(home, "jobs", "delete", "v1",
                     env={CRASH_ENV: "jobs.delete_tombstoned", **_machine(tmp_path, "machine_a")})
    assert cut.code == CRASH_EXIT_CODE, cut.err
    registry = JobRegistry(home)
    assert registry.tombstoned("v1") and not registry.exists("v1")

    # A new job of the same name, on another machine, into a new output: the deleted job's
    # leftovers go first, and the job reads its whole input as any new job does.
    said: list[str] = []
    _run(spark, home, "v1", inp, tmp_path / "out2", echo=said.append)
    assert any("finished removing the files of the deleted job" in line for line in said)
    expected = expected_hourly_counts(events)
    assert expected, "no window closes: the test input is too small"
    assert output_rows(spark, tmp_path / "out1") == expected
    assert output_rows(spark, tmp_path / "out2") == expected

    # A third machine lists the jobs: the new job is there and stays, whole. (A listing
    # between the cut-off delete and the run finishes the deletion the same way: the
    # unit tests of jobs delete show it.)
    listed = sparkpoint(home, "jobs", "list", "--json", env=_machine(tmp_path, "machine_c"))
    assert listed.code == 0, listed.err
    assert [row["name"] for row in listed.json()] == ["v1"]
    shown = sparkpoint(home, "jobs", "show", "v1", "--json")
    assert shown.code == 0, shown.err
    assert [run["status"] for run in shown.json()["runs"]] == ["stopped"]
    keys = s3_server.keys(bucket, "home/jobs/v1/")
    assert "home/jobs/v1/job.json" in keys and "home/jobs/v1/deleted" not in keys
    assert any(key.startswith("home/jobs/v1/checkpoint/commits/") for key in keys)


def _tamper(s3_server: S3Server, bucket: str, snapshot: str, drop_sha256: bool) -> tuple[str,
                                                                                           str]:
    """Change the largest state file of ``snapshot`` in the bucket, same size; with
    ``drop_sha256`` its manifest is rewritten as an earlier version wrote it (xxh3 only).
    Returns (the file's path in the snapshot, its blob's key)."""
    client = s3_server.client()
    manifest_key = f"snaps/{snapshot}/manifest.json"
    manifest = json.loads(client.get_object(Bucket=bucket, Key=manifest_key)["Body"].read())
    state = [entry for entry in manifest["files"]
             if entry["path"].startswith("checkpoint/state/") and "_metadata" not in
             entry["path"] and entry["bytes"] > 0]
    victim = max(state, key=lambda entry: entry["bytes"])
    assert victim["xxh3_128"] is not None and victim.get("sha256"), victim
    if drop_sha256:
        for entry in manifest["files"]:
            entry["sha256"] = None
        client.put_object(Bucket=bucket, Key=manifest_key,
                          Body=json.dumps(manifest, indent=2).encode())
    digest = victim["xxh3_128"]
    key = f"snaps/.files/{digest[:2]}/{digest}-{victim['bytes']}"
    original = client.get_object(Bucket=bucket, Key=key)["Body"].read()
    client.put_object(Bucket=bucket, Key=key, Body=bytes([original[0] ^ 0xFF]) + original[1:])
    return victim["path"], key


@pytest.mark.parametrize("drop_sha256", [False, True],
                         ids=["copied-in-the-store", "earlier-manifest-fetched"])
def test_a_start_refuses_a_snapshot_file_changed_in_the_bucket_and_leaves_nothing(
    spark: Any, s3_server: S3Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    drop_sha256: bool
) -> None:
    """A job on a machine's local disk, its snapshot in the bucket; the job continued from
    it in a home in the same bucket. Files of the new snapshot format carry a SHA-256 and
    are copied inside the bucket, each copy checked; files of an earlier manifest (xxh3
    only) are fetched and checked. Either way the changed file is named, and the home keeps
    nothing of the refused start."""
    bucket = s3_server.new_bucket()
    snapshots = f"s3://{bucket}/snaps"
    local = Home.resolve(str(tmp_path / "local-home"), snapshots)
    inp = tmp_path / "in"
    events = write_clicks(inp, range(0, 3))
    _run(spark, local, "v1", inp, tmp_path / "out1")
    api.snapshot_create(local, "v1", "s1")
    path, key = _tamper(s3_server, bucket, "s1", drop_sha256)

    monkeypatch.setenv("SPARKPOINT_SCRATCH", str(tmp_path / "machine_b"))
    home = Home.resolve(f"s3://{bucket}/home", snapshots)
    events += write_clicks(inp, range(3, 5))
    with pytest.raises(SnapshotDamagedError) as refused:
        _run(spark, home, "v2", inp, tmp_path / "out2", from_snapshot="s1")
    assert path in refused.value.message and "\n" not in refused.value.message
    assert refused.value.exit_code == 3
    assert s3_server.keys(bucket, "home/") == {}, "the refused start left files in the home"

    # The file put back, the same start runs, and continues exactly from the snapshot.
    client = s3_server.client()
    body = client.get_object(Bucket=bucket, Key=key)["Body"].read()
    client.put_object(Bucket=bucket, Key=key, Body=bytes([body[0] ^ 0xFF]) + body[1:])
    _run(spark, home, "v2", inp, tmp_path / "out2", from_snapshot="s1")
    combined = output_rows(spark, tmp_path / "out1") + output_rows(spark, tmp_path / "out2")
    assert combined == expected_hourly_counts(events)
    assert sum(Counter(combined).values()) > 0
