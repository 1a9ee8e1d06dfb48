"""The state store providers sparkpoint reads and writes: one interface, one class each.

A checkpoint's state is written by the provider its offsets entries name
(``spark.sql.streaming.stateStore.providerClass``): Spark's HDFS-backed provider (its
default: a chain of deltas and snapshot files per partition, ``hdfs_state.py``) or its
RocksDB provider (a zip per version naming its SST files, ``rocksdb_state.py``,
``rocksdb_reader.py``). Everything that depends on which one it is goes through a
``StateProvider`` (``provider_named``, ``Checkpoint.state_provider``): reading a partition's
rows at a version, counting them, which versions a partition can still load, which files a
version is made of. Work that needs Spark (rewriting, pruning, repartitioning) keeps a table
keyed by the provider in its own module (``spark/``, ``snapshot/prune.py``,
``upgrade/restore.py``), so a third provider is one class here and one row in each table.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator
from pathlib import Path

from sparkpoint.checkpoint import hdfs_state, rocksdb_reader
from sparkpoint.checkpoint.rocksdb_keys import KeyEncoding
from sparkpoint.checkpoint.rocksdb_state import (
    HDFS_PROVIDER,
    ROCKSDB_PROVIDER,
    locate_version,
    version_numbers,
)
from sparkpoint.errors import CheckpointFormatError
from sparkpoint.storage.location import Location


def loadable_versions(versions: Iterable[int], bases: set[int], steps: set[int]) -> set[int]:
    """Versions v reachable as the newest base at or below v (0: the empty state) plus
    every step after it.

    One walk up from the newest base below the lowest version: v is reachable when it is
    a base, or when v-1 is and v's step exists (v-1 then has the same newest base)."""
    if not versions:
        return set()
    wanted = set(versions)
    first = max((b for b in bases if b <= min(wanted)), default=0)
    found = {first} & wanted
    reachable = True
    for version in range(first + 1, max(wanted) + 1):
        reachable = version in bases or (reachable and version in steps)
        if reachable and version in wanted:
            found.add(version)
    return found


class StateProvider(ABC):
    """What sparkpoint knows of one of Spark's state store providers."""

    #: Spark's class name, as the offsets entries record it.
    class_name: str
    #: A short name for messages ("HDFS-backed", "RocksDB").
    label: str
    #: Whether a version's files are named by the commit (checkpoint format v2 ids).
    has_unique_ids: bool

    @abstractmethod
    def read_pairs(self, partition_dir: Path, version: int, keys: KeyEncoding | None = None,
                   unique_id: str | None = None) -> Iterator[tuple[bytes, bytes]]:
        """Every (key, value) of the store at ``version`` as ``UnsafeRow`` bytes. ``keys``:
        how the keys are encoded (RocksDB); ``unique_id``: the version's id in checkpoint
        format v2."""

    @abstractmethod
    def count_rows(self, partition_dir: Path, version: int,
                   unique_id: str | None = None) -> int:
        """Keys of the store at ``version``, without decoding rows where the files say it."""

    @abstractmethod
    def recorded_rows(self, partition_dir: Path, version: int,
                      unique_id: str | None = None) -> int | None:
        """Keys of the store at ``version`` as the files record them without reading the
        rows (None: they do not, and counting would mean reading every row)."""

    @abstractmethod
    def version_files(self, partition_dir: Path, version: int,
                      unique_id: str | None = None) -> list[str]:
        """The files (relative to the partition) Spark reads to load ``version``."""

    @abstractmethod
    def loadable(self, partition_dir: Location, versions: set[int]) -> set[int]:
        """Which of ``versions`` the partition's files can still load."""

    def version_bytes(self, partition_dir: Path, version: int,
                      unique_id: str | None = None) -> int:
        """Bytes of the files Spark reads to load the version (what a snapshot holds)."""
        if not partition_dir.is_dir() or version == 0:
            return 0
        return sum((partition_dir / name).stat().st_size
                   for name in self.version_files(partition_dir, version, unique_id))


class HdfsBackedProvider(StateProvider):
    class_name = HDFS_PROVIDER
    label = "HDFS-backed"
    has_unique_ids = False

    def read_pairs(self, partition_dir: Path, version: int, keys: KeyEncoding | None = None,
                   unique_id: str | None = None) -> Iterator[tuple[bytes, bytes]]:
        if not partition_dir.is_dir() and version == 0:
            return
        yield from hdfs_state.load_version(partition_dir, version).items()

    def count_rows(self, partition_dir: Path, version: int,
                   unique_id: str | None = None) -> int:
        return hdfs_state.count_rows(partition_dir,
                                     hdfs_state.files_for_version(partition_dir, version))

    def recorded_rows(self, partition_dir: Path, version: int,
                      unique_id: str | None = None) -> int | None:
        # The files hold rows only: counted by key (no values decoded), which every
        # HDFS-provider version allows.
        return self.count_rows(partition_dir, version)

    def version_files(self, partition_dir: Path, version: int,
                      unique_id: str | None = None) -> list[str]:
        return list(hdfs_state.files_for_version(partition_dir, version).names())

    def loadable(self, partition_dir: Location, versions: set[int]) -> set[int]:
        if not partition_dir.is_dir():
            return {v for v in versions if v == 0}
        deltas, snapshots = hdfs_state.state_file_versions(partition_dir)
        return loadable_versions(versions, snapshots, deltas)


class RocksDbProvider(StateProvider):
    class_name = ROCKSDB_PROVIDER
    label = "RocksDB"
    has_unique_ids = True

    def read_pairs(self, partition_dir: Path, version: int, keys: KeyEncoding | None = None,
                   unique_id: str | None = None) -> Iterator[tuple[bytes, bytes]]:
        yield from rocksdb_reader.read_pairs(partition_dir, version, keys, unique_id)

    def count_rows(self, partition_dir: Path, version: int,
                   unique_id: str | None = None) -> int:
        recorded = self.recorded_rows(partition_dir, version, unique_id)
        if recorded is not None:
            return recorded
        return sum(1 for _pair in rocksdb_reader.read_raw_pairs(partition_dir, version,
                                                                unique_id))

    def recorded_rows(self, partition_dir: Path, version: int,
                      unique_id: str | None = None) -> int | None:
        return locate_version(partition_dir, version, unique_id).num_keys

    def version_files(self, partition_dir: Path, version: int,
                      unique_id: str | None = None) -> list[str]:
        return locate_version(partition_dir, version, unique_id).relative_files()

    def loadable(self, partition_dir: Location, versions: set[int]) -> set[int]:
        if not partition_dir.is_dir():
            return {v for v in versions if v == 0}
        zips, changelogs = version_numbers(partition_dir)
        # Below the first zip, changelogs from 1 rebuild a version from the empty store.
        return loadable_versions(versions, zips, changelogs)


HDFS_BACKED = HdfsBackedProvider()
ROCKSDB = RocksDbProvider()
PROVIDERS: dict[str, StateProvider] = {p.class_name: p for p in (HDFS_BACKED, ROCKSDB)}


def provider_named(class_name: str, where: str = "the checkpoint") -> StateProvider:
    """The provider of Spark's class ``class_name``; a clear error for one sparkpoint does
    not read."""
    provider = PROVIDERS.get(class_name)
    if provider is None:
        known = ", ".join(sorted(PROVIDERS))
        raise CheckpointFormatError(
            f"{where}: expected state written by one of Spark's providers sparkpoint reads "
            f"({known}), found {class_name}; run the job with one of those providers")
    return provider
