"""Repartition RocksDB state offline as Spark tasks, writing RocksDB's files directly.

Spark's own offline repartition (``StreamingCheckpointManager.repartition``) moves RocksDB
state through its state reader, a shuffle and a store commit per partition, and appends a
batch of its own. This moves the same keys to the same places as the HDFS provider's move
does (upgrade/hdfs_repartition.py): every key goes to ``pmod(murmur3(partition key
columns, 42), n)``, Spark's ``HashPartitioning``. Two Spark jobs, the driver moving no state
bytes: each old partition's version ``batch + 1`` is read with RocksDB
(checkpoint/rocksdb_writer.py), its keys hashed with numpy and spilled ordered by new
partition; then each new partition's pairs are gathered from the spills, sorted as RocksDB
orders keys, and written as one SST of a new store, committed as Spark commits one
(``<batch + 1>.zip`` and its SSTs). Operator metadata and the recorded
``spark.sql.shuffle.partitions`` of the last two offsets entries take the new count.

It applies to format v1 checkpoints whose every store is plain (no column families, no
prefix-scan keys), every version one zip with its key count, keys and values of one length
per store, and key columns numpy hashes; :func:`repartition_rocksdb_state` says False,
having changed nothing, for any other, which Spark's repartition then moves.
"""

from __future__ import annotations

import functools
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sparkpoint.checkpoint import rocksdb_writer
from sparkpoint.checkpoint.layout import SHUFFLE_PARTITIONS_CONF, Checkpoint, OperatorDir
from sparkpoint.checkpoint.logs import OffsetLogEntry
from sparkpoint.progress import phase
from sparkpoint.storage.local import write_atomic
from sparkpoint.upgrade.hdfs_repartition import partition_key_fields, run_tasks, task_slices

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


@dataclass(frozen=True)
class _Store:
    """One store of one operator to move: where its partitions are and how its keys hash."""

    operator_dir: Path
    subdir: str | None
    key_fields: list[dict[str, Any]]
    hashed_fields: int
    metadata: dict[str, Any]  # partition 0's zip metadata: the fields new versions keep
    options: str  # partition 0's OPTIONS file: the settings new SSTs are written with

    def partition_dir(self, partition: int) -> Path:
        base = self.operator_dir / str(partition)
        return base / self.subdir if self.subdir else base


def _plain_stores(operator: OperatorDir, version: int) -> list[_Store] | None:
    """The operator's stores when each can be moved here; None when one cannot."""
    prefixes = {s.name: s.num_cols_prefix_key for s in operator.metadata.stores}
    stores = []
    for layout in operator.stores():
        schema = operator.schema(layout)
        if schema is None or prefixes.get(layout.name, 0):
            return None
        op_dir = operator.local_path
        metadata = None
        for partition in range(operator.partitions):
            found = rocksdb_writer.plain_zip_metadata(layout.partition_dir(op_dir, partition),
                                                      version)
            if found is None:
                return None
            metadata = metadata or found
        if metadata is None:
            return None
        key_fields = schema.key_schema["fields"]
        fields = partition_key_fields(operator.operator_name, layout.name, 0, key_fields)
        stores.append(_Store(op_dir, layout.subdir, key_fields, len(fields), metadata,
                             rocksdb_writer.options_text(layout.partition_dir(op_dir, 0),
                                                         version)))
    return stores


