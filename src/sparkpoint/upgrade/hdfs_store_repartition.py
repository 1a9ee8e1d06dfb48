"""Repartition HDFS-provider state that stays in a store, with executors that share no disk
with the driver.

The checkpoint being built holds, on the driver, everything but the state's data files,
which are still the snapshot's files in the store (``in_store``: path in the checkpoint ->
URL). One Spark job moves them: a task per old partition (and store) fetches the files that
load the version (``hdfs_state.files_for_version``), places every key where Spark's
``HashPartitioning`` puts it for the new count (as hdfs_repartition.py does) and emits, per
new partition, that partition's records as one slice of record bytes; Spark's shuffle
brings each new partition's slices to one task, which writes its snapshot file in a
temporary directory of its executor and uploads it to the target checkpoint in the store.
A start that also moves the state to RocksDB has each task convert its new partition there,
as provider_move.py does on a shared disk, and upload the RocksDB version instead.
The driver moves no state bytes: it passes URLs and names, and gets back names and sizes.

The caller records the start's intent and uploads the checkpoint's ``metadata`` before this
runs: a start cut off after a task's upload is rolled back by the next (upgrade/interrupted.py).
"""

from __future__ import annotations

import functools
import itertools
import re
import shutil
import tempfile
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sparkpoint.checkpoint import hdfs_state
from sparkpoint.checkpoint.layout import Checkpoint
from sparkpoint.checkpoint.murmur3 import partition_of
from sparkpoint.checkpoint.providers import ROCKSDB
from sparkpoint.checkpoint.rocksdb_keys import KeyEncoding
from sparkpoint.checkpoint.unsafe_row import read_fields
from sparkpoint.crash_points import crash_point
from sparkpoint.progress import phase
from sparkpoint.snapshot.manifest import FileEntry
from sparkpoint.snapshot.placement import check_fetched
from sparkpoint.storage.fileio import join
from sparkpoint.storage.local import remove_checksum_sibling
from sparkpoint.storage.task_store import TaskStore
from sparkpoint.upgrade.hdfs_repartition import (
    partition_key_fields,
    record_partition_count,
    run_tasks,
    store_key_fields,
)
from sparkpoint.upgrade.provider_move import convert_partition, record_provider

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from sparkpoint.spark.rocksdb_template import RocksDbTemplate

_STATE_FILE = re.compile(r"^\d+\.(delta|snapshot)$")


@dataclass(frozen=True)
class _Store:
    """One state store of one operator: where its partitions are in the checkpoint, and
    the key columns its partition is hashed from."""

    operator_dir: str  # relative to the checkpoint: state/<operator id>
    subdir: str | None  # a join's store keeps its files in a subdirectory of the partition
    key_fields: list[dict[str, Any]]
    hashed_fields: int
    encoding: KeyEncoding  # how RocksDB stores its keys, for a move to RocksDB

    def partition_dir(self, partition: int) -> str:
        base = f"{self.operator_dir}/{partition}"
        return f"{base}/{self.subdir}" if self.subdir else base


@dataclass(frozen=True)
class _OldPartition:
    """What a task reads: a store's old partition, its files by name (URL and the
    manifest's entry, to check the fetched bytes), and the few state files the build wrote
    here (an empty start under renumbered versions) with their bytes."""

    store: int
    partition: int
    in_store: dict[str, tuple[str, FileEntry | None]]
    written_here: dict[str, bytes]


@dataclass(frozen=True)
class StoreMove:
    """What the move did: files written into the target, their bytes, and the state bytes
    the tasks fetched."""

    files: int
    written_bytes: int
    read_bytes: int


