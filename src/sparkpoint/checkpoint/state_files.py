"""A state store partition of a checkpoint in a store, read where the readers can read it.

The readers of state files (``hdfs_state``, ``rocksdb_reader``) read local files. For a
checkpoint on local disk they read the partition directory itself; for one on S3 or HDFS,
the files that load the wanted version (``version_files``) are fetched into this machine's
cache of immutable files (``storage/file_cache.py``) and read there.
"""

from __future__ import annotations

from pathlib import Path

from sparkpoint.checkpoint.version_files import files_for_version, rocksdb_ssts
from sparkpoint.storage.file_cache import cached_copies
from sparkpoint.storage.location import Location

# A running job's maintenance may remove an old version between listing and fetching.
FETCH_ATTEMPTS = 3


def readable_partition(partition_dir: Location, version: int) -> Path:
    """A local directory holding what loading ``version`` of the partition reads."""
    if isinstance(partition_dir, Path):
        return partition_dir
    io, url = partition_dir.io, partition_dir.url
    for attempt in range(FETCH_ATTEMPTS):
        stats = io.walk_stats(url)
        wanted = files_for_version(stats, version)
        try:
            local = cached_copies(io, url, {rel: stats[rel] for rel in wanted}, set(stats))
            ssts = rocksdb_ssts(local, wanted) & set(stats)
            return cached_copies(io, url, {rel: stats[rel] for rel in ssts})
        except FileNotFoundError:
            if attempt == FETCH_ATTEMPTS - 1:
                raise
    raise AssertionError("unreachable")
