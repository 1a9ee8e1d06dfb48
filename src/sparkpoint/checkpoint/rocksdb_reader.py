"""Reading the keys and values of one RocksDB state store version, without a JVM.

A version is a zip (CURRENT, MANIFEST, OPTIONS, ``metadata``) plus the SST files its
``metadata`` lists under ``SSTs/`` by another name. The zip is unpacked into a temporary
directory, each SST is linked in under the local name RocksDB's MANIFEST knows it by, and
the database is opened read-only with rocksdict (RocksDB's own code: it reads the SSTs
Spark 4.3's rocksdbjni 9.8 writes). Nothing in the partition directory is written.

Keys are decoded as ``checkpoint/rocksdb_keys.py`` describes (a version byte, or a
prefix-scan layout for session windows); values carry one encoding version byte (0) before
the ``UnsafeRow`` bytes, checked and removed here.
"""

from __future__ import annotations

import os
import tempfile
import zipfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from sparkpoint.checkpoint import hdfs_state
from sparkpoint.checkpoint.rocksdb_keys import KeyEncoding, strip_version
from sparkpoint.checkpoint.rocksdb_state import locate_version, read_zip_metadata
from sparkpoint.errors import CheckpointFormatError


def read_pairs(partition_dir: Path, version: int, keys: KeyEncoding | None = None,
               unique_id: str | None = None) -> Iterator[tuple[bytes, bytes]]:
    """Every (key, value) of the store at ``version``, as ``UnsafeRow`` bytes, the keys
    decoded by ``keys`` (default: no prefix encoding). ``unique_id``: the version's id in
    checkpoint format v2, from the commit log."""
    yield from decoded_pairs(read_raw_pairs(partition_dir, version, unique_id), keys,
                             partition_dir)


def decoded_pairs(raw: Iterable[tuple[bytes, bytes]], keys: KeyEncoding | None,
                  where: Path) -> Iterator[tuple[bytes, bytes]]:
    """Pairs as RocksDB holds them (encoded) as ``UnsafeRow`` bytes, the keys decoded by
    ``keys`` (default: no prefix encoding); ``where`` names the store in errors."""
    encoding = keys or KeyEncoding()
    for raw_key, raw_value in raw:
        yield encoding.decode(raw_key, where), strip_version(raw_value, "value", where)


def read_raw_pairs(partition_dir: Path, version: int,
                   unique_id: str | None = None) -> Iterator[tuple[bytes, bytes]]:
    """Every (key, value) of the store at ``version`` as RocksDB holds them (encoded).

    A version written with changelog checkpointing is its base zip plus the changelogs
    after it, replayed in order (their records are the puts and deletes of each batch, in
    the same record format as the HDFS provider's delta files).

    Raises:
        CheckpointFormatError: the version's files are missing or damaged.
    """
    located = locate_version(partition_dir, version, unique_id)
    if not located.changelogs:
        yield from _zip_pairs(partition_dir, located.zip_name)
        return
    state = dict(_zip_pairs(partition_dir, located.zip_name))
    for name in located.changelogs:
        path = partition_dir / name
        for key, value in hdfs_state.read_changelog_records(path.read_bytes(), str(path)):
            if value is None:
                state.pop(key, None)
            else:
                state[key] = value
    yield from state.items()


def unpack_version(partition_dir: Path, zip_path: Path, metadata: dict[str, Any],
                   db_dir: Path) -> None:
    """Make ``db_dir`` the database of one version: the zip's files (but ``metadata``)
    written there, each SST its ``metadata`` lists linked in under the name RocksDB's
    MANIFEST knows it by (RocksDB never writes an SST; a compaction only unlinks links)."""
    with zipfile.ZipFile(zip_path) as archive:
        for member in archive.namelist():
            if "/" not in member and member != "metadata":
                (db_dir / member).write_bytes(archive.read(member))
    for entry in metadata.get("sstFiles", []):
        sst = os.path.abspath(partition_dir / "SSTs" / str(entry["dfsSstFileName"]))
        os.symlink(sst, db_dir / str(entry["localFileName"]))


def _zip_pairs(partition_dir: Path, zip_name: str) -> Iterator[tuple[bytes, bytes]]:
    """The (key, value) pairs of one version zip and its SST files, in key order."""
    if not zip_name:
        return
    from rocksdict import AccessType, Options, Rdict

    zip_path = partition_dir / zip_name
    metadata = read_zip_metadata(zip_path)
    if metadata.get("columnFamilyMapping"):
        raise CheckpointFormatError(
            f"{zip_path}: the store has column families (transformWithState); reading their "
            "rows is not supported yet")
    with tempfile.TemporaryDirectory(prefix="sparkpoint-rocksdb-") as scratch:
        db_dir = Path(scratch)
        unpack_version(partition_dir, zip_path, metadata, db_dir)
        try:
            db = Rdict(str(db_dir), options=Options(raw_mode=True),
                       access_type=AccessType.read_only())
        except Exception as exc:  # rocksdict raises plain exceptions with RocksDB's status
            raise CheckpointFormatError(
                f"{zip_path}: RocksDB could not open the version: {exc}") from exc
        try:
            for key, value in db.items():
                if not isinstance(key, bytes) or not isinstance(value, bytes):
                    raise CheckpointFormatError(f"{zip_path}: expected raw bytes from RocksDB")
                yield key, value
        finally:
            db.close()
