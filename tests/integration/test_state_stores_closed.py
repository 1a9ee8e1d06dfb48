"""A run in a process that goes on leaves no state store loaded to write into its
checkpoint afterwards (``spark/state_stores.py``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from sparkpoint import api
from sparkpoint.spark.state_stores import maintenance_running
from sparkpoint.storage.home import Home
from sparkpoint.testing import write_clicks

JOB = Path(__file__).resolve().parent.parent / "data" / "jobs" / "windowed_counts.py"
pytestmark = pytest.mark.spark


def test_spark_keeps_a_stopped_querys_state_stores_and_a_run_closes_them(
    spark: Any, home: Home, tmp_path: Path
) -> None:
    inp = tmp_path / "in"
    write_clicks(inp, range(0, 2))
    # Spark's own behaviour: a stateful query stopped, its providers stay loaded and the
    # maintenance task that will write into its checkpoint goes on.
    session = spark.newSession()
    query = (session.readStream.schema("user STRING").json(str(inp)).groupBy("user").count()
             .writeStream.format("noop").outputMode("update")
             .option("checkpointLocation", str(tmp_path / "plain")).start())
    try:
        query.processAllAvailable()
    finally:
        query.stop()
    assert maintenance_running(spark)

    api.run(home, JOB, "v", params={"input": str(inp), "output": str(tmp_path / "out")},
            until_caught_up=True, spark=spark)
    assert not maintenance_running(spark)
