"""A state store partition of a checkpoint in a store, read where the readers can read it.

The readers of state files (``hdfs_state``, ``rocksdb_reader``) read local files. For a
checkpoint on local disk they read the partition directory itself; for one on S3 or HDFS,
the files that load the wanted version (``version_files``) are fetched into this machine's
cache of immutable files (``storage/file_cache.py``) and read there.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from sparkpoint.checkpoint.version_files import files_for_version, rocksdb_ssts
from sparkpoint.storage.file_cache import cached_copies
from sparkpoint.storage.fileio import StoredFile
from sparkpoint.storage.location import Location, StorePath

# A running job's maintenance may remove an old version between listing and fetching.
FETCH_ATTEMPTS = 3


def readable_partition(partition_dir: Location, version: int) -> Path:
    """A local directory holding what loading ``version`` of the partition reads."""
    if isinstance(partition_dir, Path):
        return partition_dir
    return _fetched(partition_dir, version, with_ssts=True).local


@dataclass(frozen=True)
class ListedPartition:
    """A partition in a store, for a reader that needs only what describes a version: the
    RocksDB zips (their metadata lists the SSTs and counts the keys) and changelogs fetched
    into ``local``, the SSTs left in the store, and every file as one listing found it."""

    local: Path
    files: dict[str, StoredFile]


def listed_partition(partition_dir: StorePath, version: int) -> ListedPartition:
    return _fetched(partition_dir, version, with_ssts=False)


def _fetched(partition_dir: StorePath, version: int, with_ssts: bool) -> ListedPartition:
    io, url = partition_dir.io, partition_dir.url
    for attempt in range(FETCH_ATTEMPTS):
        files = io.walk_objects(url)
        stats = {rel: (found.bytes, found.modified) for rel, found in files.items()}
        wanted = files_for_version(files, version)
        try:
            local = cached_copies(io, url, {rel: stats[rel] for rel in wanted}, set(files))
            if with_ssts:
                ssts = rocksdb_ssts(local, wanted) & set(files)
                cached_copies(io, url, {rel: stats[rel] for rel in ssts})
            return ListedPartition(local, files)
        except FileNotFoundError:
            if attempt == FETCH_ATTEMPTS - 1:
                raise
    raise AssertionError("unreachable")
