"""This machine's cache of immutable files of a store (state files of checkpoints in a home on
S3 or HDFS), so that a reader of one state version fetches each file once.

Only files written once under a name of their own are cached (deltas, snapshots, RocksDB zips,
SSTs, changelogs). A cached file counts as the store's only while its size and the store's
modification time are the same as the store's listing says now (a file Spark wrote again,
such as a RocksDB zip of a batch that ran twice, is fetched again), and files the listing no
longer has leave the cache. Deleting the cache at any moment changes no result: the next
reader fetches again.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping
from pathlib import Path

from sparkpoint import settings
from sparkpoint.storage.fileio import FileIO, join
from sparkpoint.storage.local import to_path, walk_files

# This machine's local space for homes on S3 or HDFS (default ~/.cache/sparkpoint).
SCRATCH_ENV = settings.SCRATCH.name


def scratch_base() -> Path:
    return to_path(settings.SCRATCH.get())


def cache_root() -> Path:
    return scratch_base() / "files"


def cache_dir(url: str) -> Path:
    """The local directory that caches files under ``url``."""
    return cache_root() / hashlib.sha256(url.rstrip("/").encode("utf-8")).hexdigest()[:32]


def _current(path: Path, size: int, modified: float | None) -> bool:
    try:
        here = path.stat()
    except FileNotFoundError:
        return False
    return here.st_size == size and modified is not None and abs(here.st_mtime - modified) < 1e-3


def cached_copies(io: FileIO, url: str, wanted: Mapping[str, tuple[int, float | None]],
                  listed: set[str] | None = None) -> Path:
    """Local copies of the files ``wanted`` (path relative to ``url`` -> size and store
    modification time from a listing made just before), in the directory returned; files of
    the cache the store's listing (``listed``) no longer has are removed from it."""
    local = cache_dir(url)
    local.mkdir(parents=True, exist_ok=True)
    if listed is not None and local.is_dir():
        for path in walk_files(local):
            rel = path.relative_to(local).as_posix()
            if rel not in listed and not rel.endswith(".part"):
                path.unlink(missing_ok=True)
    fetch = [(rel, stat) for rel, stat in wanted.items()
             if not _current(local / rel, stat[0], stat[1])]
    # Fetched under a temporary name and renamed, so a cut-off fetch leaves no file that
    # looks complete.
    io.get_files([(join(url, rel), local / f"{rel}.part") for rel, _ in fetch])
    for rel, (_, modified) in fetch:
        part = local / f"{rel}.part"
        if modified is not None:
            os.utime(part, (modified, modified))
        os.replace(part, local / rel)
    return local
