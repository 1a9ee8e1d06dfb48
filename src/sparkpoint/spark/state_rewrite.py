"""Rewriting one operator's state as a Spark job, with Spark's own ``StateRewriter`` (4.3:
the class behind its offline repartition).

``StateRewriter`` reads every key and value of an operator as stored bytes (the state
reader's all-column-families mode: ``partition_key``, ``key_bytes``, ``value_bytes``,
``column_family_name``), applies a DataFrame transformation on the driver, and writes each
partition's rows into an empty store of that partition on the executors, one task per
partition, committed as a self-contained version (RocksDB: a ``<v>.zip`` and its SSTs). The
driver's Python process moves no state bytes.

Measured on pyspark 4.3.0 (pinned by tests/integration/test_snapshot_prune.py):
- it reads from one checkpoint and writes into another at the same batch id, taking the
  operator list from the target's operator metadata and the store settings from the target's
  offsets entry of that batch;
- it refuses the HDFS-backed provider (``STATE_REPARTITION_INVALID_CHECKPOINT
  .UNSUPPORTED_PROVIDER``), in its reader as in the rewriter;
- ``partition_key`` is the struct of the key's columns for aggregations, dedupes and
  flatMapGroupsWithState, so a predicate on the key's columns can be evaluated on it.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from sparkpoint.checkpoint.layout import CHECKPOINT_FORMAT_CONF
from sparkpoint.checkpoint.logs import OffsetLogEntry
from sparkpoint.spark import local_fs
from sparkpoint.storage.local import write_atomic

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

# The state reader's option for stored bytes (StateSourceOptions.INTERNAL_ONLY_READ_ALL_
# COLUMN_FAMILIES in 4.3.0).
READ_ALL_COLUMN_FAMILIES = "_readAllColumnFamilies"
PARTITION_KEY = "partition_key"


def partition_key_fields(spark: SparkSession, checkpoint: Path, batch: int,
                         operator_id: int) -> list[str]:
    """The columns of ``partition_key`` as Spark's stored-bytes reader gives them; none when
    the reader refuses the state (then the rewriter would too)."""
    from py4j.protocol import Py4JError
    from pyspark.errors import PySparkException

    try:
        frame = (spark.read.format("statestore").option(READ_ALL_COLUMN_FAMILIES, "true")
                 .option("batchId", batch).option("operatorId", operator_id)
                 .load(str(checkpoint)))
        key_type = frame.schema[PARTITION_KEY].dataType
    except (PySparkException, Py4JError, KeyError):
        return []
    return [field.name for field in key_type.fields]  # type: ignore[attr-defined]


def _target(source: Path, target: Path, batch: int, operator_id: int) -> None:
    """What the rewriter reads of the checkpoint it writes into: the checkpoint's metadata,
    the batch's offsets (format v1 forced: the rewritten files get plain names), and the
    operator's metadata and schemas; no state file."""
    target.mkdir(parents=True)
    shutil.copyfile(source / "metadata", target / "metadata")
    offsets = source / "offsets" / str(batch)
    entry = OffsetLogEntry.parse(offsets.read_bytes(), str(offsets))
    if CHECKPOINT_FORMAT_CONF in entry.conf:
        entry = entry.with_conf({CHECKPOINT_FORMAT_CONF: "1"})
    write_atomic(target / "offsets" / str(batch), entry.to_bytes())
    op_source = source / "state" / str(operator_id)
    op_target = target / "state" / str(operator_id)
    for entry_path in op_source.iterdir():
        if not entry_path.name.isdigit():
            shutil.copytree(entry_path, op_target / entry_path.name)
        elif (entry_path / "_metadata").is_dir():
            shutil.copytree(entry_path / "_metadata", op_target / entry_path.name / "_metadata")


class _KeysKept:
    """The transformation handed to Spark's rewriter (a ``scala.Function1`` on the driver,
    through py4j's callback server): the rows whose key does not satisfy ``where``. A key
    whose condition is null is kept: only keys the condition selects are removed."""

    def __init__(self, spark: SparkSession, where: str) -> None:
        self.spark = spark
        self.where = where

    def apply(self, jdf: Any) -> Any:
        from pyspark.sql import DataFrame
        from pyspark.sql import functions as F

        frame = DataFrame(jdf, self.spark)
        columns = frame.columns
        kept = (frame.select("*", f"{PARTITION_KEY}.*")
                .filter(~F.coalesce(F.expr(self.where), F.lit(False))).select(*columns))
        return kept._jdf

    class Java:
        implements: ClassVar[list[str]] = ["scala.Function1"]


def rewrite_without(spark: SparkSession, source: Path, target: Path, batch: int,
                    operator_id: int, where: str) -> Path:
    """Write operator ``operator_id``'s state of ``batch`` in ``source`` without the keys
    ``where`` selects, as version ``batch + 1`` under ``target`` (a new directory), one Spark
    task per partition; return the operator's state directory there."""
    from pyspark.java_gateway import ensure_callback_server_started

    _target(source, target, batch, operator_id)
    jvm = spark._jvm
    assert jvm is not None
    # Spark calls the transformation back on the driver, as it calls foreachBatch functions.
    ensure_callback_server_started(spark.sparkContext._gateway)  # type: ignore[no-untyped-call]
    session = spark._jsparkSession
    # The rewrite reads and writes the scratch through java.nio, not one chmod process per
    # file (spark/local_fs.py); the session's Hadoop configuration carries it to both sides.
    with local_fs.in_session(spark):
        hadoop_conf = session.sessionState().newHadoopConf()
        utils = jvm.org.apache.spark.sql.execution.streaming.utils.StreamingUtils
        write_location = utils.resolvedCheckpointLocation(hadoop_conf, str(target))
        read_location = utils.resolvedCheckpointLocation(hadoop_conf, str(source))
        rewriter = jvm.org.apache.spark.sql.execution.streaming.state.StateRewriter(
            session, batch, batch, write_location, hadoop_conf, jvm.scala.Some(read_location),
            jvm.scala.Some(_KeysKept(spark, where)), jvm.scala.Option.empty())
        rewriter.run()
    return target / "state" / str(operator_id)
