"""Place a snapshot's checkpoint at a URL of the store it is in, for Spark's readers and
writers on executors that share no disk with the driver.

A snapshot in a store keeps its files by content (``.files/<xx>/<hash>``), so Spark cannot
read it where it is. :func:`place_checkpoint` lays it out as a checkpoint under a URL of the
same store: the files fetched to the driver (logs, metadata: small) are uploaded, and the
state files are copied inside the store, by the store itself where it can (S3's CopyObject,
each copy checked against the SHA-256 the store computes of it), else by Spark tasks
(:func:`copy_in_tasks`: HDFS through WebHDFS): each task fetches its share of the files into
its executor's temporary directory, checks each against the snapshot's SHA-256 and writes it
to its new place. No state byte passes through the driver.
"""

from __future__ import annotations

import functools
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from sparkpoint.errors import SnapshotDamagedError
from sparkpoint.progress import phase
from sparkpoint.snapshot.manifest import FileEntry, content_mismatch
from sparkpoint.storage.fileio import FileIO, join
from sparkpoint.storage.local import walk_files
from sparkpoint.storage.location import StorePath
from sparkpoint.storage.task_store import TaskStore

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

# Files per task at most: a few tasks per core, none holding many files on its disk at once.
_FILES_PER_TASK = 64


def place_checkpoint(spark: SparkSession, local: Path, target: StorePath,
                     in_store: Mapping[str, str], entries: Mapping[str, FileEntry],
                     store: TaskStore) -> None:
    """The checkpoint whose files are ``local``'s and ``in_store``'s (path in the
    checkpoint -> the snapshot's URL in ``target``'s store; ``entries``: the manifest's
    entry of each URL) laid out at ``target``; ``store``: how tasks reach the store."""
    target.io.put_files([(path, join(target.url, path.relative_to(local).as_posix()))
                         for path in sorted(walk_files(local)) if path.is_file()])
    copies = sorted((url, join(target.url, rel)) for rel, url in in_store.items())
    if target.io.capabilities.server_side_copy:
        copy_checked(target.io, copies, {url: entry.sha256 for url, entry in entries.items()
                                         if entry.sha256 is not None})
    else:
        copy_in_tasks(spark, copies, entries, store)


def copy_checked(io: FileIO, copies: Sequence[tuple[str, str]],
                 expected_sha256: Mapping[str, str]) -> None:
    """Copy each (URL, new URL) inside the store, each copy checked against the SHA-256 the
    snapshot recorded of its source (``expected_sha256``, by URL)."""
    for (url, copy), found in zip(copies, io.copy_within(copies), strict=True):
        # Every file left in the store has its SHA-256 in the manifest (object_store._left):
        # a copy is never taken unchecked.
        expected = expected_sha256.get(url)
        if expected is None or found != expected:
            raise SnapshotDamagedError(
                f"{url}: expected content with SHA-256 {expected}, the store's copy at {copy} "
                f"has {found}; the snapshot's file was modified or corrupted: delete the "
                "snapshot and create it again")


def check_fetched(path: Path, url: str, entry: FileEntry | None, where: str) -> None:
    """Refuse a snapshot file fetched in a task whose bytes are not the manifest's."""
    mismatch = content_mismatch(path, entry) if entry is not None else None
    if mismatch is not None:
        raise SnapshotDamagedError(
            f"{url}: {where}: {mismatch}; the snapshot's file was modified or corrupted: "
            "delete the snapshot and create it again")


def copy_in_tasks(spark: SparkSession, copies: Sequence[tuple[str, str]],
                  entries: Mapping[str, FileEntry], store: TaskStore) -> int:
    """Copy each (URL, new URL) of ``copies`` within ``store`` in Spark tasks, checked
    against ``entries`` (the manifest's entry of each URL, where it has one); returns the
    bytes copied."""
    if not copies:
        return 0
    work = [(url, copy, entries.get(url)) for url, copy in copies]
    tasks = max(1, min(len(work), max(spark.sparkContext.defaultParallelism * 2,
                                       -(-len(work) // _FILES_PER_TASK))))
    with phase(f"copying {len(work)} state files within the store (Spark tasks)"):
        return sum(spark.sparkContext.parallelize(work, tasks)
                   .mapPartitions(functools.partial(_copy, store=store)).collect())


def _copy(files: Iterator[tuple[str, str, FileEntry | None]], store: TaskStore) -> Iterator[int]:
    """A task: its files fetched, checked and written again; yields the bytes of each."""
    work = list(files)
    if not work:
        return
    with tempfile.TemporaryDirectory(prefix="sparkpoint-copy-") as scratch:
        local = [Path(scratch) / str(index) for index in range(len(work))]
        pairs = list(zip(work, local, strict=True))
        with store.opened() as io:
            io.get_files([(url, path) for (url, _copy, _entry), path in pairs])
            for (url, copy, entry), path in pairs:
                check_fetched(path, url, entry, copy)
            io.put_files([(path, copy) for (_url, copy, _entry), path in pairs])
        sizes = [path.stat().st_size for path in local]
    yield from sizes
