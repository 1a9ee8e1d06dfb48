"""A job started from a snapshot writes into an output only if the snapshot is of the lineage
of the job that wrote it.

Spark's file sink takes a new job's batch ids for the next ones of the table it finds
(``FileStreamSink.addBatch`` skips the ids its log holds): a start from a snapshot of an
unrelated job into another job's output continued that job's table with rows of another
state. A snapshot of the writer, or of the job the writer was started from (an upgrade, a
rollback), is the upgrade path and stays under the batch numbering rules (SINK_AHEAD).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from sparkpoint import api
from sparkpoint.checkpoint.sink_log import latest_batch
from sparkpoint.errors import SinkAheadError
from sparkpoint.storage.home import Home
from sparkpoint.testing import output_rows, write_clicks
from tests.integration.test_sink_log_gaps import expected_windows
from tests.support.cli import sparkpoint

JOB = Path(__file__).resolve().parent.parent / "data" / "jobs" / "windowed_counts.py"
pytestmark = pytest.mark.spark


def files_of(directory: Path) -> dict[Path, tuple[int, bytes]]:
    return {p: (p.stat().st_mtime_ns, p.read_bytes()) for p in directory.rglob("*")
            if p.is_file()}


def test_start_from_a_snapshot_outside_the_writers_lineage_is_refused(
    spark: Any, home: Home, tmp_path: Path
) -> None:
    inp = tmp_path / "in"
    out_v, out, out_u = tmp_path / "out_v", tmp_path / "out", tmp_path / "out_u"

    def params(output: Path) -> dict[str, str]:
        return {"input": str(inp), "output": str(output)}

    # v writes its own output; w, its upgrade from a snapshot of v, writes `out`; u is a job
    # of its own over the same input.
    events = write_clicks(inp, range(0, 2))
    api.run(home, JOB, "v", params=params(out_v), until_caught_up=True, spark=spark)
    api.snapshot_create(home, "v", "s_v")
    rows_of_v = output_rows(spark, out_v)  # windows closed before s_v: in out_v, not in out
    events += write_clicks(inp, range(2, 4))
    api.run(home, JOB, "w", params=params(out), from_snapshot="s_v", until_caught_up=True,
            spark=spark)
    api.snapshot_create(home, "w", "s_w")
    api.run(home, JOB, "u", params=params(out_u), until_caught_up=True, spark=spark)
    api.snapshot_create(home, "u", "s_u")
    assert output_rows(spark, out) == expected_windows(events) - rows_of_v

    # A snapshot of u into w's output: refused, nothing changed, even with the batch ids
    # numbered past the table's (which satisfies the numbering rules).
    before = files_of(out)
    refused = sparkpoint(home, "run", str(JOB), "--job", "x", "--from-snapshot", "s_u",
                         "--renumber-batches", "--param", f"input={inp}",
                         "--param", f"output={out}", "--until-caught-up")
    assert refused.code == 4, refused.err
    line = refused.err.strip().splitlines()[-1]
    assert "[OUTPUT_HAS_HISTORY]" in line and "Traceback" not in refused.err, refused.err
    for named in (str(out), "job 'w'", "'s_u' (of job 'u')", "'v'",
                  "new, empty output directory"):
        assert named in line, named
    assert files_of(out) == before
    assert not home.job_dir("x").exists()  # no record, checkpoint or job directory
    assert "x" not in [view.record.name for view in api.jobs_list(home)]

    # plan lists it among the start's problems.
    planned = api.plan(home, JOB, params=params(out), from_snapshot="s_u",
                       renumber_batches=True, spark=spark)
    assert len(planned.problems) == 1 and not planned.ok, planned.problems
    assert "'s_u' (of job 'u')" in planned.problems[0] and "job 'w'" in planned.problems[0]

    # A snapshot of the writer itself: the upgrade continues the table.
    events += write_clicks(inp, range(4, 6))
    api.run(home, JOB, "w2", params=params(out), from_snapshot="s_w", until_caught_up=True,
            spark=spark)
    assert output_rows(spark, out) == expected_windows(events) - rows_of_v

    # A snapshot of a job started from w's (a version tried on an output of its own).
    api.run(home, JOB, "d", params=params(tmp_path / "out_d"), from_snapshot="s_w",
            until_caught_up=True, spark=spark)
    api.snapshot_create(home, "d", "s_d")
    descendant = api.plan(home, JOB, params=params(out), from_snapshot="s_d",
                          renumber_batches=True, spark=spark)
    assert descendant.ok, descendant.problems

    # A snapshot of the job w was started from (a rollback): the batch numbering rules
    # apply, not the refusal; renumbered, the replayed batches come after w2's.
    with pytest.raises(SinkAheadError):
        api.run(home, JOB, "x", params=params(out), from_snapshot="s_v", until_caught_up=True,
                spark=spark)
    assert not home.job_dir("x").exists()
    table, latest = output_rows(spark, out), latest_batch(out)
    assert latest is not None
    rolled_back = api.run(home, JOB, "x", params=params(out), from_snapshot="s_v",
                          renumber_batches=True, until_caught_up=True, spark=spark)
    assert rolled_back.first_batch == latest  # the checkpoint's batch: it runs latest + 1 on
    assert output_rows(spark, out) == table + (expected_windows(events) - rows_of_v)


def run_plain_windowed_counts(spark: Any, inp: Path, out: Path, checkpoint: Path) -> None:
    """windowed_counts.py as written without sparkpoint."""
    from pyspark.sql import functions as F

    counts = (spark.readStream.schema("event_id STRING, user STRING, url STRING, ts TIMESTAMP")
              .json(str(inp)).withWatermark("ts", "10 minutes")
              .groupBy(F.window("ts", "10 minutes").alias("window"), "user").count())
    query = (counts.select("window.start", "window.end", "user", "count")
             .writeStream.format("parquet").option("path", str(out))
             .option("checkpointLocation", str(checkpoint)).outputMode("append")
             .trigger(availableNow=True).start())
    query.awaitTermination()
    assert query.exception() is None


def test_adopted_plain_query_continues_into_its_own_output(
    spark: Any, home: Home, tmp_path: Path
) -> None:
    """The output of a query run outside sparkpoint has no writer the home knows: only the
    batch numbering rules apply to it. Once the adopted job wrote it, the imported snapshot
    is of that job's lineage (a rollback stays possible)."""
    inp, out = tmp_path / "in", tmp_path / "out"
    params = {"input": str(inp), "output": str(out)}
    write_clicks(inp, range(0, 2))
    run_plain_windowed_counts(spark, inp, out, tmp_path / "plain-ckpt")
    api.run(home, JOB, "elsewhere", params={**params, "output": str(tmp_path / "other")},
            until_caught_up=True, spark=spark)  # the home knows writers, none of `out`
    api.snapshot_import(home, tmp_path / "plain-ckpt", "adopted", JOB, params=params,
                        spark=spark)

    plain_rows, plain_latest = output_rows(spark, out), latest_batch(out)
    assert plain_rows and plain_latest is not None

    # The rows the adopted job adds are issue 18's D1 (tests of the import); here: it runs,
    # its batches follow the plain query's in the same table.
    write_clicks(inp, range(2, 4))
    adopted = api.run(home, JOB, "adopted-job", params=params, from_snapshot="adopted",
                      until_caught_up=True, spark=spark)
    assert adopted.batches_run > 0 and adopted.last_batch == latest_batch(out)
    assert adopted.first_batch == plain_latest
    assert output_rows(spark, out) - plain_rows and not plain_rows - output_rows(spark, out)
    rollback = api.plan(home, JOB, params=params, from_snapshot="adopted",
                        renumber_batches=True, spark=spark)
    assert rollback.ok, rollback.problems
