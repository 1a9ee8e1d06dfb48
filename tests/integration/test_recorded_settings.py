"""A job's recorded settings (its --conf) reused by the commands that start Spark for a
version of it (``runtime/recorded.py``): the settings given win key by key, the ones used are
said. Seen through a setting whose effect a plan reports: the shuffle partitions, which a
resumed operator's state is repartitioned to."""

from __future__ import annotations

from pathlib import Path

import pytest

from sparkpoint import api
from sparkpoint.runtime.registry import JobRegistry
from sparkpoint.storage.home import Home
from sparkpoint.testing import write_clicks
from tests.conftest import REPO

pytestmark = pytest.mark.spark
JOB = REPO / "tests" / "data" / "jobs" / "windowed_counts.py"
PARTITIONS = "spark.sql.shuffle.partitions"


def test_plan_and_resume_point_build_take_the_snapshot_jobs_recorded_conf(
    spark: object, home: Home, tmp_path: Path
) -> None:
    write_clicks(tmp_path / "in", range(0, 2))
    params = {"input": str(tmp_path / "in"), "output": str(tmp_path / "out1")}
    api.run(home, JOB, "a1", params=params, conf={PARTITIONS: "2"}, until_caught_up=True,
            spark=spark)  # type: ignore[arg-type]
    api.snapshot_create(home, "a1", "s1")
    # The job runs on with another setting (its checkpoint keeps 2, as Spark does): the
    # record now says 3, and a start of a new version from s1 would repartition to 3.
    api.run(home, JOB, "a1", conf={PARTITIONS: "3"}, until_caught_up=True,
            spark=spark)  # type: ignore[arg-type]
    assert JobRegistry(home).get("a1").conf == {PARTITIONS: "3"}

    new = {**params, "output": str(tmp_path / "out2")}
    said: list[str] = []
    plan = api.plan(home, JOB, params=new, from_snapshot="s1", spark=spark,  # type: ignore[arg-type]
                    echo=said.append)
    assert plan.ok, plan.problems
    assert [op.repartition for op in plan.operators] == [(2, 3)]
    assert f"settings of job a1 used: {PARTITIONS}=3" in said

    # Given settings win; nothing recorded is used, nothing said.
    said.clear()
    plan = api.plan(home, JOB, params=new, conf={PARTITIONS: "2"}, from_snapshot="s1",
                    spark=spark, echo=said.append)  # type: ignore[arg-type]
    assert [op.repartition for op in plan.operators] == [None]
    assert not [line for line in said if line.startswith("settings of job")], said

    said.clear()
    api.resume_point_build(home, JOB, "s1", params=new, spark=spark,  # type: ignore[arg-type]
                           echo=said.append)
    assert f"settings of job a1 used: {PARTITIONS}=3" in said
