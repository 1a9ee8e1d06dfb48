"""Writing RocksDB state store versions without a JVM, in Spark's own files: a version
written from sorted pairs (repartition).

Spark 4.3 ships RocksDB 9.8.4 (``rocksdbjni-9.8.4.jar``), and so does rocksdict 0.3.29: the
files written here are written by the same RocksDB that Spark's provider opens them with
(:func:`writer_version` is compared with the session's ``RocksDB.rocksdbVersion()`` before
this path is taken; pinned by tests/integration/test_rocksdb_writer.py). Keys are removed
(prune) in the JVM instead, with Spark's own rocksdbjni (java/sparkpoint/spark/
RocksDbKeyRemoval.java), which packs the version the same way.

A version is a zip (``CURRENT``, ``MANIFEST-*``, ``OPTIONS-*``, the live WAL, ``metadata``)
plus the SST files the ``metadata`` lists under ``SSTs/`` by another name
(``RocksDBFileManager``). A written version is one SST ingested into a new database, and a
RocksDB checkpoint of it is packed as Spark packs one: immutable SSTs under
``SSTs/<number>-<uuid>.sst``, the rest zipped with a ``metadata`` that keeps every field of
another version's but the SST list and ``numKeys``.
"""

from __future__ import annotations

import collections
import json
import os
import re
import shutil
import tempfile
import uuid
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sparkpoint.checkpoint.rocksdb_reader import unpack_version
from sparkpoint.checkpoint.rocksdb_state import locate_version, read_zip_metadata
from sparkpoint.errors import CheckpointFormatError

if TYPE_CHECKING:
    import pyarrow as pa

_VERSION_LINE = re.compile(r"^\s*rocksdb_version=(\d+)\.(\d+)\.(\d+)\s*$", re.MULTILINE)
# RocksDB's name of a compression in an OPTIONS file -> rocksdict's constructor of it.
_COMPRESSIONS = {"kNoCompression": "none", "kSnappyCompression": "snappy",
                 "kZlibCompression": "zlib", "kBZip2Compression": "bz2",
                 "kLZ4Compression": "lz4", "kLZ4HCCompression": "lz4hc",
                 "kZSTD": "zstd"}


def writer_version() -> tuple[int, int, int]:
    """The RocksDB version rocksdict writes with, as its own ``OPTIONS`` file says."""
    from rocksdict import Options, Rdict

    with tempfile.TemporaryDirectory(prefix="sparkpoint-rocksdb-") as scratch:
        options = Options(raw_mode=True)
        options.create_if_missing(True)
        Rdict(scratch, options=options).close()
        found = _options_version(_options_text(Path(scratch)), scratch)
    return found


def _options_text(db_dir: Path) -> str:
    names = sorted(p for p in db_dir.iterdir() if p.name.startswith("OPTIONS-"))
    if not names:
        raise CheckpointFormatError(f"{db_dir}: expected an OPTIONS file, found none")
    return names[-1].read_text("utf-8", "replace")


def _options_version(text: str, where: str) -> tuple[int, int, int]:
    match = _VERSION_LINE.search(text)
    if match is None:
        raise CheckpointFormatError(f"{where}: expected 'rocksdb_version=' in OPTIONS")
    return int(match[1]), int(match[2]), int(match[3])


def _option(text: str, name: str) -> str | None:
    match = re.search(rf"^\s*{re.escape(name)}=(.*)$", text, re.MULTILINE)
    return match[1].strip() if match else None


