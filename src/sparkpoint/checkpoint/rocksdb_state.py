"""RocksDB state store versions: ``<ver>.zip`` plus the SST files its metadata lists.

A version zip (CURRENT, MANIFEST, OPTIONS, ``metadata``) is self-contained together with the
files named in ``metadata``'s ``sstFiles`` under the partition's ``SSTs/`` directory. With
changelog checkpointing a version may exist only as ``<ver>.changelog`` on top of an older zip.
"""

from __future__ import annotations

import json
import re
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sparkpoint.errors import CheckpointFormatError
from sparkpoint.storage.location import Location

ROCKSDB_PROVIDER = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
HDFS_PROVIDER = "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider"

_ZIP_NAME = re.compile(r"^(\d+)(_[0-9a-f-]+)?\.zip$")
_CHANGELOG_NAME = re.compile(r"^(\d+)(_[0-9a-f-]+)?\.changelog$")


@dataclass(frozen=True)
class RocksDBVersion:
    """The files that make up one loadable version of one partition's store."""

    zip_name: str
    sst_files: tuple[str, ...]
    changelogs: tuple[str, ...]
    num_keys: int | None

    def relative_files(self) -> list[str]:
        # No zip: the version is the empty store of version 0 plus changelogs.
        files = [self.zip_name] if self.zip_name else []
        files.extend(f"SSTs/{name}" for name in self.sst_files)
        files.extend(self.changelogs)
        return files


def read_zip_metadata(zip_path: Path) -> dict[str, Any]:
    try:
        with zipfile.ZipFile(zip_path) as archive:
            text = archive.read("metadata").decode("utf-8")
    except (zipfile.BadZipFile, KeyError, OSError) as exc:
        raise CheckpointFormatError(
            f"{zip_path}: expected a RocksDB checkpoint zip with a 'metadata' entry, "
            f"found {exc.__class__.__name__}: {exc}"
        ) from exc
    header, _, body = text.partition("\n")
    if header != "v1":
        raise CheckpointFormatError(
            f"{zip_path}: expected RocksDB checkpoint metadata v1, found header {header[:20]!r}"
        )
    try:
        value: dict[str, Any] = json.loads(body)
    except json.JSONDecodeError as exc:
        raise CheckpointFormatError(
            f"{zip_path}: expected RocksDB checkpoint metadata JSON, found {exc.msg}"
        ) from exc
    return value


def _versions(directory: Location, pattern: re.Pattern[str]) -> dict[int, str]:
    found: dict[int, str] = {}
    if not directory.is_dir():
        return found
    for entry in directory.iterdir():
        match = pattern.match(entry.name)
        if match:
            if match.group(2):
                raise CheckpointFormatError(
                    f"{entry}: state files with unique ids (stateStore.checkpointFormatVersion=2) "
                    "are not supported yet; run the job with checkpointFormatVersion=1"
                )
            found[int(match.group(1))] = entry.name
    return found


def version_numbers(partition_dir: Location) -> tuple[set[int], set[int]]:
    """(versions with a zip, versions with a changelog) present in a partition directory."""
    return set(_versions(partition_dir, _ZIP_NAME)), set(_versions(partition_dir, _CHANGELOG_NAME))


def locate_version(partition_dir: Path, version: int) -> RocksDBVersion:
    """The newest zip at or below ``version`` and the changelogs that bring it to ``version``
    (no zip when every changelog from 1 is there)."""
    zips = _versions(partition_dir, _ZIP_NAME)
    changelogs = _versions(partition_dir, _CHANGELOG_NAME)
    base = max((v for v in zips if v <= version), default=None)
    if base is None and version > 0 and all(v in changelogs for v in range(1, version + 1)):
        # Changelog checkpointing before the first zip: Spark replays 1..version onto the
        # empty store.
        return RocksDBVersion("", (), tuple(changelogs[v] for v in range(1, version + 1)),
                              None)
    if base is None:
        if version == 0:
            return RocksDBVersion("", (), (), 0)
        raise CheckpointFormatError(
            f"{partition_dir}: expected a RocksDB snapshot {version}.zip (or an older zip plus "
            f"changelogs), found none at or below version {version}; the state was cleaned up "
            "or the checkpoint is incomplete"
        )
    needed = []
    for v in range(base + 1, version + 1):
        if v not in changelogs:
            raise CheckpointFormatError(
                f"{partition_dir}: expected {v}.changelog to rebuild version {version} from "
                f"{base}.zip, found it missing"
            )
        needed.append(changelogs[v])
    metadata = read_zip_metadata(partition_dir / zips[base])
    ssts = tuple(str(entry["dfsSstFileName"]) for entry in metadata.get("sstFiles", []))
    for sst in ssts:
        if not (partition_dir / "SSTs" / sst).is_file():
            raise CheckpointFormatError(
                f"{partition_dir / zips[base]}: lists SSTs/{sst}, found it missing"
            )
    num_keys = int(metadata["numKeys"]) if not needed and "numKeys" in metadata else None
    return RocksDBVersion(zips[base], ssts, tuple(needed), num_keys)
