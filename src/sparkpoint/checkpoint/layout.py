"""Read access to one Spark 4.3 checkpoint directory, without a JVM."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import overload

from sparkpoint.checkpoint.logs import CommitLogEntry, OffsetLogEntry, QueryMetadata
from sparkpoint.checkpoint.operators import OperatorMetadata, StateSchemaFile
from sparkpoint.checkpoint.providers import StateProvider, provider_named
from sparkpoint.checkpoint.rocksdb_keys import KeyEncoding
from sparkpoint.checkpoint.rocksdb_state import HDFS_PROVIDER
from sparkpoint.errors import CheckpointFormatError, NoCommittedBatchError
from sparkpoint.storage.location import Location, local_path, numbered_files

PROVIDER_CONF = "spark.sql.streaming.stateStore.providerClass"
SHUFFLE_PARTITIONS_CONF = "spark.sql.shuffle.partitions"
CHECKPOINT_FORMAT_CONF = "spark.sql.streaming.stateStore.checkpointFormatVersion"


@dataclass(frozen=True)
class StoreLayout:
    """Where one state store of an operator keeps its files, relative to the operator dir."""

    name: str
    # Joins keep each of their four stores in a subdirectory of the partition directory.
    subdir: str | None

    @overload
    def partition_dir(self, operator_dir: Path, partition: int) -> Path: ...

    @overload
    def partition_dir(self, operator_dir: Location, partition: int) -> Location: ...

    def partition_dir(self, operator_dir: Location, partition: int) -> Location:
        base = operator_dir / str(partition)
        return base / self.subdir if self.subdir else base


@dataclass(frozen=True)
class OperatorDir:
    path: Location
    metadata: OperatorMetadata
    # The state partitions of the batch the operator was listed for (see
    # Checkpoint.operators): directories past it are left over from before a repartition.
    partitions: int

    @property
    def local_path(self) -> Path:
        """The operator's directory in a checkpoint on local disk (a snapshot, a checkpoint
        being built)."""
        return local_path(self.path)

    @property
    def operator_id(self) -> int:
        return self.metadata.operator_id

    @property
    def operator_name(self) -> str:
        return self.metadata.operator_name

    def stores(self) -> list[StoreLayout]:
        names = [store.name for store in self.metadata.stores] or ["default"]
        if names == ["default"]:
            return [StoreLayout("default", None)]
        return [StoreLayout(name, name) for name in names]

    def unique_id(self, commit: CommitLogEntry, partition: int, store_index: int) -> str | None:
        """Checkpoint format v2: the id of the state version ``commit`` made in one partition
        and store (the files to read are named by it, never by the version alone); None for
        format v1."""
        ids = commit.state_unique_ids.get(self.operator_id)
        if ids is None:
            return None
        try:
            return ids[partition][store_index]
        except IndexError:
            raise CheckpointFormatError(
                f"{self.path}: the commit log's stateUniqueIds for operator "
                f"{self.operator_id} name {len(ids)} partitions, expected "
                f"{self.partitions} with one id per store") from None

    def schema(self, store: StoreLayout) -> StateSchemaFile | None:
        """Schema v2 of a store, written by Spark in partition 0 only."""
        path = store.partition_dir(self.path, 0) / "_metadata" / "schema"
        if not path.is_file():
            return None
        return StateSchemaFile.parse(path.read_bytes(), str(path))

    def key_encoding(self, store: StoreLayout) -> KeyEncoding:
        """How the RocksDB provider encodes the store's keys: a session window's store scans
        by its grouping columns (``numColsPrefixKey`` in the operator metadata)."""
        prefix = next((info.num_cols_prefix_key for info in self.metadata.stores
                       if info.name == store.name), 0)
        schema = self.schema(store)
        key_schema = schema.key_schema if schema is not None else None
        return KeyEncoding(prefix, tuple((key_schema or {}).get("fields", [])))


def operator_metadata_path(operator_dir: Location) -> Location | None:
    """The operator's metadata file: v1 ``_metadata/metadata``, or for transformWithState the
    newest v2 ``_metadata/v2/<batch>`` (Spark writes one per run, as the batch it starts at).
    """
    v1 = operator_dir / "_metadata" / "metadata"
    if v1.is_file():
        return v1
    v2 = operator_dir / "_metadata" / "v2"
    batches = [int(p.name) for p in v2.iterdir() if p.name.isdigit()] if v2.is_dir() else []
    return v2 / str(max(batches)) if batches else None


class Checkpoint:
    """A Spark streaming checkpoint, on local disk or in a store (S3, HDFS)."""

    def __init__(self, root: Location) -> None:
        self.root = root

    @property
    def local_root(self) -> Path:
        """The root of a checkpoint on local disk (a snapshot's, one being built)."""
        return local_path(self.root)

    def exists(self) -> bool:
        return (self.root / "metadata").is_file()

    def metadata(self) -> QueryMetadata:
        path = self.root / "metadata"
        try:
            data = path.read_bytes()  # one request in a store: no look before
        except FileNotFoundError:
            raise CheckpointFormatError(
                f"{path}: expected the query metadata file of a Spark checkpoint, found nothing"
            ) from None
        return QueryMetadata.parse(data, str(path))

    def offset_ids(self) -> list[int]:
        return numbered_files(self.root / "offsets")

    def commit_ids(self) -> list[int]:
        return numbered_files(self.root / "commits")

    def latest_committed_batch(self) -> int | None:
        ids = self.commit_ids()
        return ids[-1] if ids else None

    def uncommitted_batch(self) -> int | None:
        """The batch planned (in the offsets log) but not committed when the query stopped."""
        planned = self.offset_ids()
        committed = self.latest_committed_batch()
        if planned and (committed is None or planned[-1] > committed):
            return planned[-1]
        return None

    def require_latest_committed_batch(self) -> int:
        batch = self.latest_committed_batch()
        if batch is None:
            raise NoCommittedBatchError(
                f"{self.root}: the checkpoint has no committed batch yet; run the job until it "
                "completes at least one batch"
            )
        return batch

    def offsets(self, batch: int) -> OffsetLogEntry:
        path = self.root / "offsets" / str(batch)
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            raise CheckpointFormatError(
                f"{path}: expected the offsets entry of batch {batch}, found nothing"
            ) from None
        return OffsetLogEntry.parse(data, str(path))

    def commit(self, batch: int) -> CommitLogEntry:
        path = self.root / "commits" / str(batch)
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            raise CheckpointFormatError(
                f"{path}: expected the commit entry of batch {batch}, found nothing"
            ) from None
        return CommitLogEntry.parse(data, str(path))

    def state_partitions(self, batch: int) -> int | None:
        """The state partitions batch ``batch`` ran with: the shuffle partitions its offsets
        entry records (None when it records none).

        Spark's offline repartition (a start with another partition count on RocksDB)
        leaves the operator metadata v1 at the old count and the old partition directories
        in place: only the offsets log tells which partitions hold a batch's state."""
        value = self.offsets(batch).conf.get(SHUFFLE_PARTITIONS_CONF)
        return int(value) if value is not None else None

    def operators(self, batch: int | None = None) -> list[OperatorDir]:
        """The stateful operators, each with the partitions that hold ``batch``'s state
        (without a batch: the count in the operator's metadata)."""
        recorded = self.state_partitions(batch) if batch is not None else None
        state = self.root / "state"
        if not state.is_dir():
            return []
        found = []
        entries: list[Location] = list(state.iterdir())
        for entry in sorted(entries, key=lambda p: (len(p.name), p.name)):
            if not entry.name.isdigit():
                continue
            path = operator_metadata_path(entry)
            if path is None:
                path = entry / "_metadata" / "metadata"
                raise CheckpointFormatError(
                    f"{path}: expected operator metadata for state directory {entry.name}, "
                    "found nothing; the checkpoint was written by a Spark older than 3.5"
                )
            metadata = OperatorMetadata.parse(path.read_bytes(), str(path))
            found.append(OperatorDir(entry, metadata, recorded or metadata.num_partitions))
        return found

    def provider(self, batch: int) -> str:
        """The state store provider recorded in a batch's offsets (it wins over the session)."""
        return self.offsets(batch).conf.get(PROVIDER_CONF, HDFS_PROVIDER)

    def state_provider(self, batch: int) -> StateProvider:
        """The provider of the state as of ``batch`` (checkpoint/providers.py)."""
        return provider_named(self.provider(batch), str(self.root / "offsets" / str(batch)))

