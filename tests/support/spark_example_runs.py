"""Spark's own example queries as the tests run them: each with its sparkpoint job file,
its input writer and its expected rows (tests/support/spark_examples.py), run plain by
spark-submit with Spark's defaults (tests/data/spark_examples/plain.py), and read back as
users read a file sink."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.support import spark_examples as ex

DATA = Path(__file__).resolve().parent.parent / "data"
PLAIN = DATA / "spark_examples" / "plain.py"
JOBS = DATA / "jobs"
# Two files make one batch of the plain query (two files per batch), followed by Spark's
# no-data batch where the watermark moved: three state versions at Spark's 200 partitions
# (the plain run is most of the test's time). Four more make two batches under sparkpoint.
BEFORE, AFTER = range(0, 2), range(2, 6)


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

    def param_values(self, root: Path, output: Path) -> dict[str, str]:
        """The job file's parameters: its input directories under ``root``, its output."""
        return {**{name: str(root / name) for name in self.inputs}, "output": str(output)}

    def params(self, root: Path, output: Path) -> list[str]:
        """The same parameters as the CLI takes them."""
        return [arg for name, value in self.param_values(root, output).items()
                for arg in ("--param", f"{name}={value}")]


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




def tree_digest(root: Path) -> str:
    """One hash of every file's path and bytes under ``root``: equal before and after only
    if nothing was written, renamed or removed."""
    digest = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        digest.update(path.relative_to(root).as_posix().encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()