def repartition_rocksdb_state(checkpoint: Path, batch: int, partitions: int,
                              spark: SparkSession) -> bool:
    """Move state version ``batch + 1`` of every operator into ``partitions`` partitions in
    place (run this on a staging copy only); False, with nothing changed, when a store
    cannot be moved this way (see the module's docstring)."""
    ckpt = Checkpoint(checkpoint)
    version = batch + 1
    if ckpt.commit(batch).state_unique_ids:
        return False  # checkpoint format v2: the commit names each partition's files
    operators = ckpt.operators(batch)
    moves: list[tuple[OperatorDir, list[_Store]]] = []
    for operator in operators:
        stores = _plain_stores(operator, version)
        if stores is None:
            return False
        moves.append((operator, stores))
    context = spark.sparkContext
    to_move = [(operator, store) for operator, stores in moves for store in stores]
    with tempfile.TemporaryDirectory(dir=checkpoint, prefix=".repartition-") as spill_root:
        owners = [index for index, (operator, _store) in enumerate(to_move)
                  for _old in range(operator.partitions)]
        jobs = [(store, old, Path(spill_root) / f"{index}-{old}")
                for index, (operator, store) in enumerate(to_move)
                for old in range(operator.partitions)]
        spill = functools.partial(_spill_partition, version=version, partitions=partitions)
        with phase("repartition: hashing RocksDB state (Spark tasks)"):
            spilled = run_tasks(checkpoint, lambda: context.parallelize(
                jobs, task_slices(context, len(jobs))).map(spill).collect())
        if any(result is None for result in spilled):
            return False
        pieces: list[list[tuple[Path, Any]]] = [[] for _ in to_move]
        for owner, (_store, _old, path), result in zip(owners, jobs, spilled, strict=True):
            if result is not None and result[1] is not None:
                pieces[owner].append((path, result))
        if any(len({result[1] for _path, result in found}) > 1 for found in pieces):
            return False  # a store's pairs differ in length between partitions
        tasks = [(store, pieces[index], new) for index, (_operator, store) in enumerate(to_move)
                 for new in range(partitions)]
        write = functools.partial(_write_partition, version=version)
        with phase("repartition: writing RocksDB state (Spark tasks)"):
            run_tasks(checkpoint, lambda: context.parallelize(
                tasks, task_slices(context, len(tasks))).foreach(write))
    for operator, _stores in moves:
        for old in range(partitions, operator.partitions):
            shutil.rmtree(operator.local_path / str(old), ignore_errors=True)
        meta = operator.local_path / "_metadata" / "metadata"
        write_atomic(meta, operator.metadata.with_partitions(partitions).to_bytes())
    for offsets_batch in (batch - 1, batch):
        path = checkpoint / "offsets" / str(offsets_batch)
        if path.is_file():
            entry = OffsetLogEntry.parse(path.read_bytes(), str(path))
            write_atomic(path, entry.with_conf({SHUFFLE_PARTITIONS_CONF: str(partitions)})
                         .to_bytes())
    return True


def _spill_partition(job: tuple[_Store, int, Path], version: int, partitions: int
                     ) -> tuple[list[int], tuple[int, int] | None] | None:
    """A task: one old partition's pairs hashed to their new partitions and written to the
    job's spill file ordered by new partition; returns where each new partition's rows
    start (and the last ends) and the (key, value) widths (None for an empty partition), or
    None when the pairs are not of one length or their key columns are not hashed here."""
    import numpy as np

    from sparkpoint.checkpoint.murmur3_columns import hash_columns  # numpy: imported late

    store, old, spill_path = job
    pairs = rocksdb_writer.read_fixed(store.partition_dir(old), version)
    if pairs is None:
        return None
    keys, values = pairs
    if not len(keys):
        return [0] * (partitions + 1), None
    # The stored key is the encoding byte, then the UnsafeRow Spark hashes.
    rows = np.ascontiguousarray(keys[:, 1:])
    if rows.shape[1] % 8:
        return None
    hashed = hash_columns(rows, store.key_fields, store.hashed_fields)
    if hashed is None:
        return None
    # pmod, as Spark's HashPartitioning: numpy's remainder takes the divisor's sign.
    targets = hashed.astype("int64") % partitions
    order = np.argsort(targets, kind="stable")
    np.concatenate([keys, values], axis=1)[order].tofile(spill_path)
    bounds = np.searchsorted(targets[order], np.arange(partitions + 1))
    return [int(bound) for bound in bounds], (int(keys.shape[1]), int(values.shape[1]))


def _write_partition(task: tuple[_Store, list[tuple[Path, tuple[list[int], Any]]], int],
                     version: int) -> None:
    """A task: new partition ``partition``'s store, from its slice of each spill."""
    import numpy as np

    store, pieces, partition = task
    widths = {result[1] for _path, result in pieces}
    key_width, value_width = next(iter(widths), (0, 0))
    width = key_width + value_width
    parts = []
    for path, (bounds, _widths) in pieces:
        first, end = bounds[partition], bounds[partition + 1]
        if end > first:
            with open(path, "rb") as spill:
                spill.seek(first * width)
                parts.append(np.frombuffer(spill.read((end - first) * width), np.uint8)
                             .reshape(-1, width))
    rows = np.concatenate(parts) if parts else np.zeros((0, width), np.uint8)
    rows = rows[rocksdb_writer.key_order(rows[:, :key_width])] if len(rows) else rows
    rocksdb_writer.write_sorted(store.partition_dir(partition), version, rows[:, :key_width],
                                rows[:, key_width:], store.options, store.metadata)
