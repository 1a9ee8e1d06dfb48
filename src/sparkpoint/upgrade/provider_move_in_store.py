"""Move a new checkpoint's state to the other state store provider when the home is in a
store, with executors that share no disk with the driver.

The checkpoint being built holds, on the driver, everything but the state's data files,
which are still the snapshot's files in the store (``in_store``: path in the checkpoint ->
URL). One Spark job moves them: a task per partition of every store fetches that
partition's files into its executor's temporary directory, converts them exactly as
provider_move.py does on a shared disk (the same code: the HDFS provider's version read and
written as one RocksDB version, or the reverse) and uploads the files the conversion wrote
into the target checkpoint in the store. The driver moves no state bytes: it passes URLs,
names and the few state files the build wrote here (an empty start's), and gets back names
and sizes.

The caller records the start's intent and uploads the checkpoint's ``metadata`` before this
runs: a start cut off after a task's upload is rolled back by the next (upgrade/interrupted.py).
"""

from __future__ import annotations

import functools
import re
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from sparkpoint.checkpoint.layout import Checkpoint
from sparkpoint.checkpoint.providers import ROCKSDB, StateProvider
from sparkpoint.checkpoint.rocksdb_keys import KeyEncoding
from sparkpoint.progress import phase
from sparkpoint.snapshot.manifest import FileEntry
from sparkpoint.snapshot.placement import check_fetched
from sparkpoint.spark.rocksdb_template import RocksDbTemplate, template_for
from sparkpoint.storage.fileio import join
from sparkpoint.storage.task_store import TaskStore
from sparkpoint.upgrade.hdfs_repartition import run_tasks, task_slices
from sparkpoint.upgrade.hdfs_store_repartition import StoreMove, drop_state_files
from sparkpoint.upgrade.provider_move import convert_partition, record_provider

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

# The data files of either provider in a partition directory (RocksDB's SSTs in SSTs/).
_STATE_FILE = re.compile(r"^(\d+\.(delta|snapshot|zip|changelog)|.*\.sst)$")


@dataclass(frozen=True)
class _Partition:
    """What a task moves: one partition of one store, its files in the store by path
    under the partition (URL and the manifest's entry, to check the fetched bytes) and those
    the build wrote here, with their bytes."""

    where: str  # the partition's directory, relative to the checkpoint
    encoding: KeyEncoding
    in_store: dict[str, tuple[str, FileEntry | None]]
    written_here: dict[str, bytes]


def move_provider_in_store(
    spark: SparkSession, staging: Path, batch: int, in_store: Mapping[str, str],
    entries: Mapping[str, FileEntry], source_provider: StateProvider,
    target_provider: StateProvider, source: TaskStore, target: TaskStore,
    rewritten_later: frozenset[int] = frozenset(),
) -> tuple[dict[str, str], int, StoreMove]:
    """Move state version ``batch + 1`` of every store of the checkpoint built in ``staging``
    from ``source_provider``'s files to ``target_provider``'s: its data files read from the
    store (``in_store``; ``entries``: the manifest's entry of each URL) through ``source``,
    the new ones written into the checkpoint at ``target``, the new provider recorded in
    the offsets log here. ``staging`` is left without state data files; returns the files
    of ``in_store`` still to be copied (none of a moved operator), the keys moved and what
    was moved. ``rewritten_later``: operators whose new files a migration writes (none
    read here; their files are dropped here and none left to copy)."""
    version = batch + 1
    parts: list[_Partition] = []
    operator_dirs: list[str] = []
    counts: set[int] = set()
    for operator in Checkpoint(staging).operators(batch):
        op_dir = operator.local_path.relative_to(staging).as_posix()
        operator_dirs.append(op_dir)
        counts.add(operator.partitions)
        if operator.operator_id in rewritten_later:
            continue
        for layout in operator.stores():
            encoding = operator.key_encoding(layout)
            for partition in range(operator.partitions):
                where = layout.partition_dir(operator.local_path, partition)
                parts.append(_partition(staging, where, encoding, in_store, entries))
    template = template_for(spark, target_provider)
    move = functools.partial(_move, version=version, from_rocksdb=source_provider is ROCKSDB,
                             template=template, source=source, target=target)
    context = spark.sparkContext
    moved: list[tuple[int, list[tuple[str, int]]]] = []
    if parts:
        with phase("provider move: the state in the store (Spark tasks)"):
            moved = run_tasks(staging, lambda: context.parallelize(
                parts, task_slices(context, len(parts))).map(move).collect())
    for count in counts:
        drop_state_files(staging, operator_dirs, count, count, _STATE_FILE)
    record_provider(staging, batch, target_provider)
    left = {rel: url for rel, url in in_store.items()
            if not any(rel.startswith(f"{op_dir}/") for op_dir in operator_dirs)}
    written = [file for _keys, files in moved for file in files]
    read = sum(entry.bytes for part in parts for _url, entry in part.in_store.values()
               if entry is not None)
    return left, sum(keys for keys, _files in moved), \
        StoreMove(len(written), sum(size for _rel, size in written), read)


def _partition(staging: Path, where: Path, encoding: KeyEncoding,
               in_store: Mapping[str, str], entries: Mapping[str, FileEntry]) -> _Partition:
    """A partition's files: those left in the store, and those the build wrote here."""
    rel = where.relative_to(staging).as_posix()
    found = {path[len(rel) + 1:]: (url, entries.get(url)) for path, url in in_store.items()
             if path.startswith(f"{rel}/")}
    here = {path.relative_to(where).as_posix(): path.read_bytes()
            for path in (where.rglob("*") if where.is_dir() else [])
            if path.is_file() and _STATE_FILE.match(path.name)}
    return _Partition(rel, encoding, found, here)


def _move(part: _Partition, version: int, from_rocksdb: bool,
          template: RocksDbTemplate | None, source: TaskStore,
          target: TaskStore) -> tuple[int, list[tuple[str, int]]]:
    """A task: one partition's version moved to the other provider's files in the target;
    its key count and the files written (path in the checkpoint, size)."""
    with tempfile.TemporaryDirectory(prefix="sparkpoint-provider-move-") as scratch:
        directory = Path(scratch) / "partition"
        fetched = [(url, directory / name) for name, (url, _entry) in part.in_store.items()]
        for _url, path in fetched:
            path.parent.mkdir(parents=True, exist_ok=True)
        directory.mkdir(exist_ok=True)
        with source.opened() as io:
            io.get_files(fetched)
        for name, (url, entry) in part.in_store.items():
            check_fetched(directory / name, url, entry, f"{part.where}/{name}")
        for name, data in part.written_here.items():
            (directory / name).parent.mkdir(parents=True, exist_ok=True)
            (directory / name).write_bytes(data)
        before = {path: path.stat().st_mtime_ns for path in directory.rglob("*")
                  if path.is_file()}
        keys = convert_partition(directory, version, part.encoding, from_rocksdb, template)
        new = sorted(path for path in directory.rglob("*") if path.is_file()
                     and before.get(path) != path.stat().st_mtime_ns)
        uploads = [(path, join(target.location, part.where, path.relative_to(directory)
                               .as_posix())) for path in new]
        with target.opened() as io:
            # A retried task writes the same files again: an upload replaces a file.
            io.put_files(uploads)
        return keys, [(f"{part.where}/{path.relative_to(directory).as_posix()}",
                       path.stat().st_size) for path in new]
