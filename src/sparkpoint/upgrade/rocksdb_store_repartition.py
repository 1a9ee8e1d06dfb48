"""Repartition RocksDB state that stays in a store, with executors that share no disk with
the driver: the RocksDB counterpart of hdfs_store_repartition.py.

The checkpoint being built holds, on the driver, everything but the state's data files,
which are still the snapshot's files in the store (``in_store``: path in the checkpoint ->
URL). One Spark job moves them: a task per old partition (and store) fetches that
partition's ``<version>.zip`` and the SSTs its metadata lists, checks them against the
manifest, reads the pairs with RocksDB (checkpoint/rocksdb_writer.py) in its executor's
temporary directory, places every key where Spark's ``HashPartitioning`` puts it for the
new count (``key_partitions``, as rocksdb_repartition.py does) and emits, per new
partition, that partition's pairs as one Arrow IPC slice; Spark's shuffle brings each new
partition's slices to one task, which sorts them, writes the new version with
``write_sorted`` and uploads its zip and SST to the target checkpoint in the store (or, for a
start that also moves the state to the HDFS-backed provider, that provider's snapshot file
of the decoded pairs, as provider_move.py writes it on a shared disk). Every new partition
gets a version, an empty one too. The driver fetches partition 0's zip of each store (its
metadata and OPTIONS, which every new version is written with: no key or value) and moves
no state bytes otherwise.

It applies where the local move does (rocksdb_repartition.py): checkpoint format v1, keys
in UnsafeRow, rocksdict's RocksDB the session's, plain stores (version ``batch + 1`` one
zip with its key count and no column families, no prefix-scan keys, key columns numpy
hashes). :func:`plan_rocksdb_in_store` says None for any other, having changed nothing: the
caller then stages the state on the driver as before.
"""

from __future__ import annotations

import functools
import re
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sparkpoint.checkpoint import hdfs_state, rocksdb_writer
from sparkpoint.checkpoint.layout import Checkpoint
from sparkpoint.checkpoint.murmur3_columns import columns_hashed
from sparkpoint.checkpoint.providers import HDFS_BACKED
from sparkpoint.checkpoint.rocksdb_keys import KeyEncoding
from sparkpoint.checkpoint.rocksdb_reader import decoded_pairs
from sparkpoint.checkpoint.rocksdb_state import read_zip_metadata
from sparkpoint.crash_points import crash_point
from sparkpoint.errors import CheckpointFormatError
from sparkpoint.progress import phase
from sparkpoint.snapshot.manifest import FileEntry
from sparkpoint.snapshot.placement import check_fetched
from sparkpoint.spark.version import spark_rocksdb_version
from sparkpoint.storage.fileio import join
from sparkpoint.storage.task_store import TaskStore
from sparkpoint.upgrade.hdfs_repartition import (
    partition_key_fields,
    record_partition_count,
    run_tasks,
)
from sparkpoint.upgrade.hdfs_store_repartition import (
    StoreMove,
    drop_state_files,
    identity_partition,
)
from sparkpoint.upgrade.provider_move import record_provider
from sparkpoint.upgrade.rocksdb_repartition import key_partitions, sorted_pairs
from sparkpoint.upgrade.validate import ENCODING_CONF

if TYPE_CHECKING:
    from pyspark.accumulators import Accumulator
    from pyspark.sql import SparkSession

# Files of a RocksDB store's versions (and their checksums), in a partition directory.
_STATE_FILE = re.compile(r"^\.?(\d+(_[0-9a-f-]+)?\.(zip|changelog)|.*\.sst)(\.crc)?$")


@dataclass(frozen=True)
class _Store:
    """One store of one operator: where its partitions are in the checkpoint, how its keys
    hash, and the fields and settings new versions are written with (partition 0's)."""

    operator_dir: str  # relative to the checkpoint: state/<operator id>
    subdir: str | None
    key_fields: list[dict[str, Any]]
    hashed_fields: int
    metadata: dict[str, Any]
    options: str
    encoding: KeyEncoding  # how the keys are stored, for a move to the HDFS-backed provider

    def partition_dir(self, partition: int) -> str:
        base = f"{self.operator_dir}/{partition}"
        return f"{base}/{self.subdir}" if self.subdir else base


