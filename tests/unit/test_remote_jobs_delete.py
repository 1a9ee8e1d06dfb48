"""`jobs delete` of a job in a home on S3 (moto): a tombstone first, then the files; a delete
cut off after the tombstone (crash point jobs.delete_tombstoned) is finished by the next
command that looks at the job, from any machine, and the job is gone from every listing.

On main before this change the bucket's files were deleted first, one by one, so a cut-off
delete left a job listed with part of its files.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from sparkpoint.crash_points import CRASH_ENV, CRASH_EXIT_CODE
from sparkpoint.runtime.registry import JobRecord, JobRegistry
from sparkpoint.storage.home import Home
from tests.support.cli import sparkpoint
from tests.support.s3 import S3Server


def _job_in_home(s3_server: S3Server, tmp_path: Path,
                 monkeypatch: pytest.MonkeyPatch) -> tuple[Home, str]:
    bucket = s3_server.new_bucket()
    monkeypatch.setenv("SPARKPOINT_SCRATCH", str(tmp_path / "machine_a"))
    home = Home.resolve(f"s3://{bucket}/home")
    registry = JobRegistry(home)
    registry.save(JobRecord(name="j", job_file="job.py", status="stopped"))
    offsets = home.checkpoint_dir("j") / "offsets"
    offsets.mkdir(parents=True)
    for batch in range(3):
        (offsets / str(batch)).write_text("v1\n{}\n")
    assert len(s3_server.keys(bucket, "home/jobs/j/")) == 4
    return home, bucket


def test_a_delete_cut_off_after_its_tombstone_is_finished_by_the_next_listing(
    s3_server: S3Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home, bucket = _job_in_home(s3_server, tmp_path, monkeypatch)
    crashed = sparkpoint(home, "jobs", "delete", "j",
                         env={CRASH_ENV: "jobs.delete_tombstoned"})
    assert crashed.code == CRASH_EXIT_CODE, crashed.err
    assert "home/jobs/j/deleted" in s3_server.keys(bucket, "home/jobs/j/")

    # Another machine lists the jobs: the deletion is finished there, nothing is listed.
    listed = sparkpoint(home, "jobs", "list", "--json",
                        env={"SPARKPOINT_SCRATCH": str(tmp_path / "machine_b")})
    assert listed.code == 0, listed.err
    assert listed.json() == []
    assert s3_server.keys(bucket, "home/jobs/j/") == {}
    shown = sparkpoint(home, "jobs", "show", "j")
    assert shown.code == 4 and "UNKNOWN_JOB" in shown.err, shown.err


def test_a_job_deleted_whole_leaves_nothing_in_the_home(
    s3_server: S3Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home, bucket = _job_in_home(s3_server, tmp_path, monkeypatch)
    deleted = sparkpoint(home, "jobs", "delete", "j")
    assert deleted.code == 0, deleted.err
    assert s3_server.keys(bucket, "home/jobs/j/") == {}
    assert sparkpoint(home, "jobs", "list", "--json").json() == []
