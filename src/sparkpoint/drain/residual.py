"""State left after a drain: rows per operator that no watermark could clear."""

from __future__ import annotations

from dataclasses import dataclass

from sparkpoint.checkpoint.layout import Checkpoint
from sparkpoint.checkpoint.state_files import readable_partition


@dataclass(frozen=True)
class OperatorRows:
    operator_id: int
    spark_operator_name: str
    rows: int | None  # None: not countable from files (RocksDB changelog versions)


def state_rows(checkpoint: Checkpoint, batch: int) -> list[OperatorRows]:
    """Rows of every operator's state as committed by ``batch`` (state version batch+1)."""
    version = batch + 1
    provider = checkpoint.state_provider(batch)
    commit = checkpoint.commit(batch)
    counted = []
    for operator in checkpoint.operators(batch):
        rows: int | None = 0
        for index, store in enumerate(operator.stores()):
            for partition in range(operator.partitions):
                pdir = readable_partition(store.partition_dir(operator.path, partition),
                                          version)
                if rows is None:
                    continue
                unique_id = operator.unique_id(commit, partition, index) \
                    if provider.has_unique_ids else None
                keys = provider.recorded_rows(pdir, version, unique_id)
                rows = None if keys is None else rows + keys
        counted.append(OperatorRows(operator.operator_id, operator.operator_name, rows))
    return counted
