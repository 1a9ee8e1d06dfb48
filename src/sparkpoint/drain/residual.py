"""State left after a drain: rows per operator that no watermark could clear."""

from __future__ import annotations

from dataclasses import dataclass

from sparkpoint.checkpoint import hdfs_state
from sparkpoint.checkpoint.layout import Checkpoint
from sparkpoint.checkpoint.rocksdb_state import locate_version
from sparkpoint.checkpoint.state_files import readable_partition


@dataclass(frozen=True)
class OperatorRows:
    operator_id: int
    spark_operator_name: str
    rows: int | None  # None: not countable from files (RocksDB changelog versions)


def state_rows(checkpoint: Checkpoint, batch: int) -> list[OperatorRows]:
    """Rows of every operator's state as committed by ``batch`` (state version batch+1)."""
    version = batch + 1
    rocksdb = checkpoint.is_rocksdb(batch)
    commit = checkpoint.commit(batch)
    counted = []
    for operator in checkpoint.operators(batch):
        rows: int | None = 0
        for index, store in enumerate(operator.stores()):
            for partition in range(operator.partitions):
                pdir = readable_partition(store.partition_dir(operator.path, partition),
                                          version)
                if rocksdb:
                    unique_id = operator.unique_id(commit, partition, index)
                    keys = locate_version(pdir, version, unique_id).num_keys
                    rows = None if rows is None or keys is None else rows + keys
                elif rows is not None:
                    rows += len(hdfs_state.load_version(pdir, version))
        counted.append(OperatorRows(operator.operator_id, operator.operator_name, rows))
    return counted
