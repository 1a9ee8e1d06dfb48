"""Spark writes its checkpoint to a real HDFS (the MiniDFSCluster fixture) and restarts from it."""

from __future__ import annotations

import json
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from sparkpoint.storage.fileio import join
from sparkpoint.storage.stores import file_io

pytestmark = pytest.mark.spark

STATE = "org.apache.spark.sql.execution.streaming.state"
PROVIDERS = {
    "hdfs": f"{STATE}.HDFSBackedStateStoreProvider",
    "rocksdb": f"{STATE}.RocksDBStateStoreProvider",
}
# Three micro-batches of (user, page) rows; the third arrives while the query is stopped.
BATCHES = [
    [("u1", "home"), ("u2", "cart"), ("u1", "cart")],
    [("u3", "home"), ("u1", "home")],
    [("u2", "home"), ("u4", "pay"), ("u1", "pay")],
]


def _write_batch(directory: Path, index: int) -> None:
    tmp = directory / f".batch-{index}.tmp"
    tmp.write_text("".join(json.dumps({"user": u, "page": p}) + "\n" for u, p in BATCHES[index]))
    tmp.rename(directory / f"batch-{index}.json")


def _run(session: Any, inputs: Path, checkpoint: str, name: str) -> Any:
    counts = session.readStream.schema("user STRING, page STRING").json(str(inputs)) \
        .groupBy("page").count()
    return (counts.writeStream.outputMode("complete").format("memory").queryName(name)
            .option("checkpointLocation", checkpoint).start())


@pytest.mark.parametrize("provider", sorted(PROVIDERS))
def test_spark_checkpoints_on_hdfs_and_restarts_from_it(
    spark: Any, hdfs_server: Any, tmp_path: Path, provider: str
) -> None:
    """Fact: Spark 4.3's own Hadoop client (pyspark's bundled hadoop-client-api/runtime 3.5.0,
    no extra jars or settings) writes a stateful streaming query's checkpoint to an hdfs://
    checkpointLocation and restarts from it, with the HDFS-backed and the RocksDB state store
    providers alike."""
    session = spark.newSession()
    session.conf.set("spark.sql.streaming.stateStore.providerClass", PROVIDERS[provider])
    inputs = tmp_path / "in"
    inputs.mkdir()
    checkpoint = join(hdfs_server.new_dir(), "ckpt")
    tag = uuid.uuid4().hex[:8]

    first = _run(session, inputs, checkpoint, f"hdfs_ckpt_{provider}_1_{tag}")
    try:
        for index in (0, 1):
            _write_batch(inputs, index)
            first.processAllAvailable()
    finally:
        first.stop()
    # The input of batches 0 and 1 is gone before the restart (as under input retention), so
    # counts over all three batches can only come from the state restored from HDFS.
    for index in (0, 1):
        (inputs / f"batch-{index}.json").unlink()
    _write_batch(inputs, 2)
    second = _run(session, inputs, checkpoint, f"hdfs_ckpt_{provider}_2_{tag}")
    try:
        second.processAllAvailable()
        progress = second.lastProgress
    finally:
        second.stop()

    assert (progress["batchId"], progress["numInputRows"]) == (2, len(BATCHES[2]))
    rows = session.table(f"hdfs_ckpt_{provider}_2_{tag}").collect()
    assert Counter({row["page"]: row["count"] for row in rows}) == \
        Counter(page for batch in BATCHES for _, page in batch)

    # The checkpoint is on HDFS (seen through WebHDFS), written by the provider asked for.
    files = file_io(checkpoint).walk_sizes(checkpoint)
    assert {"offsets/0", "offsets/1", "offsets/2", "commits/2", "metadata"} <= set(files)
    state_files = [name for name in files if name.startswith("state/0/")]
    if provider == "hdfs":
        assert any(name.endswith(".delta") for name in state_files), state_files
    else:
        assert any(name.endswith((".zip", ".changelog")) for name in state_files), state_files
        assert not any(name.endswith(".delta") for name in state_files), state_files
