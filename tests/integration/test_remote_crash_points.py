"""Crash points of the commands that change a job, on a home in S3 (moto's server, Spark
through s3a) with its snapshots in the same store: a start from a snapshot (whose state is
copied inside the store), a drain and a startpoint application, each cut off at every one of
its points (``SPARKPOINT_CRASH_AT``: the process ends at once, as ``kill -9`` would) and
finished or rolled back by the next ordinary command, from another machine.

The points of one command are walked in one test, on one job, one after the other: each
cut-off is checked and finished before the next point is tried, so that a later point sees
what a finished earlier one left (and the suite does not start a job per point). What the
user ends up with is compared with rows computed from the input, without Spark.
"""

from __future__ import annotations

import shutil
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from sparkpoint import api
from sparkpoint.crash_points import CRASH_ENV, CRASH_EXIT_CODE, CRASH_POINTS
from sparkpoint.storage.fileio import file_io
from sparkpoint.storage.home import Home
from sparkpoint.testing import expected_hourly_counts, output_rows, write_clicks
from tests.conftest import EXAMPLES, SHUFFLE_PARTITIONS
from tests.support.cli import Result, sparkpoint
from tests.support.s3 import S3Server

JOB = EXAMPLES / "clicks_job.py"
S3A_JARS = Path(__file__).resolve().parents[2] / ".cache" / "s3a" / "lib"
pytestmark = pytest.mark.spark

# A start that keeps the snapshot's partitions copies its state inside the store; the
# repartition points are walked on a local home (test_restore_crash.py).
RESTORE_POINTS = [p for p in CRASH_POINTS if p.startswith("restore.")
                  and p not in ("restore.repartitioned", "restore.hdfs_partition_moved")]
PUBLISHED_AT = {"restore.published", "restore.sink_seeded"}
STATE_SUFFIXES = (".sst", ".zip", ".changelog", ".delta", ".snapshot")


def _s3a_jars() -> str:
    jars = sorted(str(jar) for jar in S3A_JARS.glob("*.jar"))
    if not jars:
        pytest.fail(f"no s3a jars in {S3A_JARS}: run scripts/test-deps.sh")
    return ",".join(jars)


def _crash(home: Home, point: str, machine: Path, *args: str) -> Result:
    cut = sparkpoint(home, *args, env={CRASH_ENV: point, "SPARKPOINT_SCRATCH": str(machine)})
    assert cut.code == CRASH_EXIT_CODE, (point, cut.code, cut.err[-3000:])
    assert f"crash point {point}" in cut.err
    return cut


def _s3_home(s3_server: S3Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Home:
    monkeypatch.setenv("SPARKPOINT_SCRATCH", str(tmp_path / "machine_a"))
    return Home.resolve(f"s3://{s3_server.new_bucket()}/home")


def test_start_from_a_snapshot_on_s3_cut_off_at_each_point_is_rolled_back_and_rebuilt(
    spark: Any, s3_server: S3Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = _s3_home(s3_server, tmp_path, monkeypatch)
    inp = tmp_path / "in"
    events = write_clicks(inp, range(0, 3))
    params = {"input": str(inp), "output": str(tmp_path / "v1"), "files_per_batch": "1"}
    api.run(home, JOB, "v1", params=params, until_caught_up=True, spark=spark)
    api.snapshot_create(home, "v1", "s1")
    events += write_clicks(inp, range(3, 5))
    expected = expected_hourly_counts(events)
    first = output_rows(spark, tmp_path / "v1")

    for point in RESTORE_POINTS:
        job = "after-" + point.split(".", 1)[1].replace("_", "-")
        out = tmp_path / job
        machine = tmp_path / f"machine-{job}"
        _crash(home, point, machine, "run", str(JOB), "--job", job, "--from-snapshot", "s1",
               "--param", f"input={inp}", "--param", f"output={out}",
               "--param", "files_per_batch=1",
               "--conf", f"spark.sql.shuffle.partitions={SHUFFLE_PARTITIONS}",
               "--conf", f"spark.jars={_s3a_jars()}", "--until-caught-up")
        assert job not in [view.record.name for view in api.jobs_list(home)], point
        in_home = file_io(home.location).walk_sizes(home.checkpoint_location(job))
        assert bool(in_home) == (point not in ("restore.job_locked", "restore.assembled")), \
            (point, sorted(in_home)[:5])
        if point == "restore.files_uploaded":
            # The logs are there, the state the store was to copy is not: not a checkpoint
            # any command may continue.
            assert any(rel.startswith("offsets/") for rel in in_home), sorted(in_home)
            assert not any(rel.endswith(STATE_SUFFIXES) for rel in in_home), sorted(in_home)
        shutil.rmtree(machine)  # the machine is gone; the next start runs elsewhere

        said: list[str] = []
        api.run(home, JOB, job, params={**params, "output": str(out)}, from_snapshot="s1",
                until_caught_up=True, spark=spark, echo=said.append)
        rolled_back = point not in ("restore.job_locked", "restore.assembled")
        assert any("interrupted" in line for line in said) == rolled_back, (point, said)
        assert api.job_view(home, job).record.lineage.from_snapshot == "s1"
        # Nothing lost, nothing twice: the first job's windows and the new job's are every
        # window of the input.
        assert first + output_rows(spark, out) == expected, point
    assert sorted(view.record.name for view in api.jobs_list(home)) == \
        sorted(["v1", *("after-" + p.split(".", 1)[1].replace("_", "-")
                        for p in RESTORE_POINTS)])
    assert Counter(api.snapshot_verify(home, "s1")) == Counter()