@dataclass(frozen=True)
class _OldPartition:
    """What a task reads: a store's old partition, its files in the store by name (``zip``
    the version's, ``ssts`` the partition's SSTs by name under ``SSTs/``), each with its
    URL and the manifest's entry."""

    store: int
    partition: int
    zip: tuple[str, FileEntry | None]
    ssts: dict[str, tuple[str, FileEntry | None]]


@dataclass(frozen=True)
class RocksDBStoreMove:
    """A move the tasks can make, planned on the driver."""

    stores: list[_Store]
    reads: list[_OldPartition]
    operator_dirs: list[str]


def plan_rocksdb_in_store(spark: SparkSession, staging: Path, batch: int, old_count: int,
                          in_store: Mapping[str, str], entries: Mapping[str, FileEntry],
                          source: TaskStore, rewritten_later: frozenset[int] = frozenset(),
                          ) -> RocksDBStoreMove | None:
    """The move of state version ``batch + 1`` of the checkpoint built in ``staging``
    (its state files in the store: ``in_store``) when the tasks can make it; None, having
    changed nothing, when it must be staged here (see the module's docstring).
    ``rewritten_later``: operators (by id) whose new partitions the caller writes itself (a
    migration, from the old state): moved with the others, none of their state read."""
    ckpt = Checkpoint(staging)
    version = batch + 1
    if ckpt.commit(batch).state_unique_ids:
        return None  # checkpoint format v2
    if ckpt.offsets(batch).conf.get(ENCODING_CONF, "unsaferow") != "unsaferow":
        return None  # Avro-encoded keys
    by_dir: dict[str, dict[str, str]] = {}
    for rel, url in in_store.items():
        parent, name = rel.rsplit("/", 1)
        by_dir.setdefault(parent, {})[name] = url
    wanted_zip = f"{version}.zip"
    stores: list[_Store] = []
    reads: list[_OldPartition] = []
    operator_dirs: list[str] = []
    zips: list[tuple[str, str]] = []  # (URL, partition directory) of each store's partition 0
    pending: list[tuple[str, str | None, list[dict[str, Any]], int, KeyEncoding]] = []
    for operator in ckpt.operators(batch):
        if operator.partitions != old_count:
            return None
        op_dir = operator.local_path.relative_to(staging).as_posix()
        operator_dirs.append(op_dir)
        if operator.operator_id in rewritten_later:
            continue
        prefixes = {s.name: s.num_cols_prefix_key for s in operator.metadata.stores}
        for layout in operator.stores():
            schema = operator.schema(layout)
            if schema is None or prefixes.get(layout.name, 0):
                return None
            key_fields = schema.key_schema["fields"]
            hashed = len(partition_key_fields(operator.operator_name, layout.name, 0,
                                              key_fields))
            if not columns_hashed(key_fields, hashed):
                return None
            store = len(pending)
            for partition in range(old_count):
                where = f"{op_dir}/{partition}" + (f"/{layout.subdir}" if layout.subdir else "")
                local = staging / where
                if local.is_dir() and any(path.is_file() and _STATE_FILE.match(path.name)
                                          for path in local.iterdir()):
                    return None  # state files written here by the build
                names = by_dir.get(where, {})
                if wanted_zip not in names:
                    return None  # not one zip of the version (changelogs, or missing)
                ssts = {rel.rsplit("/", 1)[1]: (url, entries.get(url))
                        for rel, url in in_store.items()
                        if rel.rsplit("/", 1)[0] == f"{where}/SSTs"}
                zip_url = names[wanted_zip]
                reads.append(_OldPartition(store, partition, (zip_url, entries.get(zip_url)),
                                           ssts))
                if partition == 0:
                    zips.append((zip_url, where))
            pending.append((op_dir, layout.subdir, key_fields, hashed,
                            operator.key_encoding(layout)))
    if not pending:
        # Nothing to read: a move of operators the caller rewrites, or none at all.
        return RocksDBStoreMove([], [], operator_dirs) if operator_dirs else None
    if rocksdb_writer.writer_version()[:2] != spark_rocksdb_version(spark)[:2]:
        return None  # rocksdict's RocksDB is not the one Spark reads the files with
    with tempfile.TemporaryDirectory(prefix="sparkpoint-rocksdb-meta-") as scratch:
        local_zips = [Path(scratch) / f"{index}.zip" for index in range(len(zips))]
        with source.opened() as io:
            io.get_files([(url, path) for (url, _where), path in zip(zips, local_zips,
                                                                      strict=True)])
        for (op_dir, subdir, key_fields, hashed, encoding), (url, where), path in zip(
                pending, zips, local_zips, strict=True):
            check_fetched(path, url, entries.get(url), f"{where}/{wanted_zip}")
            metadata = read_zip_metadata(path)
            if metadata.get("columnFamilyMapping") or "numKeys" not in metadata:
                return None
            stores.append(_Store(op_dir, subdir, key_fields, hashed, metadata,
                                 rocksdb_writer.zip_options_text(path), encoding))
    return RocksDBStoreMove(stores, reads, operator_dirs)