def _options_like(spark_options: str) -> Any:
    """rocksdict options that write SSTs as the store's own settings did (Spark's
    ``spark.sql.streaming.stateStore.rocksdb.*``: compression, block size, bloom filter,
    table format version), read from the OPTIONS file Spark's RocksDB wrote."""
    from rocksdict import BlockBasedOptions, DBCompressionType, Options

    options = Options(raw_mode=True)
    options.set_disable_auto_compactions(True)
    compression = _COMPRESSIONS.get(_option(spark_options, "compression") or "", "lz4")
    options.set_compression_type(getattr(DBCompressionType, compression)())
    table = BlockBasedOptions()
    table.set_block_size(int(_option(spark_options, "block_size") or 4096))
    table.set_format_version(int(_option(spark_options, "format_version") or 5))
    bloom = re.match(r"bloomfilter:(\d+)(?:\.\d+)?:(true|false)",
                     _option(spark_options, "filter_policy") or "")
    if bloom:
        table.set_bloom_filter(int(bloom[1]), bloom[2] == "true")
    options.set_block_based_table_factory(table)
    return options


def _replace_partition_files(partition_dir: Path) -> None:
    """Unlink every file of the partition but its ``_metadata`` and the rewrite's scratch."""
    for entry in partition_dir.iterdir():
        if entry.name == "_metadata" or entry.name.startswith(".sparkpoint-rewrite-"):
            continue
        shutil.rmtree(entry) if entry.is_dir() and not entry.is_symlink() else entry.unlink()


def _pack(checkpoint_dir: Path, staging: Path, version: int,
          metadata: dict[str, Any]) -> None:
    """Spark's layout of one committed version (``RocksDBFileManager.saveCheckpointToDfs``)
    in ``staging``: each SST under ``SSTs/`` with a unique name, the other files and
    ``metadata`` in ``<version>.zip``. An SST the compaction left as it was is a link to the
    old version's file in the checkpoint: its bytes are taken from there (a hard link when
    the file system allows), before the old files are removed."""
    ssts_dir = staging / "SSTs"
    ssts_dir.mkdir(parents=True)
    listed: list[dict[str, Any]] = []
    others: list[Path] = []
    for path in sorted(checkpoint_dir.iterdir()):
        if path.name.endswith(".sst"):
            dfs_name = f"{path.stem}-{uuid.uuid4()}.sst"
            source = Path(os.path.realpath(path))
            try:
                os.link(source, ssts_dir / dfs_name)
            except OSError:
                shutil.copyfile(source, ssts_dir / dfs_name)
            listed.append({"localFileName": path.name, "dfsSstFileName": dfs_name,
                           "sizeBytes": source.stat().st_size})
        elif path.is_file() and not path.name.startswith("rocksdict-"):
            others.append(path)
    metadata = {**metadata, "sstFiles": listed}
    metadata.pop("logFiles", None)  # a fresh checkpoint has no archived WAL files
    with zipfile.ZipFile(staging / f"{version}.zip", "w", zipfile.ZIP_DEFLATED) as archive:
        for path in others:
            archive.write(path, path.name)
        archive.writestr("metadata", "v1\n" + json.dumps(metadata, separators=(",", ":")))


def _plain_zip(partition_dir: Path, version: int) -> tuple[Path, dict[str, Any]] | None:
    """``version``'s zip and its ``metadata`` when it is one zip with its key count and no
    column families; else None."""
    located = locate_version(partition_dir, version)
    if located.changelogs or not located.zip_name or located.num_keys is None:
        return None
    zip_path = partition_dir / located.zip_name
    metadata = read_zip_metadata(zip_path)
    return None if metadata.get("columnFamilyMapping") else (zip_path, metadata)


def _require_plain_zip(partition_dir: Path, version: int) -> tuple[Path, dict[str, Any]]:
    """:func:`_plain_zip`, refusing any other version (Spark rewrites those)."""
    plain = _plain_zip(partition_dir, version)
    if plain is None:
        raise CheckpointFormatError(
            f"{partition_dir}: expected version {version} as one zip with its number of keys "
            "and no column families; such versions are rewritten by Spark")
    return plain


def plain_zip_metadata(partition_dir: Path, version: int) -> dict[str, Any] | None:
    """The ``metadata`` of ``version`` when it is one zip with its key count and no column
    families (what prune's ``RocksDbKeyRemoval``, :func:`read_arrow` and
    :func:`write_sorted` handle); else None."""
    plain = _plain_zip(partition_dir, version)
    return None if plain is None else plain[1]


