"""The Python API driven as a notebook drives it: a query started in the caller's own
SparkSession with a build function (no job file), snapshotted while it runs, watched by the
CLI from another process, drained in-process; a job continued from the live snapshot."""

from __future__ import annotations

import datetime as dt
import importlib.util
from pathlib import Path
from typing import Any

import pytest

import sparkpoint
from sparkpoint import api
from sparkpoint.storage.home import Home
from sparkpoint.testing import expected_hourly_counts, output_rows, sink_files_up_to, write_clicks
from tests.conftest import EXAMPLES
from tests.support.cli import files_committed, wait_for
from tests.support.cli import sparkpoint as cli

pytestmark = pytest.mark.spark


def _example_build() -> Any:
    """The example job's build function, as a notebook cell would define it."""
    spec = importlib.util.spec_from_file_location("clicks_notebook", EXAMPLES / "clicks_job.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.build


def test_notebook_starts_snapshots_and_drains_in_process(
    spark: object, home: Home, tmp_path: Path
) -> None:
    build = _example_build()
    inp, out = tmp_path / "in", tmp_path / "out"
    events = write_clicks(inp, range(0, 3))
    params = {"input": str(inp), "output": str(out), "files_per_batch": "1"}
    lines: list[str] = []
    query = sparkpoint.start(spark, build, job="nb", home=home.root, params=params,  # type: ignore[arg-type]
                             echo=lines.append)
    try:
        assert query.isActive
        wait_for(lambda: files_committed(home, "nb", "clicks") == 3, 180, "3 files")
        # Another process sees a managed job like any other.
        shown = cli(home, "jobs", "show", "nb", "--json").json()
        assert shown["status"] == "running"
        assert shown["job_file"].startswith("python:clicks_notebook.build")
        live = sparkpoint.snapshot_create("nb", "nb-live", home=home.root)
        assert {op.name for op in live.operators} == {"dedup_clicks", "hourly_counts"}

        events += write_clicks(inp, range(3, 5))
        wait_for(lambda: files_committed(home, "nb", "clicks") == 5, 180, "5 files")
        drained = sparkpoint.drain_job(spark, "nb", home=home.root, build=build,  # type: ignore[arg-type]
                                   snapshot="nb-drained")
    finally:
        if query.isActive:
            query.stop()
    assert not query.isActive
    assert sparkpoint.await_job("nb").status == "stopped"
    assert drained.snapshot == "nb-drained"
    assert api.job_view(home, "nb").status == "drained"
    # Drained: every window of the input was emitted, once.
    every_window = expected_hourly_counts(events, delay=dt.timedelta(days=-2))
    assert output_rows(spark, out) == every_window  # type: ignore[arg-type]
    assert any("starting at batch 0" in line for line in lines)

    # The live snapshot continues in a new job (the CLI this time) with nothing lost.
    events += write_clicks(inp, range(5, 7))
    again = api.run(home, EXAMPLES / "clicks_job.py", "nb-2", from_snapshot="nb-live",
                    params={**params, "output": str(tmp_path / "o2")}, until_caught_up=True,
                    spark=spark)  # type: ignore[arg-type]
    assert again.first_batch == live.batch_id
    before = output_rows(spark, out, sink_files_up_to(out, live.batch_id))  # type: ignore[arg-type]
    after = output_rows(spark, tmp_path / "o2")  # type: ignore[arg-type]
    assert before + after == expected_hourly_counts(events)


def test_start_refusals_raise_before_any_query(spark: object, home: Home,
                                               tmp_path: Path) -> None:
    build = _example_build()
    with pytest.raises(sparkpoint.SparkpointError, match="not valid"):
        sparkpoint.start(spark, build, job="../x", home=home.root)  # type: ignore[arg-type]
    with pytest.raises(sparkpoint.SparkpointError, match="not found"):
        sparkpoint.start(spark, build, job="fresh", home=home.root,  # type: ignore[arg-type]
                         from_snapshot="missing", params={"input": str(tmp_path)})
    assert not spark.streams.active  # type: ignore[attr-defined]