def repartition_rocksdb_in_store(
    spark: SparkSession, move: RocksDBStoreMove, staging: Path, batch: int, old_count: int,
    wanted: int, in_store: Mapping[str, str], source: TaskStore, target: TaskStore,
    into_hdfs: bool = False,
) -> tuple[dict[str, str], StoreMove]:
    """Make ``move``: the new partitions' versions written into the checkpoint at
    ``target`` by Spark tasks; ``staging`` is left with the metadata of the new count and
    without state data files. Returns the files of ``in_store`` still to be copied (those
    of no moved operator) and what was moved. ``into_hdfs``: the new partitions written as
    HDFS-backed snapshot files, that provider recorded in the offsets log here."""
    version = batch + 1
    stores = move.stores
    write = functools.partial(_write, stores=stores, version=version, wanted=wanted,
                              target=target, into_hdfs=into_hdfs)
    context = spark.sparkContext
    reads = move.reads
    read = context.accumulator(0)  # the bytes the tasks fetched (a zip names its SSTs)
    place = functools.partial(_place, stores=stores, version=version, wanted=wanted,
                              source=source, read=read)
    written: list[tuple[str, int]] = []
    if reads:
        with phase("repartition: moving the RocksDB state in the store (Spark tasks)"):
            written = run_tasks(staging, lambda: context.parallelize(reads, len(reads))
                                .flatMap(place)
                                # The key is the new partition (of every store in turn):
                                # Spark's shuffle takes it as the partition index.
                                .partitionBy(len(stores) * wanted, identity_partition)
                                .mapPartitionsWithIndex(write).collect())
    crash_point("restore.hdfs_partition_moved")
    drop_state_files(staging, move.operator_dirs, old_count, wanted, _STATE_FILE)
    record_partition_count(staging, batch, wanted)
    if into_hdfs:
        record_provider(staging, batch, HDFS_BACKED)
    left = {rel: url for rel, url in in_store.items()
            if not any(rel.startswith(f"{op_dir}/") for op_dir in move.operator_dirs)}
    return left, StoreMove(len(written), sum(size for _rel, size in written), read.value)


