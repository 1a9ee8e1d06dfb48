"""`jobs delete` of a job in a home on S3 (moto) and on HDFS (a MiniDFSCluster): a tombstone
first, then the files; a delete cut off after the tombstone (crash point
jobs.delete_tombstoned) is finished by the next command that looks at the job, from any
machine, and the job is gone from every listing.

On main before this change the bucket's files were deleted first, one by one, so a cut-off
delete left a job listed with part of its files.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from sparkpoint.crash_points import CRASH_ENV, CRASH_EXIT_CODE
from sparkpoint.runtime.registry import JobRecord, JobRegistry
from sparkpoint.storage.fileio import join
from sparkpoint.storage.home import Home
from sparkpoint.storage.stores import file_io
from tests.support.cli import sparkpoint


@pytest.fixture(params=["s3", "hdfs"])
def home(request: pytest.FixtureRequest, tmp_path: Path,
         monkeypatch: pytest.MonkeyPatch) -> Home:
    """A home in a store with a stopped job "j": its record and three offsets files."""
    server: Any = request.getfixturevalue("s3_server" if request.param == "s3"
                                          else "hdfs_server")
    for name, value in server.env.items():
        os.environ.setdefault(name, value)
    monkeypatch.setenv("SPARKPOINT_SCRATCH", str(tmp_path / "machine_a"))
    location = f"s3://{server.new_bucket()}/home" if request.param == "s3" else \
        join(server.new_dir(), "home")
    home = Home.resolve(location)
    registry = JobRegistry(home)
    registry.save(JobRecord(name="j", job_file="job.py", status="stopped"))
    offsets = home.checkpoint_dir("j") / "offsets"
    offsets.mkdir(parents=True)
    for batch in range(3):
        (offsets / str(batch)).write_text("v1\n{}\n")
    assert len(_job_files(home)) == 4
    return home


def _job_files(home: Home) -> set[str]:
    job = home.job_url("j")
    return set(file_io(job).walk_sizes(job))


def test_a_delete_cut_off_after_its_tombstone_is_finished_by_the_next_listing(
    home: Home, tmp_path: Path
) -> None:
    crashed = sparkpoint(home, "jobs", "delete", "j",
                         env={CRASH_ENV: "jobs.delete_tombstoned"})
    assert crashed.code == CRASH_EXIT_CODE, crashed.err
    assert "deleted" in _job_files(home)

    # Another machine lists the jobs: the deletion is finished there, nothing is listed.
    listed = sparkpoint(home, "jobs", "list", "--json",
                        env={"SPARKPOINT_SCRATCH": str(tmp_path / "machine_b")})
    assert listed.code == 0, listed.err
    assert listed.json() == []
    assert _job_files(home) == set()
    shown = sparkpoint(home, "jobs", "show", "j")
    assert shown.code == 4 and "UNKNOWN_JOB" in shown.err, shown.err


def test_a_job_deleted_whole_leaves_nothing_in_the_home(home: Home) -> None:
    deleted = sparkpoint(home, "jobs", "delete", "j")
    assert deleted.code == 0, deleted.err
    assert _job_files(home) == set()
    assert sparkpoint(home, "jobs", "list", "--json").json() == []
