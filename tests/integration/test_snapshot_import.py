"""A checkpoint written by plain PySpark (no sparkpoint, Spark's defaults: HDFS state store
provider, unnamed sources, offsets log v1) is imported as a snapshot and continued as a
managed job: the output equals the rows computed from the input.

The plain query here runs two stateful operators at 8 shuffle partitions. Spark's default of
200 is walked by test_spark_examples_adopted.py on four of Spark's own example queries (each
imported from a 200-partition checkpoint it leaves unchanged, then continued with fewer);
a two-operator query at 200 partitions cost this file most of two minutes a run."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sparkpoint import api
from sparkpoint.checkpoint.source_log import read_source_log
from sparkpoint.storage.home import Home
from sparkpoint.testing import expected_hourly_counts, output_rows, write_clicks
from tests.conftest import EXAMPLES
from tests.support.cli import sparkpoint
from tests.support.spark_example_runs import tree_digest

JOB = EXAMPLES / "clicks_job.py"
REPO_JOBS = Path(__file__).resolve().parents[1] / "data" / "jobs"
pytestmark = pytest.mark.spark
PLAIN_PARTITIONS = "8"
FILES_PER_BATCH = 2


@pytest.fixture
def spark_plain(spark: object) -> Iterator[object]:
    """The shared session with the plain job's shuffle partitions (more than the managed
    continuation takes, so that the import's partition count is checked)."""
    conf = spark.conf  # type: ignore[attr-defined]
    before = conf.get("spark.sql.shuffle.partitions")
    conf.set("spark.sql.shuffle.partitions", PLAIN_PARTITIONS)
    yield spark
    conf.set("spark.sql.shuffle.partitions", before)


def run_plain_job(spark: object, inp: Path, out: Path, checkpoint: Path) -> None:
    """The clicks query as a team writes it without sparkpoint: no source name, no
    ctx.stateful, checkpoint wherever they chose."""
    from pyspark.sql import functions as F

    clicks = (
        spark.readStream  # type: ignore[attr-defined]
        .schema("event_id STRING, user STRING, url STRING, ts TIMESTAMP")
        .option("maxFilesPerTrigger", str(FILES_PER_BATCH))
        .json(str(inp))
    )
    hourly = (
        clicks.withWatermark("ts", "10 minutes").dropDuplicates(["event_id", "ts"])
        .groupBy(F.window("ts", "1 hour"), "user").agg(F.count("*").alias("clicks"))
    )
    query = (
        hourly.select(F.col("window.start").alias("window_start"),
                      F.col("window.end").alias("window_end"), "user", "clicks")
        .writeStream.format("parquet").option("path", str(out))
        .option("checkpointLocation", str(checkpoint)).outputMode("append")
        .trigger(availableNow=True).start()
    )
    query.awaitTermination()
    assert query.exception() is None




def test_plain_spark_checkpoint_imported_and_continued(
    spark_plain: object, home: Home, tmp_path: Path
) -> None:
    spark = spark_plain
    inp = tmp_path / "in"
    events = write_clicks(inp, range(0, 2))
    plain_ckpt = tmp_path / "plain-ckpt"
    run_plain_job(spark, inp, tmp_path / "plain-out", plain_ckpt)
    assert (plain_ckpt / "offsets" / "0").read_text().startswith("v1\n")
    before = tree_digest(plain_ckpt)

    result = sparkpoint(home, "snapshot", "import", str(plain_ckpt), "adopted",
                        "--job-file", str(JOB), "--param", f"input={inp}",
                        "--param", f"output={tmp_path / 'unused'}", "--json")
    assert result.code == 0, result.err
    assert tree_digest(plain_ckpt) == before, "import modified the checkpoint"
    manifest = api.snapshot_show(home, "adopted")
    assert [s.name for s in manifest.sources] == ["clicks"]
    assert {op.name for op in manifest.operators} == {"dedup_clicks", "hourly_counts"}
    assert {op.partitions for op in manifest.operators} == {int(PLAIN_PARTITIONS)}
    assert manifest.state_store_provider.endswith("HDFSBackedStateStoreProvider")
    assert api.snapshot_verify(home, "adopted") == []

    events += write_clicks(inp, range(2, 4))
    managed_out = tmp_path / "managed-out"
    # Continued into 4 partitions: fewer than the plain run's, as a job run at Spark's
    # defaults usually takes first.
    api.run(home, JOB, "adopted-job", params={"input": str(inp), "output": str(managed_out),
                                              "files_per_batch": str(FILES_PER_BATCH)},
            conf={"spark.sql.shuffle.partitions": "4"}, from_snapshot="adopted",
            until_caught_up=True, spark=spark)  # type: ignore[arg-type]
    # The dedupe drops a re-read file's events as duplicates or late, so the output alone
    # cannot show a source that started again from its first file (and the file source's
    # log lists each file once even then: a restart without a start offset reads the
    # listed files again). What shows it: the committed offsets must name the source, so
    # that 'jobs show' finds it caught up (test_adopt_plain_spark.py shows the doubled
    # counts of a query without a dedupe).
    log = read_source_log(home.checkpoint_dir("adopted-job") / "sources" / "clicks")
    listed = Counter(str(entry["path"]) for entries in log.values() for entry in entries)
    assert listed == Counter(p.absolute().as_uri() for p in sorted(inp.glob("*.json")))
    assert api.job_view(home, "adopted-job").files_behind == {"clicks": 0}
    # Compared with the rows computed from the input (an uninterrupted run of the plain
    # query gives the same: test_adopt_plain_spark.py and test_spark_examples_adopted.py
    # compare with such runs at Spark's defaults).
    expected = expected_hourly_counts(events)
    assert expected, "the input closes no hour: the test input is too small"
    combined = (output_rows(spark, tmp_path / "plain-out")  # type: ignore[arg-type]
                + output_rows(spark, managed_out))  # type: ignore[arg-type]
    assert combined == expected


