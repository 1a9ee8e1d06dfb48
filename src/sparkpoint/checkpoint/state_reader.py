"""One way to read a state store partition at a version, whatever the provider wrote."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from sparkpoint.checkpoint import hdfs_state, rocksdb_reader
from sparkpoint.checkpoint.rocksdb_keys import KeyEncoding
from sparkpoint.checkpoint.rocksdb_state import locate_version


def read_pairs(partition_dir: Path, version: int, rocksdb: bool,
               keys: KeyEncoding | None = None,
               unique_id: str | None = None) -> Iterator[tuple[bytes, bytes]]:
    """Every (key, value) of the store at ``version`` as ``UnsafeRow`` bytes. ``keys``: how
    the RocksDB provider encoded the keys (the HDFS provider stores plain rows);
    ``unique_id``: the version's id in checkpoint format v2 (RocksDB only)."""
    if rocksdb:
        yield from rocksdb_reader.read_pairs(partition_dir, version, keys, unique_id)
        return
    if not partition_dir.is_dir() and version == 0:
        return
    yield from hdfs_state.load_version(partition_dir, version).items()


def count_rows(partition_dir: Path, version: int, rocksdb: bool,
               unique_id: str | None = None) -> int:
    """Keys of the store at ``version``, without decoding rows where the files say it:
    RocksDB's version metadata carries its key count; HDFS files are counted by key.
    ``unique_id``: the version's id (checkpoint format v2)."""
    if rocksdb:
        located = locate_version(partition_dir, version, unique_id)
        if located.num_keys is not None:
            return located.num_keys
        return sum(1 for _pair in rocksdb_reader.read_raw_pairs(partition_dir, version,
                                                                unique_id))
    return hdfs_state.count_rows(partition_dir, hdfs_state.files_for_version(partition_dir,
                                                                             version))
