"""Spark's offline repartition (RocksDB, a start with another partition count) leaves the
operator metadata v1 at the old count and the old partition directories in place (measured
on Spark 4.3.0: `numPartitions` stayed 4 after batches ran with 3). Readers take a batch's
partitions from its offsets entry."""

from __future__ import annotations

import json
from pathlib import Path

from sparkpoint.checkpoint.layout import Checkpoint
from sparkpoint.sinks.gaps import is_repartition_batch


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


def test_sparks_repartition_batch_is_the_one_whose_partitions_differ_from_the_batch_before(
    tmp_path: Path,
) -> None:
    """``OfflineStateRepartitionUtils.isRepartitionBatch``; a batch whose neighbour is
    purged or records no partitions is not taken for one."""
    offsets = tmp_path / "offsets"
    offsets.mkdir()
    for batch, partitions in ((0, 2), (1, 3), (2, 3), (4, 3), (6, 3)):
        (offsets / str(batch)).write_text(_offsets(partitions))
    (offsets / "5").write_text(
        "v1\n" + json.dumps({"batchWatermarkMs": 0, "batchTimestampMs": 0, "conf": {}})
        + '\n{"logOffset":0}')
    checkpoint = Checkpoint(tmp_path)
    found = {batch: is_repartition_batch(checkpoint, batch) for batch in range(7)}
    assert found == {0: False, 1: True, 2: False, 3: False, 4: False, 5: False, 6: False}
