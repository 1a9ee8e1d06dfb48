"""Move a new checkpoint's state from one of Spark's state store providers to the other
(HDFS-backed to RocksDB and back), as Spark tasks, before the job starts.

Spark takes the provider of a restarted query from its offsets log, never from the session
(``OffsetSeqMetadata.setSessionConf``): a job started from an HDFS-provider snapshot with
the RocksDB provider asked for would stay on the HDFS provider. The state of version
``batch + 1`` of every store is read in the old provider's files and written in the new
one's, one Spark task per run of partitions (the driver moves no state bytes); then the
last two offsets entries record the new provider, so that Spark opens the state with it.

* HDFS-backed to RocksDB: each partition's rows are encoded as Spark's RocksDB provider
  stores them (a version byte; a session window's prefix-scan key layout,
  checkpoint/rocksdb_keys.py) and written as one version (``<batch + 1>.zip`` and its SST)
  with the settings and metadata of an empty version Spark's own provider commits once
  (checkpoint/rocksdb_writer.py, rocksdict's RocksDB being the session's).
* RocksDB to HDFS-backed: each partition's version is read with RocksDB, its rows written
  as one ``<batch + 1>.snapshot`` file, the RocksDB files removed.

Both keep what the two providers share (``UnsafeRow`` keys and values, one store per
partition directory, the schema files) and are refused for what one of them lacks:
transformWithState (RocksDB only), column families, Spark's Avro encoding, checkpoint format
v2 (the HDFS provider has none; a RocksDB snapshot in v2 is moved to v1 first, as a start
asked for format v1 is), a state compression codec other than lz4 (the HDFS files are
written in lz4).
"""

from __future__ import annotations

import functools
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from sparkpoint.checkpoint import hdfs_state, rocksdb_writer
from sparkpoint.checkpoint.layout import PROVIDER_CONF, Checkpoint, OperatorDir, StoreLayout
from sparkpoint.checkpoint.logs import OffsetLogEntry
from sparkpoint.checkpoint.providers import HDFS_BACKED, ROCKSDB, StateProvider
from sparkpoint.checkpoint.rocksdb_keys import KeyEncoding, encode_value
from sparkpoint.progress import phase
from sparkpoint.spark.driver_disk import check_here
from sparkpoint.spark.rocksdb_template import RocksDbTemplate, template_for
from sparkpoint.storage.local import write_atomic
from sparkpoint.upgrade.hdfs_repartition import run_tasks, task_slices

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

# SQLConf settings recorded in every offsets entry that decide whether the move applies.
ENCODING_CONF = "spark.sql.streaming.stateStore.encodingFormat"
CODEC_CONF = "spark.sql.streaming.stateStore.compressionCodec"
# transformWithState's operators: their state lives in RocksDB's column families only.
_COLUMN_FAMILY_OPERATORS = {"transformWithStateExec", "transformWithStateInPandasExec",
                            "transformWithStateInPySparkExec"}


def asked_provider(conf: Mapping[str, str], source: StateProvider) -> StateProvider:
    """The provider the new job's own settings ask for; the snapshot's when they name none
    (a start keeps the state where it is unless asked)."""
    from sparkpoint.checkpoint.providers import provider_named

    name = conf.get(PROVIDER_CONF)
    return source if name is None else provider_named(name, f"--conf {PROVIDER_CONF}")


def move_problems(source: StateProvider, target: StateProvider,
                  recorded_conf: Mapping[str, str], operator_kinds: Mapping[str, str],
                  asked_format: int | None) -> list[str]:
    """Why the state cannot move from ``source`` to ``target`` (nothing: it can).
    ``recorded_conf``: the snapshot's offsets conf; ``operator_kinds``: each resumed
    operator's Spark operator name, by the new job's name of it."""
    if source is target:
        return []
    way = f"moving the state from the {source.label} provider to {target.label}"
    problems = []
    for name, kind in sorted(operator_kinds.items()):
        if kind in _COLUMN_FAMILY_OPERATORS:
            problems.append(f"operator '{name}': {way}: expected operators whose state both "
                            f"providers hold, found {kind} (its state needs RocksDB's column "
                            "families); keep the RocksDB provider")
    encoding = recorded_conf.get(ENCODING_CONF, "unsaferow")
    if encoding != "unsaferow":
        problems.append(f"{way}: expected state in Spark's UnsafeRow encoding, found "
                        f"{ENCODING_CONF}={encoding}; keep the {source.label} provider")
    codec = recorded_conf.get(CODEC_CONF, "lz4")
    if codec != "lz4":
        problems.append(f"{way}: expected state files compressed with lz4 (Spark's default), "
                        f"found {CODEC_CONF}={codec}; keep the {source.label} provider")
    if asked_format == 2:
        problems.append(f"{way}: expected checkpoint format v1 for the move, found "
                        "spark.sql.streaming.stateStore.checkpointFormatVersion=2 asked for; "
                        "start with the new provider in format v1, then move to v2 with a "
                        "snapshot of that job")
    return problems


