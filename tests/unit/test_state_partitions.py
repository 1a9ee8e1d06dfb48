"""Spark's offline repartition (RocksDB, a start with another partition count) leaves the
operator metadata v1 at the old count and the old partition directories in place (measured
on Spark 4.3.0: `numPartitions` stayed 4 after batches ran with 3). Readers take a batch's
partitions from its offsets entry."""

from __future__ import annotations

import json
from pathlib import Path

from sparkpoint.checkpoint.layout import Checkpoint


def _offsets(partitions: int) -> str:
    conf = {"spark.sql.shuffle.partitions": str(partitions)}
    return "v1\n" + json.dumps({"batchWatermarkMs": 0, "batchTimestampMs": 0, "conf": conf}) \
        + '\n{"logOffset":0}'


def _checkpoint(root: Path) -> Checkpoint:
    (root / "offsets").mkdir(parents=True)
    for batch, partitions in ((3, 4), (4, 3), (5, 3)):
        (root / "offsets" / str(batch)).write_text(_offsets(partitions))
    meta = root / "state" / "0" / "_metadata"
    meta.mkdir(parents=True)
    info = {"operatorInfo": {"operatorId": 0, "operatorName": "stateStoreSave"},
            "stateStoreInfo": [{"storeName": "default", "numColsPrefixKey": 0,
                                "numPartitions": 4}]}
    (meta / "metadata").write_text("v1\n" + json.dumps(info))
    for partition in range(4):
        (root / "state" / "0" / str(partition)).mkdir()
    return Checkpoint(root)


def test_a_batch_after_sparks_repartition_reads_the_partitions_its_offsets_record(
    tmp_path: Path,
) -> None:
    checkpoint = _checkpoint(tmp_path)
    assert [op.partitions for op in checkpoint.operators(5)] == [3]
    assert [op.partitions for op in checkpoint.operators(3)] == [4]
    # Without a batch, the metadata's count (the snapshot's own, or a checkpoint's first).
    assert [op.partitions for op in checkpoint.operators()] == [4]
    assert checkpoint.state_partitions(4) == 3