def test_import_of_another_query_lists_every_mismatch_and_creates_nothing(
    spark: object, home: Home, tmp_path: Path
) -> None:
    """A job file that is not the query of the checkpoint: exit 3, each problem named."""
    from pyspark.sql import functions as F

    inp = tmp_path / "in"
    write_clicks(inp, range(0, 1))
    ckpt = tmp_path / "ckpt"
    frame = (spark.readStream.schema(  # type: ignore[attr-defined]
        "event_id STRING, user STRING, url STRING, ts TIMESTAMP").json(str(inp)))
    query = (frame.groupBy("url").agg(F.count("*").alias("n")).writeStream
             .format("memory").queryName("other_query").outputMode("complete")
             .option("checkpointLocation", str(ckpt)).trigger(availableNow=True).start())
    query.awaitTermination()
    result = sparkpoint(home, "snapshot", "import", str(ckpt), "wrong", "--job-file", str(JOB),
                        "--param", f"input={inp}", "--param", f"output={tmp_path / 'o'}")
    assert result.code == 3, result.err
    assert "dedup_clicks" in result.err and "hourly_counts" in result.err
    assert "key schema changed" in result.err
    assert "nothing was created" in result.err
    assert api.snapshot_list(home) == []
    missing = sparkpoint(home, "snapshot", "import", str(tmp_path / "nope"), "x",
                         "--job-file", str(JOB))
    assert missing.code == 2 and "expected a Spark streaming checkpoint" in missing.err


