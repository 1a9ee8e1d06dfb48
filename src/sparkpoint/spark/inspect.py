"""Learning a job's sources and state layout from Spark's own planner, without running it.

``IncrementalExecution`` is what MicroBatchExecution plans each batch with: planning batch 0
on an empty scratch checkpoint makes Spark write every stateful operator's metadata and state
schema files there, exactly as a first run would; planning batch N+1 on a scratch copy of a
real checkpoint runs Spark's restart checks (operator names per id, key and value schema
compatibility) without executing anything.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sparkpoint.checkpoint.layout import CHECKPOINT_FORMAT_CONF, Checkpoint, OperatorDir
from sparkpoint.checkpoint.operators import OperatorMetadata
from sparkpoint.checkpoint.schema_paths import relocate_schema_paths
from sparkpoint.checkpoint.version_files import is_state_data
from sparkpoint.errors import CheckpointFormatError
from sparkpoint.spark import local_fs
from sparkpoint.spark.jvm import scala_list
from sparkpoint.spark.sink import private_field
from sparkpoint.storage.local import copy_file

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming.readwriter import DataStreamWriter

_STREAMING_LEAVES = ("StreamingRelation", "StreamingRelationV2")


@dataclass(frozen=True)
class PlannedSource:
    name: str
    named_by_user: bool
    kind: str  # "file" for Spark's file source, else the source's short name ("rate", ...)
    path: str | None = None
    # Options startpoints need to resolve positions (Kafka servers and topics); never secrets.
    options: dict[str, str] = field(default_factory=dict)


POSITION_OPTIONS = ("kafka.bootstrap.servers", "subscribe", "subscribePattern", "assign")


@dataclass(frozen=True)
class PlannedStore:
    name: str
    num_cols_prefix_key: int
    key_schema: dict[str, Any] | None
    value_schema: dict[str, Any] | None


def job_sources(frame: DataFrame) -> list[PlannedSource]:
    """Streaming sources of the query in plan order, by their ``.name()`` where given.

    Unnamed sources get their position as name, which is how Spark identifies them.
    """
    leaves = scala_list(frame._jdf.queryExecution().analyzed().collectLeaves())
    jvm = frame.sparkSession._jvm
    assert jvm is not None
    file_format = jvm.java.lang.Class.forName(
        "org.apache.spark.sql.execution.datasources.FileFormat")
    found: list[PlannedSource] = []
    for leaf in leaves:
        kind = leaf.getClass().getSimpleName()
        if kind not in _STREAMING_LEAVES:
            continue
        path = None
        options: dict[str, str] = {}
        if kind == "StreamingRelation" and file_format.isAssignableFrom(
                leaf.dataSource().providingClass()):
            kind = "file"
            option = leaf.dataSource().options().get("path")
            path = str(option.get()) if option.isDefined() else None
        else:
            kind = str(leaf.sourceName())
            if leaf.getClass().getSimpleName() == "StreamingRelationV2":
                given = leaf.extraOptions()
                options = {key: str(given.get(key)) for key in POSITION_OPTIONS
                           if given.containsKey(key)}
        name_opt = leaf.sourceIdentifyingName().nameOpt()
        name = str(name_opt.get()) if name_opt.isDefined() else str(len(found))
        found.append(PlannedSource(name, name_opt.isDefined(), kind, path, options))
    return found


def output_mode(writer: DataStreamWriter) -> Any:
    """The Java OutputMode the writer was given (Spark's default is Append)."""
    mode = private_field(writer._jwrite, "outputMode")
    if mode is None:
        jvm = writer._spark._jvm
        assert jvm is not None
        mode = jvm.org.apache.spark.sql.streaming.OutputMode.Append()
    return mode


def _incremental_execution(
    spark: SparkSession, frame: DataFrame, mode: Any, state_dir: Path, batch: int,
    offset_metadata: str | None,
) -> Any:
    jvm = spark._jvm
    assert jvm is not None
    session = spark._jsparkSession
    streaming = jvm.org.apache.spark.sql.execution.streaming
    execution = streaming.runtime.IncrementalExecution
    metadata_companion = getattr(streaming.checkpointing, "OffsetSeqMetadata$").__getattr__(
        "MODULE$")
    metadata = metadata_companion.apply(
        offset_metadata or '{"batchWatermarkMs":0,"batchTimestampMs":0,"conf":{}}')
    if offset_metadata is not None:
        # As on a real restart, the checkpoint's recorded confs win over the session's.
        metadata_companion.setSessionConf(metadata, session.sessionState().conf())
    propagator = getattr(streaming.runtime, "WatermarkPropagator$").__getattr__(
        "MODULE$").apply(session.sessionState().conf())
    previous = jvm.scala.Some(metadata) if batch > 0 else jvm.scala.Option.empty()
    defaults = [execution.__getattr__(f"$lessinit$greater$default${i}")() for i in range(12, 17)]
    return execution(session, frame._jdf.logicalPlan(), mode, str(state_dir),
                     jvm.java.util.UUID.randomUUID(), jvm.java.util.UUID.randomUUID(),
                     batch, previous, metadata, propagator, True, *defaults)


def _all_sql_conf(spark: SparkSession) -> dict[str, str]:
    entries = scala_list(spark._jsparkSession.sessionState().conf().getAllConfs())
    return {str(entry._1()): str(entry._2()) for entry in entries}


@contextlib.contextmanager
def _preserved_sql_conf(spark: SparkSession) -> Iterator[None]:
    """Planning a restart writes the checkpoint's confs into the session, including internal
    ones (``spark.sql.streaming.internal.stateStore.partitions`` from the recorded shuffle
    partitions) that later queries of the session would inherit; put everything back."""
    saved = _all_sql_conf(spark)
    try:
        yield
    finally:
        for key, value in _all_sql_conf(spark).items():
            if key not in saved:
                spark.conf.unset(key)
            elif saved[key] != value:
                spark.conf.set(key, saved[key])


@contextlib.contextmanager
def _checkpoint_format_of(spark: SparkSession, checkpoint: Checkpoint) -> Iterator[None]:
    """The session in the state format of the checkpoint's latest commit while the block runs.

    Spark's offline repartition takes the format from the session's SQL conf, which the
    offsets log does not record (the commit's version says it): a format v2 checkpoint
    repartitioned in a session left at the default 1 fails with
    STATE_CHECKPOINT_FORMAT_VERSION_MISMATCH."""
    version = str(checkpoint.commit(checkpoint.require_latest_committed_batch()).version)
    with _preserved_sql_conf(spark):
        spark.conf.set(CHECKPOINT_FORMAT_CONF, version)
        yield


@dataclass(frozen=True)
class PlannedOperatorState:
    """What a first run writes for one stateful operator, learned on a scratch directory."""

    metadata: OperatorMetadata
    stores: list[PlannedStore]
    # transformWithState: its metadata v2 and schema files (path in the operator dir -> bytes),
    # which a new operator of a resumed job needs as Spark would have written them.
    v2_files: dict[str, bytes] = field(default_factory=dict)


def state_layout(
    spark: SparkSession, frame: DataFrame, mode: Any
) -> dict[int, PlannedOperatorState]:
    """Per Spark operator id: the operator metadata and store schemas a first run writes."""
    scratch = Path(tempfile.mkdtemp(prefix="sparkpoint-plan-"))
    try:
        # transformWithState reads its operator metadata only for batches the offsets log has.
        (scratch / "offsets").mkdir()
        (scratch / "offsets" / "0").write_text(
            'v1\n{"batchWatermarkMs":0,"batchTimestampMs":0,"conf":{}}')
        execution = _incremental_execution(spark, frame, mode, scratch / "state", 0, None)
        execution.executedPlan()
        layout: dict[int, PlannedOperatorState] = {}
        for operator in Checkpoint(scratch).operators():
            v2_files = {}
            if operator.metadata.version == 2:
                for path in sorted(operator.local_path.rglob("*")):
                    rel = path.relative_to(operator.local_path).as_posix()
                    if path.is_file() and rel.startswith(("_metadata/v2/", "_stateSchema/")) \
                            and not path.name.startswith("."):
                        v2_files[rel] = path.read_bytes()
            layout[operator.operator_id] = PlannedOperatorState(
                operator.metadata, _stores(operator), v2_files)
        return layout
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _stores(operator: OperatorDir) -> list[PlannedStore]:
    stores = []
    for store, info in zip(operator.stores(), operator.metadata.stores or [None], strict=False):
        try:
            schema = operator.schema(store)
        except Exception:  # schema v3 (transformWithState) is not decoded here
            schema = None
        stores.append(PlannedStore(
            name=store.name,
            num_cols_prefix_key=info.num_cols_prefix_key if info is not None else 0,
            key_schema=schema.key_schema if schema else None,
            value_schema=schema.value_schema if schema else None,
        ))
    return stores


def restart_problem(
    spark: SparkSession, frame: DataFrame, mode: Any, checkpoint: Path
) -> str | None:
    """Spark's own verdict on restarting ``frame`` from ``checkpoint``: None if it accepts.

    Runs on a scratch copy, because planning writes schema and metadata files. The copy
    leaves out the state's keys and values: planning reads the logs, the operators'
    metadata and the state schemas, and loads no store (at 10M keys the state is most of
    the bytes a start would copy here).
    """
    source = Checkpoint(checkpoint)
    batch = source.require_latest_committed_batch()
    scratch = Path(tempfile.mkdtemp(prefix="sparkpoint-dry-run-")) / "checkpoint"
    state = checkpoint / "state"
    try:
        for path in sorted(checkpoint.rglob("*")):
            if path.is_file() and not (path.is_relative_to(state) and is_state_data(
                    path.relative_to(state).as_posix())):
                copy_file(path, scratch / path.relative_to(checkpoint))
        relocate_schema_paths(scratch)
        # A restart writes offsets/N+1 before planning it; transformWithState reads its
        # operator metadata only for batches the offsets log has.
        copy_file(scratch / "offsets" / str(batch), scratch / "offsets" / str(batch + 1))
        offsets = source.offsets(batch)
        with _checkpoint_format_of(spark, source):
            execution = _incremental_execution(spark, frame, mode, scratch / "state", batch + 1,
                                               offsets.metadata_text)
            try:
                execution.executedPlan()
            except Exception as exc:  # py4j or PySpark's converted Spark exception
                text = str(exc).strip().splitlines()
                return text[0] if text else exc.__class__.__name__
        return None
    finally:
        shutil.rmtree(scratch.parent, ignore_errors=True)


def write_empty_rocksdb_version(spark: SparkSession, provider: str, directory: Path) -> Path:
    """Commit an empty version 1 of a RocksDB store under ``directory`` with Spark's own
    provider, and return the zip. Its content depends on neither the operator, the schema nor
    the version number, so it serves as the empty version N+1 of any new store."""
    jvm = spark._jvm
    assert jvm is not None
    session = spark._jsparkSession
    state = jvm.org.apache.spark.sql.execution.streaming.state
    key = jvm.org.apache.spark.sql.types.StructType.fromDDL("k string")
    value = jvm.org.apache.spark.sql.types.StructType.fromDDL("v long")
    store_id = state.StateStoreId(str(directory / "state"), 0, 0, "default")
    provider_id = state.StateStoreProviderId(store_id, jvm.java.util.UUID.randomUUID())
    sql_conf = session.sessionState().conf().clone()
    sql_conf.setConfString("spark.sql.streaming.stateStore.providerClass", provider)
    # A zip with a plain name, whatever the job's session says: with changelog checkpointing
    # the commit would write 1.changelog, in format v2 1_<id>.zip.
    sql_conf.setConfString(
        "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled", "false")
    sql_conf.setConfString("spark.sql.streaming.stateStore.checkpointFormatVersion", "1")
    conf = state.StateStoreConf(
        sql_conf, state.StateStoreConf.__getattr__("$lessinit$greater$default$2")())
    instance = getattr(state, "StateStoreProvider$").__getattr__("MODULE$").createAndInit(
        provider_id, key, value, state.NoPrefixKeyStateEncoderSpec(key), False, conf,
        session.sessionState().newHadoopConf(), False, jvm.scala.Option.empty())
    try:
        instance.getStore(0, jvm.scala.Option.empty(), False, False).commit()
    finally:
        instance.close()
    return directory / "state" / "0" / "0" / "1.zip"


def repartition(spark: SparkSession, checkpoint: Path, partitions: int) -> None:
    """Spark's offline repartition (RocksDB only): appends batch N+1 with the new count.

    Raises:
        CheckpointFormatError: Spark's repartition failed; its innermost cause says why.
    """
    from py4j.protocol import Py4JJavaError

    try:
        # The rewritten partitions go into the scratch through java.nio (spark/local_fs.py).
        with _checkpoint_format_of(spark, Checkpoint(checkpoint)), local_fs.in_session(spark):
            spark._jsparkSession.streamingCheckpointManager().repartition(
                str(checkpoint), partitions, True)
    except Py4JJavaError as exc:
        cause = exc.java_exception
        while cause.getCause() is not None:
            cause = cause.getCause()
        raise CheckpointFormatError(
            f"{checkpoint}: Spark's offline repartition to {partitions} partitions failed: "
            f"{cause.toString()}") from None
