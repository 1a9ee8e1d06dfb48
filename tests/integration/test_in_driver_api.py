"""The Python API driven as a notebook drives it: a query started in the caller's own
SparkSession with a build function (no job file), snapshotted while it runs, watched by the
CLI from another process, drained in-process; a job continued from the live snapshot."""

from __future__ import annotations

import datetime as dt
import importlib.util
import json
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

import sparkpoint
from sparkpoint import api
from sparkpoint.checkpoint.logs import SOURCE_EVOLUTION_CONF
from sparkpoint.checkpoint.rocksdb_state import ROCKSDB_PROVIDER
from sparkpoint.errors import JobRunningError
from sparkpoint.runtime.registry import JobRegistry
from sparkpoint.spark.session import PROVIDER_CONF
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

    # A start from a snapshot in the notebook hands its query over as a fresh start does
    # (it ran to its end first, and was then refused as "ended before its query started").
    started = sparkpoint.start(spark, build, job="nb-3", home=home.root,  # type: ignore[arg-type]
                               from_snapshot="nb-live", until_caught_up=True,
                               params={**params, "output": str(tmp_path / "o3")})
    assert started.id is not None
    assert sparkpoint.await_job("nb-3").first_batch == live.batch_id
    assert output_rows(spark, tmp_path / "o3") == after  # type: ignore[arg-type]


def test_start_refusals_raise_before_any_query(spark: object, home: Home,
                                               tmp_path: Path) -> None:
    build = _example_build()
    with pytest.raises(sparkpoint.SparkpointError, match="not valid"):
        sparkpoint.start(spark, build, job="../x", home=home.root)  # type: ignore[arg-type]
    with pytest.raises(sparkpoint.SparkpointError, match="not found"):
        sparkpoint.start(spark, build, job="fresh", home=home.root,  # type: ignore[arg-type]
                         from_snapshot="missing", params={"input": str(tmp_path)})

    def callers_writer(_given: Any, ctx: Any) -> Any:  # the notebook's `spark`, not build's
        return (spark.readStream.schema("event_id STRING")  # type: ignore[attr-defined]
                .json(str(tmp_path))
                .writeStream.format("parquet").option("path", str(tmp_path / "out")))

    with pytest.raises(sparkpoint.SparkpointError,
                       match="returned a writer of another SparkSession"):
        sparkpoint.start(spark, callers_writer, job="foreign", home=home.root)  # type: ignore[arg-type]
    assert not spark.streams.active  # type: ignore[attr-defined]


# What sparkpoint sets on the session a job runs in, and the job's own conf in the tests below.
_SET_BY_SPARKPOINT = (PROVIDER_CONF, SOURCE_EVOLUTION_CONF, "spark.sql.shuffle.partitions")
_JOB_CONF = {"spark.sql.shuffle.partitions": "3"}
_CLICK_SCHEMA = "event_id STRING, user STRING, url STRING, ts TIMESTAMP"


def _offsets_conf(checkpoint: Path, batch: int) -> dict[str, str]:
    """The SQL confs Spark recorded with a batch in the offsets log (line 2, its metadata)."""
    lines = (checkpoint / "offsets" / str(batch)).read_text().splitlines()
    conf: dict[str, str] = json.loads(lines[1])["conf"]
    return conf


def _unique_clicks_tagged(spark: Any, ctx: Any) -> Any:
    """A notebook's build function using a function the notebook registered (user_tag)."""
    from pyspark.sql import functions as F

    clicks = spark.readStream.name("clicks").schema(_CLICK_SCHEMA).json(ctx.require_param("input"))
    unique = ctx.stateful("unique_clicks", clicks.dropDuplicates(["event_id"]))
    return (unique.select("event_id", F.expr("user_tag(user)")).writeStream.format("parquet")
            .option("path", ctx.require_param("output")))


def _callers_counts(spark: Any, inp: Path, checkpoint: Path) -> Counter[tuple[Any, ...]]:
    """The caller's own stateful query (users counted, into a memory table), run to the end
    of its input while the managed job runs."""
    query = (spark.readStream.schema(_CLICK_SCHEMA).json(str(inp)).groupBy("user").count()
             .writeStream.format("memory").queryName("callers_counts").outputMode("complete")
             .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start())
    query.awaitTermination()
    assert query.exception() is None
    return Counter(tuple(row) for row in spark.table("callers_counts").collect())


