"""Which state files of a checkpoint one state version needs, told from file names alone.

Used to fetch only what exporting batch N needs (state version N+1) from a checkpoint in a
remote home: per state store directory, the newest full copy at or below the version
(HDFS provider ``<v>.snapshot``, RocksDB ``<v>.zip``) and the increments after it (``.delta``,
``.changelog``) up to the version; files without a version (schemas, metadata) always. The
SST files a RocksDB zip lists are known only from the zip itself (``rocksdb_ssts``).
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path

from sparkpoint.checkpoint.rocksdb_state import read_zip_metadata

_VERSIONED = re.compile(r"^(\d+)(_[0-9a-f-]+)?\.(delta|snapshot|zip|changelog)$")
_FULL = {"snapshot", "zip"}
SST_DIR = "SSTs"


def _parent(rel: str) -> tuple[str, str]:
    parent, _, name = rel.rpartition("/")
    return parent, name


def files_for_version(files: Iterable[str], version: int) -> set[str]:
    """Of ``files`` (paths relative to the checkpoint's ``state/`` directory), those that
    loading ``version`` reads, except RocksDB SSTs."""
    by_dir: dict[str, list[tuple[int, str, str]]] = defaultdict(list)
    wanted = set()
    for rel in files:
        parent, name = _parent(rel)
        match = _VERSIONED.match(name)
        if match:
            by_dir[parent].append((int(match.group(1)), match.group(3), rel))
        elif _parent(parent)[1] != SST_DIR:
            wanted.add(rel)
    for versions in by_dir.values():
        base = max((v for v, kind, _ in versions if kind in _FULL and v <= version), default=0)
        wanted.update(rel for v, kind, rel in versions
                      if (v == base and kind in _FULL) or (base < v <= version and
                                                           kind not in _FULL))
    return wanted


def is_state_data(rel: str) -> bool:
    """Whether a path relative to the checkpoint's ``state/`` directory holds keys and values
    (a version's file, its checksum, or an SST), not a schema or metadata file."""
    parent, name = _parent(rel)
    name = name.removeprefix(".").removesuffix(".crc")
    return bool(_VERSIONED.match(name)) or _parent(parent)[1] == SST_DIR \
        or name.endswith(".sst")


def rocksdb_ssts(state_dir: Path, fetched: Iterable[str]) -> set[str]:
    """The SSTs (relative to ``state_dir``) the fetched RocksDB zips list."""
    needed = set()
    for rel in fetched:
        if rel.endswith(".zip"):
            parent = _parent(rel)[0]
            metadata = read_zip_metadata(state_dir / rel)
            for entry in metadata.get("sstFiles", []):
                sst = f"{SST_DIR}/{entry['dfsSstFileName']}"
                needed.add(f"{parent}/{sst}" if parent else sst)
    return needed