def _place(part: _OldPartition, stores: list[_Store], version: int, wanted: int,
           source: TaskStore, read: Accumulator[int]) -> Iterator[tuple[int, bytes]]:
    """A task: the old partition's pairs, as (new partition of its store, Arrow IPC bytes)
    slices, from its zip and SSTs fetched into the executor's temporary directory."""
    import numpy as np
    import pyarrow as pa

    store = stores[part.store]
    where = store.partition_dir(part.partition)
    with tempfile.TemporaryDirectory(prefix="sparkpoint-move-") as scratch:
        directory = Path(scratch)
        zip_url, zip_entry = part.zip
        zip_path = directory / f"{version}.zip"
        with source.opened() as io:
            io.get_files([(zip_url, zip_path)])
            check_fetched(zip_path, zip_url, zip_entry, f"{where}/{version}.zip")
            listed = [str(sst["dfsSstFileName"])
                      for sst in read_zip_metadata(zip_path).get("sstFiles", [])]
            missing = [name for name in listed if name not in part.ssts]
            if missing:
                raise CheckpointFormatError(
                    f"{zip_url}: {where}/{version}.zip lists SSTs/{missing[0]}, not in the "
                    "snapshot")
            (directory / "SSTs").mkdir()
            io.get_files([(part.ssts[name][0], directory / "SSTs" / name) for name in listed])
        for name in listed:
            url, entry = part.ssts[name]
            check_fetched(directory / "SSTs" / name, url, entry, f"{where}/SSTs/{name}")
        read.add(sum(path.stat().st_size for path in directory.rglob("*") if path.is_file()))
        keys, values = rocksdb_writer.read_arrow(directory, version)
    targets = key_partitions(keys, store.key_fields, store.hashed_fields, wanted)
    if targets is None:
        raise CheckpointFormatError(
            f"{where}/{version}.zip: a key is not in Spark's UnsafeRow encoding of the "
            "store's key columns; start the job with the state on a shared disk")
    order = np.argsort(targets, kind="stable")
    table = pa.table({"key": keys, "value": values}).take(pa.array(order))
    bounds = np.searchsorted(targets[order], np.arange(wanted + 1))
    for partition in range(wanted):
        start, end = int(bounds[partition]), int(bounds[partition + 1])
        if end > start:
            sink = pa.BufferOutputStream()
            with pa.ipc.new_stream(sink, table.schema) as stream:
                stream.write_table(table.slice(start, end - start))
            yield part.store * wanted + partition, sink.getvalue().to_pybytes()


def _write(index: int, slices: Iterator[tuple[int, bytes]], stores: list[_Store],
           version: int, wanted: int, target: TaskStore,
           into_hdfs: bool = False) -> Iterator[tuple[str, int]]:
    """A task: new partition ``index``'s version (of store ``index // wanted``), from its
    slices, written in a temporary directory (``into_hdfs``: as the HDFS-backed provider's
    snapshot file) and uploaded into the target checkpoint;
    yields each uploaded file's path there and its size. Every new partition gets one, an
    empty one too (Spark loads each partition's version)."""
    import pyarrow as pa

    store, partition = divmod(index, wanted)
    where = stores[store].partition_dir(partition)
    parts = [pa.ipc.open_stream(pa.py_buffer(data)).read_all() for _key, data in slices]
    keys, values = sorted_pairs(parts)
    with tempfile.TemporaryDirectory(prefix="sparkpoint-move-") as scratch:
        directory = Path(scratch) / "partition"
        if into_hdfs:
            # Straight from the pairs: no RocksDB version written only to be read back.
            directory.mkdir()
            hdfs_state.write_snapshot(directory, version, dict(decoded_pairs(
                zip(keys.to_pylist(), values.to_pylist(), strict=True),
                stores[store].encoding, Path(where))))
        else:
            rocksdb_writer.write_sorted(directory, version, keys, values,
                                        stores[store].options, stores[store].metadata)
        files = sorted(path for path in directory.rglob("*") if path.is_file())
        rels = [f"{where}/{path.relative_to(directory).as_posix()}" for path in files]
        sizes = [path.stat().st_size for path in files]
        with target.opened() as io:
            # A retried task writes a version of the same keys again: its SSTs have new
            # names, and the zip that lists them replaces the first attempt's.
            io.put_files([(path, join(target.location, rel))
                          for path, rel in zip(files, rels, strict=True)])
    yield from zip(rels, sizes, strict=True)