def options_text(partition_dir: Path, version: int) -> str:
    """The OPTIONS file Spark's RocksDB wrote with ``version`` (its store settings)."""
    return zip_options_text(partition_dir / locate_version(partition_dir, version).zip_name)


def zip_options_text(zip_path: Path) -> str:
    """The OPTIONS file packed in a version's zip."""
    with zipfile.ZipFile(zip_path) as archive:
        names = sorted(n for n in archive.namelist() if n.startswith("OPTIONS-"))
        if not names:
            raise CheckpointFormatError(f"{zip_path}: expected an OPTIONS file, found none")
        return archive.read(names[-1]).decode("utf-8", "replace")


def read_arrow(partition_dir: Path, version: int) -> tuple[pa.Array, pa.Array]:
    """Every (key, value) of ``version`` as stored (encoding byte included), as two Arrow
    binary arrays in key order; ``version`` as :func:`plain_zip_metadata` accepts it."""
    import pyarrow as pa
    from rocksdict import AccessType, Options, Rdict

    zip_path, metadata = _require_plain_zip(partition_dir, version)
    with tempfile.TemporaryDirectory(prefix="sparkpoint-rocksdb-") as scratch:
        unpack_version(partition_dir, zip_path, metadata, Path(scratch))
        try:
            db = Rdict(scratch, options=Options(raw_mode=True),
                       access_type=AccessType.read_only())
        except Exception as exc:  # rocksdict raises plain exceptions with RocksDB's status
            raise CheckpointFormatError(
                f"{zip_path}: RocksDB could not open the version: {exc}") from exc
        try:
            # Two scans in rocksdict's own loop: no Python code per key.
            keys, values = list(db.keys()), list(db.values())
        finally:
            db.close()
    if len(keys) != len(values):
        raise CheckpointFormatError(f"{zip_path}: the keys and values of one read differ "
                                    "in number")
    return pa.array(keys, pa.binary()), pa.array(values, pa.binary())


def write_sorted(partition_dir: Path, version: int, keys: pa.Array, values: pa.Array,
                 spark_options: str, metadata: dict[str, Any]) -> None:
    """Replace the store in ``partition_dir`` (created if missing) by ``version`` holding
    the pairs (stored keys, Arrow binary, in RocksDB's bytewise order, which is Arrow's
    sort order of binaries; no key twice): one SST written in order, ingested into a new
    database, its checkpoint packed as Spark packs a commit; ``metadata``: another
    version's, its fields kept but the SST list and ``numKeys``."""
    from rocksdict import Checkpoint, IngestExternalFileOptions, Rdict, SstFileWriter

    partition_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".sparkpoint-rewrite-", dir=partition_dir) as tmp:
        options = _options_like(spark_options)
        sst = Path(tmp) / "pairs.sst"
        rows = len(keys)
        if len(values) != rows:  # map() below would stop at the shorter without a word
            raise ValueError(f"{rows} keys but {len(values)} values to write")
        if rows:
            writer = SstFileWriter(options=options)
            writer.open(str(sst))
            # map() drives the writer from C: no bytecode per key (15% of the SST's time).
            collections.deque(map(writer.__setitem__, keys.to_pylist(), values.to_pylist()),
                              maxlen=0)
            writer.finish()
        options.create_if_missing(True)
        db = Rdict(str(Path(tmp) / "db"), options=options)
        try:
            if rows:
                moved = IngestExternalFileOptions()
                moved.set_move_files(True)
                db.ingest_external_file([str(sst)], moved)
            Checkpoint(db).create_checkpoint(str(Path(tmp) / "checkpoint"))
        finally:
            db.close()
        staging = Path(tmp) / "staging"
        _pack(Path(tmp) / "checkpoint", staging, version, {**metadata, "numKeys": rows})
        _replace_partition_files(partition_dir)
        for entry in staging.iterdir():
            os.rename(entry, partition_dir / entry.name)
