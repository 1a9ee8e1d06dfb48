"""RocksDB state store versions: ``<ver>.zip`` plus the SST files its metadata lists.

A version zip (CURRENT, MANIFEST, OPTIONS, ``metadata``) is self-contained together with the
files named in ``metadata``'s ``sstFiles`` under the partition's ``SSTs/`` directory. With
changelog checkpointing a version may exist only as ``<ver>.changelog`` on top of an older zip.
"""

from __future__ import annotations

import json
import re
import zipfile
from collections.abc import Callable
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
    """Version -> file name of the plain (format v1) files of one kind."""
    found: dict[int, str] = {}
    for (version, unique_id), name in _named_versions(directory, pattern).items():
        if unique_id is None:
            found[version] = name
        else:
            raise CheckpointFormatError(
                f"{directory / name}: state in checkpoint format v2 (stateStore."
                "checkpointFormatVersion=2, files named by version and id); this command "
                "does not read that format yet (snapshot create and starting from a snapshot "
                "do)")
    return found


def _named_versions(directory: Location,
                    pattern: re.Pattern[str]) -> dict[tuple[int, str | None], str]:
    """(version, unique id or None) -> file name, for every file of one kind."""
    found: dict[tuple[int, str | None], str] = {}
    if not directory.is_dir():
        return found
    for entry in directory.iterdir():
        match = pattern.match(entry.name)
        if match:
            unique_id = match.group(2)[1:] if match.group(2) else None
            found[(int(match.group(1)), unique_id)] = entry.name
    return found


def version_numbers(partition_dir: Location) -> tuple[set[int], set[int]]:
    """(versions with a zip, versions with a changelog) present in a partition directory,
    with or without unique ids (format v2 may hold several attempts of a version: the commit
    log names the one that counts)."""
    return ({v for v, _ in _named_versions(partition_dir, _ZIP_NAME)},
            {v for v, _ in _named_versions(partition_dir, _CHANGELOG_NAME)})


def locate_version(partition_dir: Path, version: int,
                   unique_id: str | None = None,
                   sst_present: Callable[[str], bool] | None = None) -> RocksDBVersion:
    """The newest zip at or below ``version`` and the changelogs that bring it to ``version``
    (no zip when every changelog from 1 is there). ``unique_id``: the version's id from the
    commit log (checkpoint format v2), whose changelog names the files it builds on.
    ``sst_present``: whether ``SSTs/<name>`` exists, where the SSTs are not in
    ``partition_dir`` (a partition in a store whose SSTs are not fetched)."""
    present = sst_present or (lambda sst: (partition_dir / "SSTs" / sst).is_file())
    if unique_id is not None:
        return _locate_unique(partition_dir, version, unique_id, present)
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
    return _on_zip(partition_dir, zips[base], needed, present)


def _on_zip(partition_dir: Path, zip_name: str, changelogs: list[str],
            sst_present: Callable[[str], bool]) -> RocksDBVersion:
    """A version loaded from ``zip_name`` (with the SSTs its metadata lists, which must be
    there) and then ``changelogs``; its key count is known when no changelog follows."""
    metadata = read_zip_metadata(partition_dir / zip_name)
    ssts = tuple(str(entry["dfsSstFileName"]) for entry in metadata.get("sstFiles", []))
    for sst in ssts:
        if not sst_present(sst):
            raise CheckpointFormatError(
                f"{partition_dir / zip_name}: lists SSTs/{sst}, found it missing"
            )
    num_keys = int(metadata["numKeys"]) if not changelogs and "numKeys" in metadata else None
    return RocksDBVersion(zip_name, ssts, tuple(changelogs), num_keys)


def _locate_unique(partition_dir: Path, version: int, unique_id: str,
                   sst_present: Callable[[str], bool]) -> RocksDBVersion:
    """Format v2, as Spark's RocksDB.load does: ``<version>_<id>.zip`` when it exists, else
    ``<version>_<id>.changelog`` on top of the newest zip its lineage names (or the empty
    store when the lineage starts at version 1). Files of other ids (attempts of failed
    tasks, versions of abandoned runs) are never read."""
    zips = _named_versions(partition_dir, _ZIP_NAME)
    changelogs = _named_versions(partition_dir, _CHANGELOG_NAME)
    own_zip = zips.get((version, unique_id))
    needed: list[str] = []
    if own_zip is None:
        own = changelogs.get((version, unique_id))
        if own is None:
            raise CheckpointFormatError(
                f"{partition_dir}: expected {version}_{unique_id}.zip or .changelog (the id "
                "the commit log names for this version), found neither; the state was cleaned "
                "up or the checkpoint is incomplete")
        lineage = [(v, i) for v, i in changelog_lineage(partition_dir / own) if v < version]
        bases = [(v, i) for v, i in lineage if (v, i) in zips]
        base = max(bases) if bases else None
        if base is None and (not lineage or lineage[0][0] != 1) and version != 1:
            raise CheckpointFormatError(
                f"{partition_dir / own}: its lineage names no snapshot zip present and does "
                "not start at version 1; the state files it builds on are gone")
        for v, i in lineage:
            if base is None or v > base[0]:
                name = changelogs.get((v, i))
                if name is None:
                    raise CheckpointFormatError(
                        f"{partition_dir}: expected {v}_{i}.changelog (named by the lineage "
                        f"of {own}), found it missing")
                needed.append(name)
        needed.append(own)
        if base is None:
            return RocksDBVersion("", (), tuple(needed), None)
        own_zip = zips[base]
    return _on_zip(partition_dir, own_zip, needed, sst_present)


def changelog_lineage(path: Path) -> list[tuple[int, str]]:
    """The (version, unique id) pairs a format v2 changelog (``v3``/``v4`` header) builds on,
    oldest first: from the version after the last snapshot up to the one before it."""
    from sparkpoint.checkpoint.hdfs_state import changelog_header

    version, lineage = changelog_header(path.read_bytes(), str(path))
    if version < 3:
        raise CheckpointFormatError(f"{path}: expected a changelog with a lineage (v3 or v4, "
                                    f"checkpoint format v2), found changelog v{version}")
    return lineage
