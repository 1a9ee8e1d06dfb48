"""Spark's own example streaming queries run as managed jobs, upgraded into their own output
with another partition count (RocksDB: Spark's offline repartition batch) and rolled back
with `--rewind-output`; outputs read through Spark's sink log and compared, as multisets,
with rows computed from the input in plain Python (tests/support/spark_examples.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from sparkpoint import api
from sparkpoint.storage.home import Home
from tests.support.cli import sparkpoint
from tests.support.spark_example_runs import EXAMPLES, ok, table

pytestmark = pytest.mark.spark


def test_sessionization_upgraded_into_its_output_with_fewer_partitions_on_rocksdb(
    spark: Any, home: Home, tmp_path: Path
) -> None:
    """A managed job (RocksDB, sparkpoint's default) started from its snapshot with 3
    partitions instead of 4 into the same output: Spark's own repartition batch writes
    nothing to the sink, and the table must stay readable through it and past the sink log's
    next compaction (batch 9)."""
    example = EXAMPLES["sessionization"]
    output = tmp_path / "out"
    one_file = ["--param", "files_per_batch=1"]
    written = list(example.write(tmp_path, range(0, 4)))
    # The job before the upgrade runs in this process; the upgrade is walked by the CLI.
    api.run(home, example.job, "sessions",
            params={**example.param_values(tmp_path, output), "files_per_batch": "1"},
            conf={"spark.sql.shuffle.partitions": "4"}, until_caught_up=True, spark=spark)
    api.snapshot_create(home, "sessions", "before-upgrade")
    written += example.write(tmp_path, range(4, 12))
    ok(sparkpoint(home, "run", str(example.job), "--job", "sessions-v2",
                  "--from-snapshot", "before-upgrade", *example.params(tmp_path, output),
                  *one_file, "--conf", "spark.sql.shuffle.partitions=3", "--until-caught-up"))
    log = sorted(int(p.name.split(".")[0]) for p in (output / "_spark_metadata").iterdir()
                 if not p.name.startswith("."))
    assert log == list(range(log[0], log[-1] + 1)) and log[-1] >= 9, log
    table(spark, output)  # readable before the drain too
    # The state of a batch after Spark's repartition is in 3 partitions, though the operator
    # metadata still says 4 and partition 3 is left over from before.
    ok(sparkpoint(home, "snapshot", "create", "sessions-v2", "after-upgrade"))
    shown = ok(sparkpoint(home, "snapshot", "show", "after-upgrade", "--json")).json()
    assert [op["partitions"] for op in shown["operators"]] == [3], shown["operators"]
    ok(sparkpoint(home, "snapshot", "verify", "after-upgrade"))
    ok(sparkpoint(home, "drain", "sessions-v2"))

    assert table(spark, output) == example.expected(written)


def test_faulty_upgrade_rolled_back_with_rewind_output(
    spark: Any, home: Home, tmp_path: Path
) -> None:
    """The word count upgraded to a faulty version that loses lines; rolled back to its
    snapshot with --rewind-output, the table holds exactly the right counts of all input:
    the faulty batches' rows left it, and the replayed batches are all there."""
    example = EXAMPLES["wordcount_windowed"]
    output = tmp_path / "out"
    params = [*example.params(tmp_path, output), "--param", "files_per_batch=2",
              "--conf", "spark.sql.shuffle.partitions=3"]
    written = list(example.write(tmp_path, range(0, 4)))
    # The job and its faulty version run in this process: what is walked here as a user
    # walks it, by the CLI, is the refusal, the rollback and the drain that follow.
    run_params = {**example.param_values(tmp_path, output), "files_per_batch": "2"}
    conf = {"spark.sql.shuffle.partitions": "3"}
    api.run(home, example.job, "wc", params=run_params, conf=conf, until_caught_up=True,
            spark=spark)
    api.snapshot_create(home, "wc", "before-upgrade")
    before_upgrade = table(spark, output)
    written += example.write(tmp_path, range(4, 8))
    api.run(home, example.job, "wc-faulty", params={**run_params, "skip_word": "state"},
            conf=conf, from_snapshot="before-upgrade", until_caught_up=True, spark=spark)
    assert table(spark, output) - before_upgrade  # the faulty batches are in the table

    refused = sparkpoint(home, "run", str(example.job), "--job", "wc-fixed",
                         "--from-snapshot", "before-upgrade", *params, "--until-caught-up")
    assert refused.code == 4 and "--rewind-output" in refused.err, refused.err
    ok(sparkpoint(home, "run", str(example.job), "--job", "wc-fixed",
                  "--from-snapshot", "before-upgrade", "--rewind-output", *params,
                  "--until-caught-up"))
    ok(sparkpoint(home, "drain", "wc-fixed"))

    assert table(spark, output) == example.expected(written)