def move_state_provider(checkpoint: Path, batch: int, source: StateProvider,
                        target: StateProvider, spark: SparkSession) -> int:
    """Move version ``batch + 1`` of every store of ``checkpoint`` (built here, format v1)
    from ``source``'s files to ``target``'s and record ``target`` in the last two offsets
    entries; returns the keys moved."""
    ckpt = Checkpoint(checkpoint)
    version = batch + 1
    template = template_for(spark, target)
    moved = 0
    for operator in ckpt.operators(batch):
        for store in operator.stores():
            moved += _move_store(spark, operator, store, version, source, template)
    record_provider(checkpoint, batch, target)
    return moved


def record_provider(checkpoint: Path, batch: int, target: StateProvider) -> None:
    """``target`` in the last two offsets entries of ``checkpoint`` (built here): Spark opens
    the state with the provider recorded there."""
    for offsets_batch in (batch - 1, batch):
        path = checkpoint / "offsets" / str(offsets_batch)
        if path.is_file():
            entry = OffsetLogEntry.parse(path.read_bytes(), str(path))
            write_atomic(path, entry.with_conf({PROVIDER_CONF: target.class_name}).to_bytes())


def _move_store(spark: SparkSession, operator: OperatorDir, store: StoreLayout, version: int,
                source: StateProvider, template: RocksDbTemplate | None) -> int:
    op_dir = operator.local_path
    encoding = operator.key_encoding(store)
    move = functools.partial(_move_partitions, op_dir=op_dir, store=store, version=version,
                             encoding=encoding, from_rocksdb=source is ROCKSDB,
                             template=template)
    context = spark.sparkContext
    partitions = list(range(operator.partitions))
    with phase(f"provider move: {operator.operator_name} {store.name} (Spark tasks)"):
        counts = run_tasks(op_dir, lambda: context.parallelize(
            partitions, task_slices(context, len(partitions))).map(move).collect())
    return sum(counts)


def _move_partitions(partition: int, op_dir: Path, store: StoreLayout, version: int,
                     encoding: KeyEncoding, from_rocksdb: bool,
                     template: RocksDbTemplate | None) -> int:
    """A task: one partition's version moved to the other provider's files; its key count."""
    check_here(op_dir)
    return convert_partition(store.partition_dir(op_dir, partition), version, encoding,
                             from_rocksdb, template)


def convert_partition(partition_dir: Path, version: int, encoding: KeyEncoding,
                      from_rocksdb: bool, template: RocksDbTemplate | None) -> int:
    """``version`` of the partition in ``partition_dir`` rewritten in the other provider's
    files (RocksDB's from the HDFS provider's with ``template``, or the reverse, RocksDB's
    removed); its key count."""
    if from_rocksdb:
        rows = dict(ROCKSDB.read_pairs(partition_dir, version, encoding))
        state_files_removed(partition_dir)
        hdfs_state.write_snapshot(partition_dir, version, rows)
        return len(rows)
    import pyarrow as pa

    assert template is not None
    pairs = sorted((encoding.encode(key, partition_dir), encode_value(value))
                   for key, value in HDFS_BACKED.read_pairs(partition_dir, version))
    rocksdb_writer.write_sorted(partition_dir, version,
                                pa.array([k for k, _v in pairs], pa.binary()),
                                pa.array([v for _k, v in pairs], pa.binary()),
                                template.options, template.metadata)
    return len(pairs)


def state_files_removed(partition_dir: Path) -> None:
    """Every file of one provider in the partition (its schema files, ``_metadata``, kept)."""
    for entry in partition_dir.iterdir():
        if entry.name == "_metadata":
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink()