def test_a_started_job_leaves_the_callers_session_settings_alone(
    spark: Any, home: Home, tmp_path: Path
) -> None:
    inp, out = tmp_path / "in", tmp_path / "out"
    events = write_clicks(inp, range(0, 2))
    # What the caller set (None: not set) and what its queries get (Spark's defaults).
    before = {key: spark.conf.get(key, None) for key in _SET_BY_SPARKPOINT}
    effective = {key: spark.conf.get(key) for key in _SET_BY_SPARKPOINT}
    assert effective[PROVIDER_CONF] != ROCKSDB_PROVIDER  # else the test could not tell
    spark.udf.register("user_tag", lambda user: f"<{user}>", "string")
    query = sparkpoint.start(spark, _unique_clicks_tagged, job="own", home=home.root,
                             params={"input": str(inp), "output": str(out)}, conf=_JOB_CONF,
                             echo=lambda _l: None)
    try:
        # Batch 0 reads both files (no maxFilesPerTrigger).
        wait_for(lambda: (home.checkpoint_dir("own") / "commits" / "0").exists(), 180,
                 "batch 0 of job 'own'")
        # While the job runs, the caller's session and a query of the caller's have the
        # caller's settings, not the job's.
        assert {key: spark.conf.get(key, None) for key in _SET_BY_SPARKPOINT} == before
        counts = _callers_counts(spark, inp, tmp_path / "callers-checkpoint")
        recorded = _offsets_conf(tmp_path / "callers-checkpoint", 0)
        assert recorded[PROVIDER_CONF] == effective[PROVIDER_CONF]
        assert recorded["spark.sql.shuffle.partitions"] == \
            effective["spark.sql.shuffle.partitions"] != "3"
        assert query.isActive
    finally:
        query.stop()
    assert sparkpoint.await_job("own").status == "stopped"
    assert {key: spark.conf.get(key, None) for key in _SET_BY_SPARKPOINT} == before
    # The job had its settings, and the caller's function.
    job_conf = _offsets_conf(home.checkpoint_dir("own"), 0)
    assert job_conf[PROVIDER_CONF] == ROCKSDB_PROVIDER
    assert job_conf["spark.sql.shuffle.partitions"] == "3"
    assert output_rows(spark, out) == Counter({(c.event_id, f"<{c.user}>") for c in events})
    assert counts == Counter(Counter(c.user for c in events).items())


def test_a_second_start_of_a_running_job_is_refused_at_once(
    spark: Any, home: Home, tmp_path: Path
) -> None:
    build = _example_build()
    inp = tmp_path / "in"
    write_clicks(inp, range(0, 1))
    params = {"input": str(inp), "output": str(tmp_path / "out")}
    query = sparkpoint.start(spark, build, job="once", home=home.root, params=params,
                             echo=lambda _l: None)
    try:
        began = time.monotonic()
        with pytest.raises(JobRunningError) as second_start:
            sparkpoint.start(spark, build, job="once", home=home.root, params=params)
        # A run from another thread than the job's is refused at once as well.
        with pytest.raises(JobRunningError) as other_thread:
            api.run(home, Path("python:clicks_notebook.build"), "once", params=params,
                    spark=spark, build=build)
        # Each refusal waited 120 s for the lock before.
        assert time.monotonic() - began < 30
        for refused in (second_start, other_thread):
            assert "job 'once' is already running in this process" in str(refused.value)
        assert query.isActive
    finally:
        query.stop()
    # Stopped, it starts again at once (its thread may still be recording the stop).
    sparkpoint.start(spark, build, job="once", home=home.root, params=params,
                     until_caught_up=True, echo=lambda _l: None)
    assert sparkpoint.await_job("once", timeout=300).status == "stopped"
    runs = JobRegistry(home).get("once").runs
    assert [run.status for run in runs] == ["stopped", "stopped"]


def _failing_on_boom(spark: Any, ctx: Any) -> Any:
    """A job whose Python UDF raises on one input value."""
    from pyspark.sql import functions as F

    def checked(user: str) -> str:
        if user == "boom":
            raise ValueError(f"cannot take user {user}")
        return user

    users = spark.readStream.name("users").schema("user STRING").json(ctx.require_param("input"))
    return (users.select(F.udf(checked, "string")("user").alias("user"))
            .writeStream.format("parquet").option("path", ctx.require_param("output")))


def test_a_query_failing_in_a_batch_is_raised_by_await_job(
    spark: Any, home: Home, tmp_path: Path
) -> None:
    inp = tmp_path / "in"
    inp.mkdir()
    (inp / "users.json").write_text('{"user": "ana"}\n{"user": "boom"}\n')
    query = sparkpoint.start(spark, _failing_on_boom, job="fails", home=home.root,
                             params={"input": str(inp), "output": str(tmp_path / "out")},
                             echo=lambda _l: None)
    with pytest.raises(sparkpoint.SparkpointError, match="job 'fails' failed") as raised:
        sparkpoint.await_job("fails", timeout=300)
    assert "cannot take user boom" in str(raised.value)
    assert not query.isActive
    assert api.job_view(home, "fails").status == "failed"
