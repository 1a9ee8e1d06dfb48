"""A stopped job made without Spark: Spark's own RocksDB checkpoint of the clicks job
(tests/data/golden-rocks) and its record, in a local home whose snapshots are in a store (S3
or HDFS), for tests of the snapshot store that need no JVM."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from sparkpoint.runtime.registry import JobRecord, JobRegistry, OperatorRecord
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
    shutil.copytree(GOLDEN, home.checkpoint_dir(JOB))
    JobRegistry(home).save(JobRecord(
        name=JOB, job_file=str(tmp_path / "job.py"), status="stopped",
        operators=[OperatorRecord(name="hourly_counts", operator_id=0,
                                  spark_operator_name="stateStoreSave", named_by_user=True),
                   OperatorRecord(name="dedup_clicks", operator_id=1,
                                  spark_operator_name="dedupe", named_by_user=True)]))
    return home
