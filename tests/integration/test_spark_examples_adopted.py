"""Spark's own example streaming queries, walked the way a new user walks them first: run
as plain PySpark by spark-submit with Spark's defaults (200 partitions, HDFS state store,
unnamed sources), adopted (`snapshot import`), then continued into their own output with 3
partitions. Every output is read through Spark's sink log (`spark.read.parquet`) and
compared, as a multiset, with rows computed from the input in plain Python. The session
windows (prefix-scan keys) and the join (four stores per partition) are continued with the
RocksDB provider asked for, as a user moving off Spark's default does: their state is moved
into RocksDB's files; the dedupe stays on the HDFS provider.

The queries: `structured_sessionization.py` from Spark's examples, the guide's stream-stream
join of impressions and clicks and its `dropDuplicatesWithinWatermark`. Spark's windowed word
count (`structured_network_wordcount_windowed.py`) is adopted and continued in
test_adopt_plain_spark.py (the windows open at the switch, counted once) and upgraded from its
output in test_spark_examples_upgraded.py; its 200-partition walk here repeated the HDFS
provider's 200 -> 3 move that the three queries below walk. Socket input is replaced by JSON
files, console output by parquet in append mode (tests/data/spark_examples/plain.py says how).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from sparkpoint import api
from sparkpoint.checkpoint.layout import Checkpoint
from sparkpoint.storage.home import Home
from tests.support.cli import sparkpoint
from tests.support.spark_example_runs import (
    AFTER,
    BEFORE,
    EXAMPLES,
    ok,
    run_plain,
    table,
    tree_digest,
)

pytestmark = pytest.mark.spark


ADOPTED = [name for name in EXAMPLES if name != "wordcount_windowed"]
PROVIDER_CONF = "spark.sql.streaming.stateStore.providerClass"
ROCKSDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
# The provider each example's continuation asks for (none: the snapshot's is kept).
CONTINUED_WITH = {"sessionization": ROCKSDB, "ad_join": ROCKSDB}


@pytest.mark.parametrize("name", ADOPTED)
def test_plain_example_adopted_and_continued_into_its_output_with_other_partitions(
    name: str, spark: Any, home: Home, tmp_path: Path
) -> None:
    example = EXAMPLES[name]
    output, checkpoint = tmp_path / "out", tmp_path / "plain-checkpoint"
    written = list(example.write(tmp_path, BEFORE))
    run_plain(example, tmp_path, output, checkpoint)
    assert (checkpoint / "offsets" / "0").read_text().startswith("v1\n")
    before = tree_digest(checkpoint)

    ok(sparkpoint(home, "snapshot", "import", str(checkpoint), "adopted",
                  "--job-file", str(example.job), *example.params(tmp_path, output)))
    assert tree_digest(checkpoint) == before, "import modified the plain checkpoint"
    manifest = api.snapshot_show(home, "adopted")
    assert {op.partitions for op in manifest.operators} == {200}
    assert manifest.state_store_provider.endswith("HDFSBackedStateStoreProvider")
    assert api.snapshot_verify(home, "adopted") == []
    written += example.write(tmp_path, AFTER)
    # The plain job's own output, Spark's 200 partitions down to 3: the usual first upgrade.
    provider = CONTINUED_WITH.get(name)
    asked = ["--conf", f"{PROVIDER_CONF}={provider}"] if provider else []
    started = ok(sparkpoint(home, "run", str(example.job), "--job", "adopted-job",
                            "--from-snapshot", "adopted", *example.params(tmp_path, output),
                            "--conf", "spark.sql.shuffle.partitions=3", *asked,
                            "--until-caught-up"))
    continued = Checkpoint(home.checkpoint_dir("adopted-job"))
    assert continued.provider(continued.require_latest_committed_batch()) \
        == (provider or manifest.state_store_provider)
    assert ("moved the state from the HDFS-backed provider to RocksDB" in started.out
            + started.err) == (provider is not None)
    shown = ok(sparkpoint(home, "jobs", "show", "adopted-job", "--json")).json()
    assert {lag["behind"] for lag in shown["lag"].values()} == {0}, shown["lag"]
    if example.windows:
        ok(sparkpoint(home, "drain", "adopted-job"))

    assert table(spark, output) == example.expected(written)
