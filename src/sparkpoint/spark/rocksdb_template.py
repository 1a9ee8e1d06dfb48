"""The settings every RocksDB version sparkpoint writes takes from Spark's own provider: an
empty version committed by Spark's ``RocksDBStateStoreProvider`` with the session's
settings gives the OPTIONS file (compression, block size, bloom filter, table format) and
the metadata fields of a version, so that a version written here is one the job's provider
would have written. :func:`write_empty_version` writes the version of a partition no key
lands in, for either provider."""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sparkpoint.checkpoint import hdfs_state, rocksdb_writer
from sparkpoint.checkpoint.providers import ROCKSDB, StateProvider
from sparkpoint.checkpoint.rocksdb_state import read_zip_metadata
from sparkpoint.errors import CheckpointFormatError
from sparkpoint.spark.inspect import write_empty_rocksdb_version
from sparkpoint.spark.version import spark_rocksdb_version

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


@dataclass(frozen=True)
class RocksDbTemplate:
    """What every RocksDB version written here takes from the empty version Spark's own
    provider committed: its settings (OPTIONS file) and metadata fields."""

    options: str
    metadata: dict[str, Any]


def rocksdb_template(spark: SparkSession) -> RocksDbTemplate:
    """The template of the session's RocksDB settings, from an empty version Spark's provider
    commits in the driver's JVM into a temporary directory of its own (removed after)."""
    found = rocksdb_writer.writer_version()
    session = spark_rocksdb_version(spark)
    if found != session:
        raise CheckpointFormatError(
            f"moving state into RocksDB: expected rocksdict's RocksDB to be Spark's "
            f"({'.'.join(map(str, session))}), found {'.'.join(map(str, found))}; install the "
            "rocksdict release built on Spark's RocksDB or keep the HDFS-backed provider")
    with tempfile.TemporaryDirectory(prefix="sparkpoint-empty-rocksdb-") as scratch:
        zip_path = write_empty_rocksdb_version(spark, ROCKSDB.class_name, Path(scratch))
        metadata = read_zip_metadata(zip_path)
        options = rocksdb_writer.options_text(zip_path.parent, 1)
    return RocksDbTemplate(options, {k: v for k, v in metadata.items() if k != "sstFiles"})


def template_for(spark: SparkSession, provider: StateProvider) -> RocksDbTemplate | None:
    """What versions written for ``provider`` take from Spark's: the RocksDB template, or
    None for the HDFS-backed provider (its files hold no settings)."""
    return rocksdb_template(spark) if provider is ROCKSDB else None


def write_empty_version(directory: Path, version: int, template: RocksDbTemplate | None) -> None:
    """An empty ``version`` in ``directory``: an HDFS-provider snapshot file with no record
    (``template`` None), or a RocksDB version of no key with ``template``'s settings."""
    if template is None:
        hdfs_state.write_snapshot(directory, version, {})
        return
    import pyarrow as pa

    rocksdb_writer.write_sorted(directory, version, pa.array([], pa.binary()),
                                pa.array([], pa.binary()), template.options, template.metadata)
