"""A start into another partition count of RocksDB state with its home on S3 (moto's server,
Spark on local[2]): Spark tasks read the snapshot's zips and SSTs from the store and write
the new partitions' versions there (upgrade/rocksdb_store_repartition.py); the driver's
scratch holds no state file, and the state is the one Spark's reader finds in the snapshot,
each key in the partition Spark's hash gives it. The same on a cluster whose executors see
none of the driver's disk: test_other_host_executors.py."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from sparkpoint.snapshot.store import open_snapshot_store
from sparkpoint.storage.fileio import join, spark_url
from sparkpoint.storage.home import Home
from tests.support.s3 import S3Server
from tests.support.s3a_reads import read_bucket_with

pytestmark = pytest.mark.spark
JOB = Path(__file__).resolve().parent.parent / "data" / "jobs" / "key_counts.py"
# Files that hold a RocksDB store's keys and values.
STATE_FILE = re.compile(r"^\d+\.(zip|changelog)$|\.sst$")


def state_rows(spark: Any, checkpoint: str, batch: int,
               partitions: int) -> Counter[tuple[str, int]]:
    """(key, count) of the state at ``batch``, by Spark's state reader, checking that each
    key is in the partition Spark's hash of it gives for ``partitions``."""
    from pyspark.sql import functions as F

    frame = spark.read.format("statestore").option("batchId", batch).load(checkpoint)
    rows = frame.select("partition_id", F.expr(f"pmod(hash(key.*), {partitions})").alias("want"),
                        "key.key", "value.count").collect()
    misplaced = [row for row in rows if row.partition_id != row.want]
    assert not misplaced, misplaced[:5]
    return Counter((row.key, row["count"]) for row in rows)


def test_rocksdb_start_into_another_partition_count_moves_the_state_in_the_store(
    spark: Any, s3_server: S3Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    from sparkpoint import api

    monkeypatch.setenv("SPARKPOINT_SCRATCH", str(tmp_path / "machine"))
    home = Home.resolve(f"s3://{s3_server.new_bucket()}/home")
    inp = tmp_path / "in"
    keys = [f"k{n:05d}" for n in range(1200)] + [f"k{n:05d}" for n in range(0, 1200, 5)]
    spark.createDataFrame([(key,) for key in keys], "key string").coalesce(1) \
        .write.parquet(str(inp))
    api.run(home, JOB, "keys", params={"input": str(inp)}, until_caught_up=True, spark=spark,
            conf={"spark.sql.shuffle.partitions": "4"})
    api.snapshot_create(home, "keys", "k1")
    manifest = api.snapshot_show(home, "k1")
    assert manifest.state_store_provider.endswith("RocksDBStateStoreProvider")

    scratch = tmp_path / "driver"
    monkeypatch.setenv("SPARKPOINT_SCRATCH", str(scratch))
    home = Home.resolve(home.location)  # its scratch: this one
    said: list[str] = []
    api.run(home, JOB, "keys-3", params={"input": str(inp)}, from_snapshot="k1",
            conf={"spark.sql.shuffle.partitions": "3"}, until_caught_up=True, spark=spark,
            echo=said.append)
    assert any("RocksDB state" in line and "read and write the store" in line
               for line in said), said
    # The driver fetched the snapshot's logs and metadata only.
    fetched = [p for p in scratch.rglob("*") if p.is_file()]
    assert fetched and not [p for p in fetched if STATE_FILE.search(p.name)], fetched

    undo = read_bucket_with(spark, str(home.url))
    try:
        snapshot = state_rows(spark, str(open_snapshot_store(home).checkpoint_path("k1")),
                              manifest.batch_id, 4)
        started = state_rows(spark, spark_url(join(home.job_url("keys-3"), "checkpoint")),
                             manifest.batch_id, 3)
    finally:
        undo()
    assert started == snapshot == Counter(Counter(keys).items())


def test_a_joins_four_rocksdb_stores_are_moved_in_the_store(
    spark: Any, s3_server: S3Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A stream-stream join keeps its four stores in subdirectories of each partition, its
    keyWithIndexToValue stores hashed on the join keys without the index: moved by the
    tasks too, the output of the job continued in 3 partitions is the output of one
    uninterrupted run of 2."""
    from sparkpoint import api
    from sparkpoint.testing import output_rows
    from tests.integration.test_upgrade_operator_kinds import JOB as KINDS
    from tests.integration.test_upgrade_operator_kinds import _params, _write_slices

    monkeypatch.setenv("SPARKPOINT_SCRATCH", str(tmp_path / "machine"))
    home = Home.resolve(f"s3://{s3_server.new_bucket()}/home")
    reference_root = tmp_path / "reference"
    for slices in (range(0, 3), range(3, 6)):
        _write_slices(reference_root, slices)
        api.run(Home(reference_root / "home"), KINDS, "reference",
                params=_params(reference_root, "join", "v1", "ref"), until_caught_up=True,
                spark=spark, conf={"spark.sql.shuffle.partitions": "2"})
    _write_slices(tmp_path, range(0, 3))
    api.run(home, KINDS, "old", params=_params(tmp_path, "join", "v1", "out1"),
            until_caught_up=True, spark=spark, conf={"spark.sql.shuffle.partitions": "2"})
    api.snapshot_create(home, "old", "s1")
    _write_slices(tmp_path, range(3, 6))
    scratch = tmp_path / "driver"
    monkeypatch.setenv("SPARKPOINT_SCRATCH", str(scratch))
    said: list[str] = []
    api.run(Home.resolve(home.location), KINDS, "new",
            params=_params(tmp_path, "join", "v1", "out2"), from_snapshot="s1",
            until_caught_up=True, spark=spark, conf={"spark.sql.shuffle.partitions": "3"},
            echo=said.append)
    assert any("RocksDB state" in line and "read and write the store" in line
               for line in said), said
    assert not [p for p in scratch.rglob("*") if p.is_file() and STATE_FILE.search(p.name)]
    combined = output_rows(spark, tmp_path / "out1") + output_rows(spark, tmp_path / "out2")
    assert combined == output_rows(spark, reference_root / "ref") and combined