def repartition_hdfs_in_store(
    spark: SparkSession, staging: Path, batch: int, old_count: int, wanted: int,
    in_store: Mapping[str, str], entries: Mapping[str, FileEntry], source: TaskStore,
    target: TaskStore, into_rocksdb: RocksDbTemplate | None = None,
    rewritten_later: frozenset[int] = frozenset(),
) -> tuple[dict[str, str], StoreMove]:
    """Move state version ``batch + 1`` of every operator of the checkpoint built in
    ``staging`` from ``old_count`` to ``wanted`` partitions, its data files read from the
    store (``in_store``; ``entries``: the manifest's entry of each URL) through ``source``
    and written into the checkpoint at ``target``. ``staging`` is left with the metadata of
    the new count and without state data files; returns the files of ``in_store`` still to
    be copied (those of no moved operator), and what was moved. ``into_rocksdb``: the new
    partitions written as RocksDB versions (with the settings of Spark's provider), the
    RocksDB provider recorded in the offsets log here. ``rewritten_later``: operators (by
    id) whose new partitions the caller writes itself (a migration, from the old state):
    none of their state is read or written, their files are dropped here and from what is
    left to copy as every moved operator's are."""
    version = batch + 1
    stores: list[_Store] = []
    reads: list[_OldPartition] = []
    moved_dirs: list[str] = []
    for operator in Checkpoint(staging).operators():
        op_dir = operator.local_path.relative_to(staging).as_posix()
        moved_dirs.append(op_dir)
        if operator.operator_id in rewritten_later:
            continue
        prefixes = {s.name: s.num_cols_prefix_key for s in operator.metadata.stores}
        for layout in operator.stores():
            key_fields = store_key_fields(operator, layout)
            hashed = partition_key_fields(operator.operator_name, layout.name,
                                          prefixes.get(layout.name, 0), key_fields)
            store = _Store(op_dir, layout.subdir, key_fields, len(hashed),
                           operator.key_encoding(layout))
            reads.extend(_old_partition(len(stores), store, partition, staging, in_store,
                                        entries, version) for partition in range(old_count))
            stores.append(store)
    if not moved_dirs:
        return dict(in_store), StoreMove(0, 0, 0)
    place = functools.partial(_place, stores=stores, version=version, wanted=wanted,
                              source=source)
    write = functools.partial(_write, stores=stores, version=version, wanted=wanted,
                              target=target, into_rocksdb=into_rocksdb)
    context = spark.sparkContext
    written: list[tuple[str, int]] = []
    if reads:
        with phase("repartition: moving the state in the store (Spark tasks)"):
            written = run_tasks(staging, lambda: context.parallelize(reads, len(reads))
                                .flatMap(place)
                                # The key is the new partition (of every store in turn):
                                # Spark's shuffle takes it as the partition index.
                                .partitionBy(len(stores) * wanted, identity_partition)
                                .mapPartitionsWithIndex(write).collect())
    crash_point("restore.hdfs_partition_moved")
    drop_state_files(staging, moved_dirs, old_count, wanted, _STATE_FILE)
    record_partition_count(staging, batch, wanted)
    if into_rocksdb is not None:
        record_provider(staging, batch, ROCKSDB)
    left = {rel: url for rel, url in in_store.items()
            if not any(rel.startswith(f"{op_dir}/") for op_dir in moved_dirs)}
    read = sum(entry.bytes for part in reads for _url, entry in part.in_store.values()
               if entry is not None)
    return left, StoreMove(len(written), sum(size for _rel, size in written), read)


def identity_partition(partition: int) -> int:
    """Spark's shuffle partition of a key that is the new partition's index itself."""
    return partition


def _old_partition(index: int, store: _Store, partition: int, staging: Path,
                   in_store: Mapping[str, str], entries: Mapping[str, FileEntry],
                   version: int) -> _OldPartition:
    """The files that load ``version`` of the partition (chosen by name here, so that a
    missing one is reported before any task runs)."""
    where = store.partition_dir(partition)
    found = {rel.rsplit("/", 1)[1]: (url, entries.get(url)) for rel, url in in_store.items()
             if rel.rsplit("/", 1)[0] == where}
    local = staging / where
    here = [path for path in local.iterdir() if path.is_file()
            and _STATE_FILE.match(path.name)] if local.is_dir() else []
    needed = set(hdfs_state.files_for_version(
        local, version, [*found, *(path.name for path in here)]).names())
    return _OldPartition(index, partition,
                         {name: found[name] for name in needed if name in found},
                         {path.name: path.read_bytes() for path in here if path.name in needed})


def _place(part: _OldPartition, stores: list[_Store], version: int, wanted: int,
           source: TaskStore) -> Iterator[tuple[int, bytes]]:
    """A task: the old partition's records, as (new partition of its store, record
    bytes) slices, from its files fetched into the executor's temporary directory."""
    store = stores[part.store]
    where = store.partition_dir(part.partition)
    with tempfile.TemporaryDirectory(prefix="sparkpoint-move-") as scratch:
        directory = Path(scratch)
        with source.opened() as io:
            io.get_files([(url, directory / name)
                          for name, (url, _entry) in part.in_store.items()])
        for name, (url, entry) in part.in_store.items():
            check_fetched(directory / name, url, entry, f"{where}/{name}")
        for name, data in part.written_here.items():
            (directory / name).write_bytes(data)
        slices = _slices(directory, where, store, version, wanted)
    for partition, data in slices:
        yield part.store * wanted + partition, data


