"""A stopped job made without Spark: Spark's own checkpoint of the clicks job (tests/data/
golden-rocks or golden-hdfs) and its record, for tests that need no JVM; by default in a local
home whose snapshots are in a store (S3 or HDFS), for tests of the snapshot store."""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from sparkpoint.runtime.registry import JobRecord, JobRegistry, OperatorRecord, SourceRecord
from sparkpoint.storage.fileio import join
from sparkpoint.storage.home import Home

GOLDEN = Path(__file__).resolve().parents[1] / "data" / "golden-rocks"
JOB = "j"


def home_with_snapshots_in(store: str, request: pytest.FixtureRequest, tmp_path: Path) -> Home:
    """``store``: "s3" (moto) or "hdfs" (the MiniDFSCluster); the job is named JOB."""
    server: Any = request.getfixturevalue("s3_server" if store == "s3" else "hdfs_server")
    for name, value in server.env.items():
        os.environ.setdefault(name, value)
    snapshots = f"s3://{server.new_bucket()}/snaps" if store == "s3" else \
        join(server.new_dir(), "snaps")
    home = Home(tmp_path / "home", snapshots)
    install_clicks_job(home, GOLDEN, JOB, tmp_path / "job.py")
    return home


def install_clicks_job(home: Home, checkpoint: Path, job: str, job_file: Path,
                       sources: Sequence[SourceRecord] = ()) -> None:
    """Job ``job`` in ``home`` (local or in a store), stopped, with a copy of ``checkpoint``
    (one of Spark's own of the clicks job) and the record of its two operators as the clicks
    job names them."""
    target = home.checkpoint_dir(job)
    if isinstance(target, Path):
        shutil.copytree(checkpoint, target)
    else:
        target.io.put_files([(path, join(target.url, path.relative_to(checkpoint).as_posix()))
                             for path in sorted(checkpoint.rglob("*")) if path.is_file()])
    JobRegistry(home).save(JobRecord(
        name=job, job_file=str(job_file), status="stopped",
        operators=[OperatorRecord(name="hourly_counts", operator_id=0,
                                  spark_operator_name="stateStoreSave", named_by_user=True),
                   OperatorRecord(name="dedup_clicks", operator_id=1,
                                  spark_operator_name="dedupe", named_by_user=True)],
        sources=list(sources)))
