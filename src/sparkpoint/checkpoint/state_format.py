"""Moving one RocksDB state version between checkpoint formats 1 and 2, in a checkpoint being
built (never in a job's or a snapshot's own files).

Format v2 (``stateStore.checkpointFormatVersion=2``) names each file of a version
``<version>_<id>`` and each changelog starts with ``v3`` and its lineage, the (version, id)
pairs back to the snapshot zip it builds on; the commit log names the id of each partition's
latest version. Format v1 names them ``<version>.zip`` / ``<version>.changelog`` with no
header. The records, the zip and its SST files are the same in both, so a move renames the
files the version loads from and rewrites the changelogs' headers. Spark takes the format of
a restarted query from its latest commit, so the commit written with the moved files decides
it (``upgrade/assemble.py``).
"""

from __future__ import annotations

import json
import struct
import uuid
from pathlib import Path

from sparkpoint.checkpoint import hdfs_state
from sparkpoint.checkpoint.rocksdb_state import locate_version


def _utf(text: str) -> bytes:
    """Java's DataOutputStream.writeUTF for ASCII text: a big-endian u16 length, the bytes."""
    data = text.encode("utf-8")
    return struct.pack(">H", len(data)) + data


def _changelog(records: list[tuple[bytes, bytes | None]], header: bytes) -> bytes:
    # The records' bytes as a .delta file holds them, after the header, in one LZ4 stream.
    return hdfs_state.encode_payload(header + hdfs_state.records_payload(records))


def to_unique_ids(partition_dir: Path, version: int) -> str:
    """Give the files ``version`` loads from (plain names) format v2 names and lineages;
    return the id of ``version``."""
    located = locate_version(partition_dir, version)
    lineage: list[tuple[int, str]] = []
    if located.zip_name:
        base = int(located.zip_name.split(".")[0])
        base_id = str(uuid.uuid4())
        (partition_dir / located.zip_name).rename(partition_dir / f"{base}_{base_id}.zip")
        lineage.append((base, base_id))
    for name in located.changelogs:
        path = partition_dir / name
        changed = int(name.split(".")[0])
        records = hdfs_state.read_changelog_records(path.read_bytes(), str(path))
        entries = [{"version": v, "checkpointUniqueId": i} for v, i in lineage]
        header = _utf("v3") + _utf(json.dumps(entries, separators=(",", ":")))
        own_id = str(uuid.uuid4())
        (partition_dir / f"{changed}_{own_id}.changelog").write_bytes(
            _changelog(records, header))
        path.unlink()
        lineage.append((changed, own_id))
    if not lineage:  # version 0: the empty store, which format v2 names too
        return str(uuid.uuid4())
    return lineage[-1][1]


def to_plain_names(partition_dir: Path, version: int, unique_id: str) -> None:
    """Give the files ``version`` (of id ``unique_id``) loads from format v1 names and
    changelogs without a header; every other file of the version's ids is removed (Spark's
    format v1 would take a leftover ``<v>_<id>.zip`` for a plain one)."""
    located = locate_version(partition_dir, version, unique_id)
    keep = set()
    if located.zip_name:
        plain = f"{located.zip_name.split('_')[0]}.zip"
        (partition_dir / located.zip_name).rename(partition_dir / plain)
        keep.add(plain)
    for name in located.changelogs:
        path = partition_dir / name
        records = hdfs_state.read_changelog_records(path.read_bytes(), str(path))
        plain = f"{name.split('_')[0]}.changelog"
        (partition_dir / plain).write_bytes(_changelog(records, b""))
        path.unlink()
        keep.add(plain)
    for leftover in list(partition_dir.iterdir()):
        if leftover.is_file() and leftover.name not in keep and "_" in leftover.name \
                and leftover.name.split("_")[0].isdigit():
            leftover.unlink()  # other ids' files and every .crc sidecar of format v2