def _slices(directory: Path, where: str, store: _Store, version: int,
            wanted: int) -> Iterable[tuple[int, bytes]]:
    """(new partition, record bytes) of the state loaded from ``directory``: with numpy
    when the records have one length and their key columns hash column-wise, else record
    by record."""
    import numpy as np

    from sparkpoint.checkpoint.murmur3_columns import hash_columns  # numpy: imported late

    fixed = hdfs_state.load_fixed_version(directory, version)
    if fixed is not None and not len(fixed.keys):
        return []
    hashed = hash_columns(fixed.keys, store.key_fields, store.hashed_fields) \
        if fixed is not None and fixed.keys.shape[1] % 8 == 0 else None
    if fixed is not None and hashed is not None:
        # pmod, as Spark's HashPartitioning: numpy's remainder takes the divisor's sign.
        targets = hashed.astype("int64") % wanted
        order = np.argsort(targets, kind="stable")
        bounds = np.searchsorted(targets[order], np.arange(wanted + 1))
        return [(partition, hdfs_state.fixed_record_bytes(hdfs_state.FixedState(
                    fixed.keys[order[start:end]], fixed.values[order[start:end]])))
                for partition, (start, end) in enumerate(itertools.pairwise(bounds))
                if end > start]
    fields = store.key_fields
    types = [field["type"] for field in fields[:store.hashed_fields]]
    placed: dict[int, list[tuple[bytes, bytes | None]]] = {}
    for key, value in hdfs_state.load_version(directory, version).items():
        values = read_fields(key, fields, where)[:store.hashed_fields]
        placed.setdefault(partition_of(values, types, wanted), []).append((key, value))
    return [(partition, hdfs_state.record_bytes(records))
            for partition, records in sorted(placed.items())]


def _write(index: int, slices: Iterator[tuple[int, bytes]], stores: list[_Store],
           version: int, wanted: int, target: TaskStore,
           into_rocksdb: RocksDbTemplate | None = None) -> Iterator[tuple[str, int]]:
    """A task: new partition ``index``'s snapshot file (of store ``index // wanted``), from
    its slices, uploaded into the target checkpoint (or, ``into_rocksdb``, the RocksDB
    version converted from it); yields the path there and the size of each file written.
    Every new partition gets one, an empty one too (Spark loads each partition's version)."""
    store, partition = divmod(index, wanted)
    data = hdfs_state.snapshot_of_records(records for _key, records in slices)
    where = stores[store].partition_dir(partition)
    with tempfile.TemporaryDirectory(prefix="sparkpoint-move-") as scratch:
        directory = Path(scratch)
        written = directory / f"{version}.snapshot"
        written.write_bytes(data)
        if into_rocksdb is not None:
            convert_partition(directory, version, stores[store].encoding, False, into_rocksdb)
            written.unlink(missing_ok=True)  # (the RocksDB writer replaces the files)
        files = sorted(path for path in directory.rglob("*") if path.is_file())
        rels = [f"{where}/{path.relative_to(directory).as_posix()}" for path in files]
        with target.opened() as io:
            # A retried task writes the same bytes again: an upload replaces the file.
            io.put_files([(path, join(target.location, rel))
                          for path, rel in zip(files, rels, strict=True)])
        sizes = [path.stat().st_size for path in files]
    yield from zip(rels, sizes, strict=True)


def drop_state_files(staging: Path, operator_dirs: list[str], old_count: int, wanted: int,
                     state_file: re.Pattern[str]) -> None:
    """The copy here keeps the operators' metadata only: their state files (names
    ``state_file`` matches) are in the target, written by the tasks (old partitions past the
    new count go entirely)."""
    for op_dir in operator_dirs:
        for partition in range(old_count):
            directory = staging / op_dir / str(partition)
            if partition >= wanted:
                shutil.rmtree(directory, ignore_errors=True)
                continue
            for path in directory.rglob("*") if directory.is_dir() else []:
                if path.is_file() and state_file.match(path.name):
                    path.unlink()
                    remove_checksum_sibling(path)
