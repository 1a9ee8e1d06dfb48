"""Repartition RocksDB state offline as Spark tasks, writing RocksDB's files directly.

Spark's own offline repartition (``StreamingCheckpointManager.repartition``) moves RocksDB
state through its state reader, a shuffle and a store commit per partition, and appends a
batch of its own. This moves the same keys to the same places as the HDFS provider's move
does (upgrade/hdfs_repartition.py): every key goes to ``pmod(murmur3(partition key
columns, 42), n)``, Spark's ``HashPartitioning``. Two Spark jobs, the driver moving no state
bytes: each old partition's version ``batch + 1`` is read with RocksDB
(checkpoint/rocksdb_writer.py), its keys hashed with numpy and spilled ordered by new
partition (Arrow IPC files); then each new partition's pairs are gathered from the spills,
sorted as RocksDB orders keys, and written as one SST of a new store, committed as Spark
commits one (``<batch + 1>.zip`` and its SSTs). Operator metadata and the recorded
``spark.sql.shuffle.partitions`` of the last two offsets entries take the new count.

It applies when rocksdict's RocksDB is the session's (9.8 for both with Spark 4.3), to
format v1 checkpoints whose every store is plain (no column families, no prefix-scan keys,
keys in Spark's default UnsafeRow encoding, not Avro), every version one zip with its key
count, and key columns numpy hashes (murmur3_columns.py);
:func:`repartition_rocksdb_state` says False, having changed nothing, for any other, which
Spark's repartition then moves.
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
from sparkpoint.spark.driver_disk import check_here
from sparkpoint.spark.version import spark_rocksdb_version
from sparkpoint.storage.local import write_atomic
from sparkpoint.upgrade.hdfs_repartition import partition_key_fields, run_tasks, task_slices

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import SparkSession

# SQLConf.STREAMING_STATE_STORE_ENCODING_FORMAT, recorded in every offsets entry.
_ENCODING_CONF = "spark.sql.streaming.stateStore.encodingFormat"


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
    if ckpt.offsets(batch).conf.get(_ENCODING_CONF, "unsaferow") != "unsaferow":
        return False  # Avro-encoded keys: not the UnsafeRow bytes Spark hashes
    if rocksdb_writer.writer_version()[:2] != spark_rocksdb_version(spark)[:2]:
        return False  # rocksdict's RocksDB is not the one Spark reads the files with
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
        pieces: list[list[tuple[Path, list[int]]]] = [[] for _ in to_move]
        for owner, (_store, _old, path), bounds in zip(owners, jobs, spilled, strict=True):
            if bounds is not None and bounds[-1]:
                pieces[owner].append((path, bounds))
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


def key_partitions(keys: pa.Array, key_fields: list[dict[str, Any]], hashed_fields: int,
                   partitions: int) -> Any:
    """The new partition of every stored key (Arrow binary: the encoding byte, then the
    UnsafeRow), as Spark's ``HashPartitioning`` places it among ``partitions``: a numpy
    int64 array, or None when a key is not ``[encoding version 0][UnsafeRow]`` or its
    columns are not hashed here (murmur3_columns.py)."""
    import numpy as np

    from sparkpoint.checkpoint.murmur3_columns import hash_columns  # numpy: imported late

    targets = np.zeros(len(keys), np.int64)
    if not len(keys):
        return targets
    offsets = np.frombuffer(keys.buffers()[1], np.int32)[keys.offset : keys.offset
                                                         + len(keys) + 1]
    data = np.frombuffer(keys.buffers()[2], np.uint8)
    lengths = np.diff(offsets)
    if (lengths < 1).any() or (data[offsets[:-1][lengths > 0]] != 0).any():
        return None  # not [encoding version 0][UnsafeRow]: another key encoding
    # Keys of one length are hashed together, column by column (strings make lengths
    # differ); the stored key is the encoding byte, then the UnsafeRow Spark hashes.
    widths = np.unique(lengths)
    for length in widths:
        if (length - 1) % 8:
            return None
        if len(widths) == 1:  # the common case: the rows are Arrow's buffer as it is
            rows = np.arange(len(keys))
            gathered = np.ascontiguousarray(
                data[offsets[0] : offsets[-1]].reshape(len(keys), length)[:, 1:])
        else:
            rows = np.nonzero(lengths == length)[0]
            gathered = data[offsets[:-1][rows][:, None] + np.arange(1, length)]
        hashed = hash_columns(gathered, key_fields, hashed_fields)
        if hashed is None:
            return None
        # pmod, as Spark's HashPartitioning: numpy's remainder takes the divisor's sign.
        targets[rows] = hashed.astype("int64") % partitions
    return targets


def _spill_partition(job: tuple[_Store, int, Path], version: int, partitions: int
                     ) -> list[int] | None:
    """A task: one old partition's pairs hashed to their new partitions and written to the
    job's spill file (Arrow IPC) ordered by new partition; returns the row where each new
    partition starts (and where the last ends), or None when a key's columns are not hashed
    here."""
    import numpy as np
    import pyarrow as pa

    store, old, spill_path = job
    check_here(store.operator_dir)
    keys, values = rocksdb_writer.read_arrow(store.partition_dir(old), version)
    targets = key_partitions(keys, store.key_fields, store.hashed_fields, partitions)
    if targets is None:
        return None
    order = np.argsort(targets, kind="stable")
    table = pa.table({"key": keys, "value": values}).take(pa.array(order))
    with pa.OSFile(str(spill_path), "wb") as sink, \
            pa.ipc.new_file(sink, table.schema) as spill:
        spill.write_table(table)
    bounds = np.searchsorted(targets[order], np.arange(partitions + 1))
    return [int(bound) for bound in bounds]


def _write_partition(task: tuple[_Store, list[tuple[Path, list[int]]], int],
                     version: int) -> None:
    """A task: new partition ``partition``'s store, from its slice of each spill."""
    import pyarrow as pa

    store, pieces, partition = task
    check_here(store.operator_dir)
    parts = []
    for path, bounds in pieces:
        first, end = bounds[partition], bounds[partition + 1]
        if end > first:
            with pa.memory_map(str(path)) as source:
                parts.append(pa.ipc.open_file(source).read_all().slice(first, end - first))
    keys, values = sorted_pairs(parts)
    rocksdb_writer.write_sorted(store.partition_dir(partition), version, keys, values,
                                store.options, store.metadata)


def sorted_pairs(parts: list[pa.Table]) -> tuple[pa.Array, pa.Array]:
    """The (key, value) tables' pairs as two arrays in RocksDB's key order."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if not parts:
        return pa.array([], pa.binary()), pa.array([], pa.binary())
    table = pa.concat_tables(parts)
    # Arrow orders binaries as RocksDB's bytewise comparator does (unsigned bytes, a prefix
    # first); the SST writer refuses any other order.
    table = table.take(pc.sort_indices(table.column("key")))
    return table.column("key").combine_chunks(), table.column("value").combine_chunks()