def _plain_examples() -> Any:
    """Spark's example queries as plain PySpark writes them (tests/data/spark_examples)."""
    import importlib.util

    path = Path(__file__).resolve().parents[1] / "data" / "spark_examples" / "plain.py"
    spec = importlib.util.spec_from_file_location("spark_examples_plain", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_import_of_a_checkpoint_behind_its_sink_says_what_a_start_from_it_needs(
    spark: object, home: Home, tmp_path: Path
) -> None:
    """Spark's structured_network_wordcount_windowed.py run as plain PySpark, stopped after
    its file sink wrote its last batch and before the commit log did (Spark commits the sink
    first; a kill in between leaves the checkpoint's last commit out, as removing it here
    does). The import says, in one warning line, which batch, which output and what a start
    from the snapshot needs; plan says it too, in its terms; the start refused without it
    says the same; with --rewind-output every line is counted once."""
    from sparkpoint.errors import SinkAheadError
    from tests.support import spark_examples as ex

    inp, out, ckpt = tmp_path / "input", tmp_path / "out", tmp_path / "plain-ckpt"
    lines = ex.write_lines(inp, range(0, 4))
    query = (_plain_examples().wordcount_windowed(spark, [str(inp)]).writeStream
             .format("parquet").option("path", str(out)).option("checkpointLocation", str(ckpt))
             .outputMode("append").trigger(availableNow=True).start())
    query.awaitTermination()
    assert query.exception() is None
    last = max(int(p.name) for p in (ckpt / "commits").iterdir() if p.name.isdigit())
    assert (out / "_spark_metadata" / str(last)).is_file()
    (ckpt / "commits" / str(last)).unlink()
    (ckpt / "commits" / f".{last}.crc").unlink(missing_ok=True)

    job = REPO_JOBS / "spark_example_wordcount.py"
    params = {"input": str(inp), "output": str(out)}
    said: list[str] = []
    api.snapshot_import(home, ckpt, "adopted", job, params=params, spark=spark,  # type: ignore[arg-type]
                        echo=said.append)
    warnings = [line for line in said if line.startswith("warning:")]
    assert len(warnings) == 1 and "\n" not in warnings[0], said
    assert (f"the output {out} holds batch {last} in its sink log, which {ckpt} planned and "
            f"did not commit") in warnings[0], warnings
    assert (f"snapshot 'adopted' holds batch {last - 1}, so a job started from it into {out} "
            "needs --rewind-output") in warnings[0], warnings

    plan = api.plan(home, job, params=params, from_snapshot="adopted",
                    spark=spark)  # type: ignore[arg-type]
    [problem] = plan.problems
    assert (f"the output {out} already holds batch {last} in its sink log (_spark_metadata), "
            f"which the checkpoint imported as snapshot 'adopted' ({ckpt}) planned and did "
            "not commit") in problem, problem
    assert "Pass --rewind-output" in problem and "--renumber-batches" not in problem, problem
    with pytest.raises(SinkAheadError) as refused:
        api.run(home, job, "adopted-job", params=params, from_snapshot="adopted",
                until_caught_up=True, spark=spark)  # type: ignore[arg-type]
    assert problem in refused.value.message

    lines += ex.write_lines(inp, range(4, 6))
    api.run(home, job, "adopted-job", params=params, from_snapshot="adopted",
            rewind_output=True, until_caught_up=True, spark=spark)  # type: ignore[arg-type]
    api.drain(home, "adopted-job", spark=spark)  # type: ignore[arg-type]
    assert output_rows(spark, out) == ex.expected_windowed_word_counts(lines)  # type: ignore[arg-type]


def test_an_input_file_of_a_planned_batch_gone_refuses_the_import_until_accepted(
    spark: object, home: Home, tmp_path: Path
) -> None:
    """A plain query stopped after planning its last batch (offsets written, no commit: its
    file source's log names the batch's file) whose input file was removed since. Spark
    would list the directory again and never read it, without a word: the import is
    refused in one line naming the source and the file count, nothing created; accepted,
    the snapshot records the loss, a start from it names the same file (read from the
    checkpoint it was imported from) and, accepted again, reads only the input still
    there."""
    from pyspark.sql import SparkSession

    from sparkpoint.errors import SourceDataLostError

    session: SparkSession = spark  # type: ignore[assignment]
    inp, ckpt = tmp_path / "in", tmp_path / "plain-ckpt"
    write_clicks(inp, range(0, 3))
    query = (session.readStream.schema("event_id STRING, user STRING, url STRING, ts TIMESTAMP")
             .option("maxFilesPerTrigger", "1").json(str(inp)).select("event_id", "user", "ts")
             .writeStream.format("parquet").option("path", str(tmp_path / "plain-out"))
             .option("checkpointLocation", str(ckpt)).trigger(availableNow=True).start())
    query.awaitTermination()
    assert query.exception() is None
    # Batch 2 planned and not committed: what a query stopped mid-batch leaves.
    (ckpt / "commits" / "2").unlink()
    (ckpt / "commits" / ".2.crc").unlink(missing_ok=True)
    planned = read_source_log(ckpt / "sources" / "0")[2]
    gone = inp / "clicks-00002.json"
    assert [entry["path"] for entry in planned] == [gone.as_uri()]
    gone.unlink()

    job = REPO_JOBS / "passthrough.py"
    params = {"input": str(inp), "output": str(tmp_path / "out")}
    with pytest.raises(SourceDataLostError) as refused:
        api.snapshot_import(home, ckpt, "adopted", job, params=params,
                            spark=spark)  # type: ignore[arg-type]
    line = refused.value.message
    assert refused.value.exit_code == 4 and "\n" not in line, line
    assert line.startswith(
        "snapshot 'adopted' not imported, nothing was created: source 'clicks' must read "
        f"again 1 input file(s) its log names for the next batch ({gone.as_uri()}), which "
        "no longer exist"), line
    assert "--accept-data-loss" in line, line
    assert api.snapshot_list(home) == []

    said: list[str] = []
    manifest = api.snapshot_import(home, ckpt, "adopted", job, params=params, spark=spark,  # type: ignore[arg-type]
                                   echo=said.append, accept_data_loss=True)
    assert [(loss.source, loss.missing_files) for loss in manifest.accepted_loss] == [
        ("clicks", (gone.as_uri(),))]
    assert any(s.startswith("warning: accepted (--accept-data-loss): source 'clicks'")
               for s in said), said
    shown = sparkpoint(home, "snapshot", "show", "adopted")
    assert "accepted loss:" in shown.out and "1 input file(s) accepted as lost" in shown.out

    plan = api.plan(home, job, params=params, from_snapshot="adopted",
                    spark=spark)  # type: ignore[arg-type]
    [problem] = plan.problems
    assert f"source 'clicks' must read again 1 input file(s) its log names for the next " \
           f"batch ({gone.as_uri()})" in problem, problem
    added = write_clicks(inp, range(3, 4))
    api.run(home, job, "adopted-job", params=params, from_snapshot="adopted",
            accept_data_loss=True, until_caught_up=True, spark=spark)  # type: ignore[arg-type]
    assert output_rows(spark, tmp_path / "out") == Counter(  # type: ignore[arg-type]
        (c.event_id, c.user, c.ts.replace(tzinfo=None)) for c in added)
    lineage = api.job_view(home, "adopted-job").record.lineage
    assert [loss.missing_files for loss in lineage.accepted_loss] == [(gone.as_uri(),)]
