"""Spark's own example streaming queries, walked the way a new user walks them: run as plain
PySpark by spark-submit with Spark's defaults, adopted (`snapshot import`), continued into
their own output with another partition count, upgraded into the same output, and rolled
back with `--rewind-output`. Every output is read through Spark's sink log
(`spark.read.parquet`) and compared, as a multiset, with rows computed from the input in
plain Python (tests/support/spark_examples.py).

The queries: `structured_network_wordcount_windowed.py` and `structured_sessionization.py`
from Spark's examples, the guide's stream-stream join of impressions and clicks and its
`dropDuplicatesWithinWatermark`. Socket input is replaced by JSON files, console output by
parquet in append mode (tests/data/spark_examples/plain.py says how).
"""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from sparkpoint.storage.home import Home
from tests.support import spark_examples as ex
from tests.support.cli import sparkpoint

pytestmark = pytest.mark.spark
DATA = Path(__file__).resolve().parent.parent / "data"
PLAIN = DATA / "spark_examples" / "plain.py"
JOBS = DATA / "jobs"
# Four files make two batches of the plain query (two files per batch).
BEFORE, AFTER = range(0, 4), range(4, 8)


@dataclass(frozen=True)
class Example:
    name: str
    job: Path
    inputs: tuple[str, ...]  # --param names of its input directories, in the plain order
    write: Callable[[Path, range], Sequence[Any]]  # writes slices, returns their events
    expected: Callable[[Sequence[Any]], Counter[tuple[Any, ...]]]
    windows: bool  # windows or sessions stay open until the watermark passes: drain at end

    def input_dirs(self, root: Path) -> list[Path]:
        return [root / name for name in self.inputs]

    def params(self, root: Path, output: Path) -> list[str]:
        pairs = [f"{name}={root / name}" for name in self.inputs] + [f"output={output}"]
        return [arg for pair in pairs for arg in ("--param", pair)]


def _write_ads(root: Path, slices: range) -> Sequence[Any]:
    impressions, clicks = ex.write_ads(root / "impressions", root / "clicks", slices)
    return [(impressions, clicks)]


def _expected_ads(written: Sequence[Any]) -> Counter[tuple[Any, ...]]:
    impressions = [i for part in written for i in part[0]]
    clicks = [c for part in written for c in part[1]]
    return ex.expected_ad_matches(impressions, clicks)


EXAMPLES = {
    e.name: e for e in (
        Example("wordcount_windowed", JOBS / "spark_example_wordcount.py", ("input",),
                lambda root, s: ex.write_lines(root / "input", s),
                ex.expected_windowed_word_counts, windows=True),
        Example("sessionization", JOBS / "spark_example_sessions.py", ("input",),
                lambda root, s: ex.write_lines(root / "input", s),
                ex.expected_sessions, windows=True),
        Example("ad_join", JOBS / "spark_example_ad_join.py", ("impressions", "clicks"),
                _write_ads, _expected_ads, windows=False),
        Example("dedupe_guid", JOBS / "spark_example_dedupe.py", ("input",),
                lambda root, s: ex.write_deliveries(root / "input", s),
                ex.expected_unique_deliveries, windows=False),
    )
}


def run_plain(example: Example, root: Path, output: Path, checkpoint: Path) -> None:
    """The example as plain PySpark: spark-submit, Spark's defaults, no sparkpoint."""
    submit = Path(sys.executable).parent / "spark-submit"
    done = subprocess.run(
        [str(submit), "--master", "local[2]",
         "--conf", "spark.driver.host=127.0.0.1", "--conf", "spark.driver.bindAddress=127.0.0.1",
         "--conf", "spark.ui.enabled=false",
         str(PLAIN), example.name, str(output), str(checkpoint),
         *map(str, example.input_dirs(root))],
        capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]


def table(spark: Any, output: Path) -> Counter[tuple[Any, ...]]:
    """The output as a user reads it: through the file sink's log."""
    return Counter(tuple(row) for row in spark.read.parquet(str(output)).collect())


def ok(result: Any) -> Any:
    assert result.code == 0, result.out + result.err
    return result


@pytest.mark.parametrize("name", list(EXAMPLES))
def test_plain_example_adopted_and_continued_into_its_output_with_other_partitions(
    name: str, spark: Any, home: Home, tmp_path: Path
) -> None:
    example = EXAMPLES[name]
    output, checkpoint = tmp_path / "out", tmp_path / "plain-checkpoint"
    written = list(example.write(tmp_path, BEFORE))
    run_plain(example, tmp_path, output, checkpoint)
    assert (checkpoint / "offsets" / "1").read_text().startswith("v1\n")

    ok(sparkpoint(home, "snapshot", "import", str(checkpoint), "adopted",
                  "--job-file", str(example.job), *example.params(tmp_path, output)))
    written += example.write(tmp_path, AFTER)
    # The plain job's own output, Spark's 200 partitions down to 3: the usual first upgrade.
    ok(sparkpoint(home, "run", str(example.job), "--job", "adopted-job",
                  "--from-snapshot", "adopted", *example.params(tmp_path, output),
                  "--conf", "spark.sql.shuffle.partitions=3", "--until-caught-up"))
    shown = ok(sparkpoint(home, "jobs", "show", "adopted-job", "--json")).json()
    assert set(shown["files_behind"].values()) == {0}, shown["files_behind"]
    if example.windows:
        ok(sparkpoint(home, "drain", "adopted-job"))

    assert table(spark, output) == example.expected(written)


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
    ok(sparkpoint(home, "run", str(example.job), "--job", "sessions",
                  *example.params(tmp_path, output), *one_file,
                  "--conf", "spark.sql.shuffle.partitions=4", "--until-caught-up"))
    ok(sparkpoint(home, "snapshot", "create", "sessions", "before-upgrade"))
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
    params = [*example.params(tmp_path, output), "--param", "files_per_batch=1",
              "--conf", "spark.sql.shuffle.partitions=3"]
    written = list(example.write(tmp_path, range(0, 4)))
    ok(sparkpoint(home, "run", str(example.job), "--job", "wc", *params, "--until-caught-up"))
    ok(sparkpoint(home, "snapshot", "create", "wc", "before-upgrade"))
    before_upgrade = table(spark, output)
    written += example.write(tmp_path, range(4, 8))
    ok(sparkpoint(home, "run", str(example.job), "--job", "wc-faulty",
                  "--from-snapshot", "before-upgrade", *params, "--param", "skip_word=state",
                  "--until-caught-up"))
    assert table(spark, output) - before_upgrade  # the faulty batches are in the table

    refused = sparkpoint(home, "run", str(example.job), "--job", "wc-fixed",
                         "--from-snapshot", "before-upgrade", *params, "--until-caught-up")
    assert refused.code == 4 and "--rewind-output" in refused.err, refused.err
    ok(sparkpoint(home, "run", str(example.job), "--job", "wc-fixed",
                  "--from-snapshot", "before-upgrade", "--rewind-output", *params,
                  "--until-caught-up"))
    ok(sparkpoint(home, "drain", "wc-fixed"))

    assert table(spark, output) == example.expected(written)
