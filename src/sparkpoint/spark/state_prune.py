"""Removing keys from a stateful operator's state with Spark's own classes.

Spark decides which keys match: its state data source reader (``format("statestore")``)
decodes the keys of one committed version, the user's predicate is evaluated by Spark over
the key's columns, and the matching keys come back as ``UnsafeRow``s of the key's columns,
which is how the stateful operator itself built the stored key, byte for byte. Each rewrite
checks that every matched key was found in the store, so a key that did not match its
stored bytes would fail the prune, never be skipped silently. RocksDB stores are rewritten
in Spark tasks, one per partition, with the RocksDB Spark ships, the keys never leaving the
JVM (:func:`remove_rocksdb_keys_by_tasks`); in a session without sparkpoint's jar, by
Spark's own provider from the driver (:func:`remove_rocksdb_keys`: it loads the version,
removes the keys and commits the next version). HDFS-provider stores are rewritten by Python
tasks (:func:`remove_keys_by_tasks`), each given its partition's matched keys as bytes by
Spark's own encoder.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sparkpoint.errors import CheckpointFormatError, InvalidPredicateError, SparkpointError
from sparkpoint.spark.driver_disk import check_here, failed_for_want_of_disk
from sparkpoint.spark.errors import failure_summary
from sparkpoint.spark.row_bytes import iter_rows_bytes

if TYPE_CHECKING:
    import numpy as np
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession

# Columns the matched frame carries besides the key's own (named so that no key column
# of a real job collides with them).
_KEY_ROW = "__sparkpoint_key_row"
_PARTITION = "__sparkpoint_partition"
_CHANGELOG_CONF = "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled"
_COMPACT_CONF = "spark.sql.streaming.stateStore.rocksdb.compactOnCommit"
_PROVIDER_CONF = "spark.sql.streaming.stateStore.providerClass"


@dataclass(frozen=True)
class MatchedKeys:
    """Keys of one version of an operator's state that the predicate selects."""

    # partition -> rows of the version in that partition (every key, matching or not)
    partition_rows: dict[int, int]
    # partition -> how many of its keys match (partitions without a match left out)
    matched_rows: dict[int, int]
    # partition -> each matching key as the JVM's UnsafeRow, byte for byte as stored (empty
    # when the keys were only counted; their bytes come from matched_key_bytes)
    by_partition: dict[int, list[Any]]

    @property
    def total_rows(self) -> int:
        return sum(self.partition_rows.values())

    @property
    def count(self) -> int:
        return sum(self.matched_rows.values())


def _describe(schema: dict[str, Any]) -> str:
    fields = schema.get("fields", [])
    return ", ".join(f"{f['name']} {_type_name(f['type'])}" for f in fields)


def _type_name(spark_type: Any) -> str:
    if isinstance(spark_type, str):
        return spark_type
    if spark_type.get("type") == "struct":
        inner = ", ".join(f"{f['name']}: {_type_name(f['type'])}" for f in spark_type["fields"])
        return f"struct<{inner}>"
    return str(spark_type.get("type"))


def state_frame(spark: SparkSession, checkpoint: Path | str, batch: int,
                operator_id: int) -> DataFrame:
    """The operator's state as of ``batch`` (the version that batch committed), as Spark's
    state reader decodes it: columns ``key``, ``value``, ``partition_id``."""
    return (spark.read.format("statestore")
            .option("batchId", batch)
            .option("operatorId", operator_id)
            .load(str(checkpoint)))


def _matching(spark: SparkSession, checkpoint: Path | str, batch: int, operator_id: int,
              key_schema: dict[str, Any], where: str,
              operator_name: str) -> tuple[DataFrame, DataFrame]:
    """The state's keys flattened, and the matching keys; the condition analysed."""
    from pyspark.errors import PySparkException
    from pyspark.sql import functions as F

    frame = state_frame(spark, checkpoint, batch, operator_id)
    flat = frame.select(F.col("key").alias(_KEY_ROW), F.col("partition_id").alias(_PARTITION),
                        "key.*")
    try:
        matched = flat.filter(F.expr(where)).select(_KEY_ROW, _PARTITION)
        matched.schema  # noqa: B018 - analysis happens here: unknown columns, wrong types
    except PySparkException as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise InvalidPredicateError(
            f"--where {where!r}: expected a SQL condition on the key columns of operator "
            f"'{operator_name}' ({_describe(key_schema)}), Spark refused it: {first}; "
            "name only key columns (a window's bounds as window.start / window.end)"
        ) from exc
    return flat, matched


def check_condition(spark: SparkSession, checkpoint: Path | str, batch: int, operator_id: int,
                    key_schema: dict[str, Any], where: str, operator_name: str) -> None:
    """Refuse a condition Spark cannot analyse over the key's columns (no job runs).

    Raises:
        InvalidPredicateError: as for :func:`matching_keys`.
    """
    _matching(spark, checkpoint, batch, operator_id, key_schema, where, operator_name)


def _condition_failure(spark: SparkSession, checkpoint: Path | str, batch: int, operator_id: int,
                      key_schema: dict[str, Any], where: str, operator_name: str,
                      exc: BaseException) -> InvalidPredicateError:
    """The error for a job that failed while it evaluated ``where`` on the state: the state's
    own read error when a read without the condition fails too (raised from here), else the
    condition's."""
    state_frame(spark, checkpoint, batch, operator_id).groupBy("partition_id").count().collect()
    text = str(exc).strip()
    first = text.splitlines()[0] if text else type(exc).__name__
    return InvalidPredicateError(
        f"--where {where!r}: expected a condition Spark can evaluate on every key of "
        f"operator '{operator_name}' ({_describe(key_schema)}), it failed on the state: "
        f"{first}; fix the condition (e.g. try_cast instead of cast)")


def matching_keys(
    spark: SparkSession,
    checkpoint: Path | str,
    batch: int,
    operator_id: int,
    key_schema: dict[str, Any],
    where: str,
    operator_name: str,
    collect_keys: bool = True,
) -> MatchedKeys:
    """The keys whose columns satisfy ``where`` (Spark SQL, evaluated by Spark), per partition:
    counted, and with ``collect_keys`` brought to the driver as the JVM's rows (one py4j call
    each: for Spark's provider to remove them).

    Raises:
        InvalidPredicateError: Spark cannot parse or resolve ``where`` over the key columns,
            it is not a boolean condition, or it fails on a key.
    """
    from pyspark.errors import PySparkException
    from pyspark.sql import functions as F

    flat, matched = _matching(spark, checkpoint, batch, operator_id, key_schema, where,
                              operator_name)
    # One pass over the state counts every partition's keys and its matching ones. When it
    # fails, a count without the condition tells whose failure it is: the state's (raised
    # as it is) or the condition's.
    selected = F.when(F.expr(where), 1).otherwise(0)  # a null condition selects nothing
    try:
        counted = (flat.groupBy(_PARTITION).agg(F.count(F.lit(1)), F.sum(selected))
                   .collect())
    except PySparkException as exc:
        raise _condition_failure(spark, checkpoint, batch, operator_id, key_schema, where,
                                operator_name, exc) from exc
    partition_rows = {int(row[0]): int(row[1]) for row in counted}
    matched_rows = {int(row[0]): int(row[2]) for row in counted if row[2]}
    if not collect_keys:
        return MatchedKeys(partition_rows, matched_rows, {})
    # Sorted by partition, the collected keys fall into runs of the counted lengths: a key
    # costs one call into the JVM to take it, none to learn its partition. The key's own
    # columns, projected as the row, are its stored bytes (RocksDB's key count checks that
    # every matched key was found).
    ordered = matched.orderBy(_PARTITION).select(f"{_KEY_ROW}.*")
    rows = ordered._jdf.queryExecution().executedPlan().executeCollect()
    collected = len(rows)
    by_partition: dict[int, list[Any]] = {}
    index = 0
    for partition in sorted(matched_rows):
        count = matched_rows[partition]
        by_partition[partition] = [rows[i] for i in range(index, min(index + count, collected))]
        index += count
    if index != collected:
        raise InvalidPredicateError(
            f"--where {where!r}: Spark selected {index} key(s) when counting and {collected} "
            "when collecting; expected a deterministic condition (no rand(), no current "
            "time)")
    return MatchedKeys(partition_rows, matched_rows, by_partition)


# Matched keys taken from the JVM per py4j call: a bounded slice of them is held here.
KEY_CHUNK = 50_000


def matched_key_bytes(spark: SparkSession, checkpoint: Path, batch: int, operator_id: int,
                      key_schema: dict[str, Any], where: str, operator_name: str,
                      matched_rows: dict[int, int]) -> Iterator[tuple[int, list[bytes]]]:
    """The stored bytes of the keys ``where`` selects, a partition at a time, in partition
    order (``matched_rows``: the counts of :func:`matching_keys`). Spark collects them once;
    they come over a chunk per call, and a partition's keys are dropped here once yielded.

    Raises:
        InvalidPredicateError: Spark selected other keys than it counted (a condition that
            is not deterministic).
    """
    _flat, matched = _matching(spark, checkpoint, batch, operator_id, key_schema, where,
                               operator_name)
    ordered = matched.orderBy(_PARTITION).select(f"{_KEY_ROW}.*")
    collected = ordered._jdf.queryExecution().executedPlan().executeCollectIterator()
    rows = iter_rows_bytes(spark, collected._2(), KEY_CHUNK)
    taken = 0
    for partition in sorted(matched_rows):
        keys = [row for row in itertools.islice(rows, matched_rows[partition])
                if row is not None]
        taken += len(keys)
        if len(keys) != matched_rows[partition]:
            break
        yield partition, keys
    taken += sum(1 for _ in rows)
    expected = sum(matched_rows.values())
    if taken != expected:
        raise InvalidPredicateError(
            f"--where {where!r}: Spark selected {expected} key(s) when counting and {taken} "
            "when collecting; expected a deterministic condition (no rand(), no current "
            "time)")


def remove_rocksdb_keys(
    spark: SparkSession,
    provider: str,
    state_root: Path,
    operator_id: int,
    partition: int,
    version: int,
    key_schema: dict[str, Any],
    value_schema: dict[str, Any],
    keys: Iterable[Any],
) -> None:
    """Load ``version`` of the RocksDB store at ``state_root/<operator>/<partition>`` with
    Spark's provider, remove ``keys`` and commit; Spark writes version ``version + 1``
    (always as a self-contained ``.zip``: changelog checkpointing is off for this commit).
    ``keys`` are UnsafeRows in the JVM."""
    jvm = spark._jvm
    assert jvm is not None
    session = spark._jsparkSession
    state = jvm.org.apache.spark.sql.execution.streaming.state
    types = jvm.org.apache.spark.sql.types
    key_type = types.DataType.fromJson(json.dumps(key_schema))
    value_type = types.DataType.fromJson(json.dumps(value_schema))
    store_id = state.StateStoreId(str(state_root), operator_id, partition, "default")
    provider_id = state.StateStoreProviderId(store_id, jvm.java.util.UUID.randomUUID())
    sql_conf = session.sessionState().conf().clone()
    sql_conf.setConfString(_PROVIDER_CONF, provider)
    sql_conf.setConfString(_CHANGELOG_CONF, "false")
    # Removals are tombstones until compaction: compact, so the pruned store is no larger.
    sql_conf.setConfString(_COMPACT_CONF, "true")
    conf = state.StateStoreConf(
        sql_conf, state.StateStoreConf.__getattr__("$lessinit$greater$default$2")())
    instance = getattr(state, "StateStoreProvider$").__getattr__("MODULE$").createAndInit(
        provider_id, key_type, value_type, state.NoPrefixKeyStateEncoderSpec(key_type), False,
        conf, session.sessionState().newHadoopConf(), False, jvm.scala.Option.empty())
    try:
        store = instance.getStore(version, jvm.scala.Option.empty(), True, False)
        try:
            family = store.__getattr__("remove$default$2")()
            for key in keys:
                store.remove(key, family)
            store.commit()
        except BaseException:
            # An open store holds the provider's lock: close() would wait for it in vain.
            store.abort()
            raise
    finally:
        instance.close()


# java/sparkpoint/spark/RocksDbKeyRemoval.java: tasks removing matched keys from RocksDB
# stores with the RocksDB Spark ships, the keys never leaving the JVM.
ROCKSDB_KEY_REMOVAL = "sparkpoint.spark.RocksDbKeyRemoval"


def remove_rocksdb_keys_by_tasks(
    spark: SparkSession,
    checkpoint: Path,
    batch: int,
    operator_id: int,
    key_schema: dict[str, Any],
    where: str,
    operator_name: str,
    zip_names: dict[int, str],
) -> list[PartitionRemoval]:
    """Remove the keys ``where`` selects from RocksDB state as one Spark job: the state
    reader decodes the keys, Spark evaluates the condition, and one task per partition
    holding matches rewrites that partition's version ``batch + 1`` (``zip_names``: each
    partition's zip of it, one self-contained zip with its key count) without them, with
    the RocksDB Spark ships: deleted, compacted, the keys left counted, packed as Spark
    commits a version (``RocksDbKeyRemoval``). The keys never leave the JVM; the driver
    moves no state bytes. The session must load ``ROCKSDB_KEY_REMOVAL`` (sparkpoint's jar).

    Raises:
        InvalidPredicateError: as for :func:`matching_keys`.
        CheckpointFormatError: a task failed for another reason than the condition.
    """
    from py4j.protocol import Py4JJavaError
    from pyspark.errors import PySparkException

    _flat, matched = _matching(spark, checkpoint, batch, operator_id, key_schema, where,
                               operator_name)
    jvm = spark._jvm
    assert jvm is not None
    java_zips = jvm.java.util.HashMap()
    for partition, name in zip_names.items():
        java_zips.put(partition, name)
    try:
        flat = list(getattr(jvm, ROCKSDB_KEY_REMOVAL).run(
            matched.select(_KEY_ROW, _PARTITION)._jdf,
            str(checkpoint / "state" / str(operator_id)), java_zips, batch + 1,
            json.dumps(key_schema)))
    except (PySparkException, Py4JJavaError) as exc:
        raise _task_failure(spark, checkpoint, batch, operator_id, key_schema, where,
                            operator_name, "removing keys from", exc) from exc
    removals = sorted((PartitionRemoval(int(flat[i]), int(flat[i + 1]), int(flat[i + 2]))
                       for i in range(0, len(flat), 3)), key=lambda r: r.partition)
    _one_task_each(removals, operator_name)
    return removals


def _task_failure(spark: SparkSession, checkpoint: Path, batch: int, operator_id: int,
                  key_schema: dict[str, Any], where: str, operator_name: str, doing: str,
                  exc: BaseException) -> SparkpointError:
    """The error for a failed job of tasks ``doing`` the state: the condition's failure (or
    the state's) is raised from here by counting with it; otherwise a task failed."""
    if (elsewhere := failed_for_want_of_disk(checkpoint, str(exc))) is not None:
        return elsewhere
    matching_keys(spark, checkpoint, batch, operator_id, key_schema, where, operator_name,
                  collect_keys=False)
    return CheckpointFormatError(
        f"operator '{operator_name}': a task {doing} its state failed: "
        f"{failure_summary(exc)}; nothing was published; Spark's log has its stack trace")


def _one_task_each(removals: list[PartitionRemoval], operator_name: str) -> None:
    partitions = [removal.partition for removal in removals]
    if len(set(partitions)) != len(partitions):
        raise CheckpointFormatError(
            f"operator '{operator_name}': Spark read a state partition in more than one task "
            f"(partitions {partitions}); expected one task per partition; nothing was "
            "published")


# java/sparkpoint/spark/UnsafeRowBytes.java: a struct to its UnsafeRow bytes, by Spark's
# own encoder for the struct's schema.
UNSAFE_ROW_BYTES = "sparkpoint.spark.UnsafeRowBytes"
_KEY_BYTES_FUNCTION = "__sparkpoint_key_bytes"
_REMOVALS_SCHEMA = "partition int, matched long, removed long"


@dataclass(frozen=True)
class PartitionRemoval:
    """What one task did to one state partition."""

    partition: int
    matched: int  # keys the condition selected there (Spark's count)
    removed: int  # keys the rewrite found and removed


def remove_keys_by_tasks(
    spark: SparkSession,
    checkpoint: Path,
    batch: int,
    operator_id: int,
    key_schema: dict[str, Any],
    where: str,
    operator_name: str,
    rewrite: Callable[[Path, Sequence[bytes] | np.ndarray], int],
) -> list[PartitionRemoval]:
    """Remove the keys ``where`` selects as one Spark job: the state reader decodes the keys,
    Spark evaluates the condition and encodes each selected key back into its stored bytes
    (``UnsafeRowBytes``), and one Python task per partition with matches calls
    ``rewrite(partition directory, keys)`` on the files of ``checkpoint`` (which the
    executors must reach), returning how many keys it removed. The driver moves no state
    bytes. The session must load ``UNSAFE_ROW_BYTES`` (sparkpoint's jar: ``own_jar``).

    Raises:
        InvalidPredicateError: as for :func:`matching_keys`.
        CheckpointFormatError: a task failed for another reason than the condition.
    """
    import pyarrow as pa
    from pyspark.errors import PySparkException
    from pyspark.sql import functions as F

    _flat, matched = _matching(spark, checkpoint, batch, operator_id, key_schema, where,
                               operator_name)
    jvm = spark._jvm
    assert jvm is not None
    key_type = matched.schema[_KEY_ROW].dataType
    spark._jsparkSession.udf().register(
        _KEY_BYTES_FUNCTION, getattr(jvm, UNSAFE_ROW_BYTES)(key_type.json()),
        jvm.org.apache.spark.sql.types.DataTypes.BinaryType)
    keyed = matched.select(F.col(_PARTITION),
                           F.call_function(_KEY_BYTES_FUNCTION, F.col(_KEY_ROW)).alias("key"))
    operator_dir = str(checkpoint / "state" / str(operator_id))

    def rewrite_partitions(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import pyarrow.compute as pc

        check_here(Path(operator_dir))
        tables = [pa.Table.from_batches([batch]) for batch in batches if batch.num_rows]
        if not tables:
            return
        table = pa.concat_tables(tables)
        for partition in pc.unique(table.column(_PARTITION)).to_pylist():
            rows = table.filter(pc.equal(table.column(_PARTITION), partition))
            removed = rewrite(Path(operator_dir) / str(partition), _key_rows(rows.column("key")))
            yield pa.RecordBatch.from_pydict({
                "partition": pa.array([partition], pa.int32()),
                "matched": pa.array([rows.num_rows], pa.int64()),
                "removed": pa.array([removed], pa.int64())})

    try:
        # Spark's state reader reads each state partition in one task of its own
        # (StateScan.planInputPartitions: one input partition per state partition), so the
        # keys are rewritten where they were read, with no shuffle; Arrow, not pandas: pandas
        # would make a Python bytes object of every key.
        rows = keyed.mapInArrow(rewrite_partitions, _REMOVALS_SCHEMA).collect()
    except PySparkException as exc:
        raise _task_failure(spark, checkpoint, batch, operator_id, key_schema, where,
                            operator_name, "rewriting", exc) from exc
    removals = sorted((PartitionRemoval(int(row[0]), int(row[1]), int(row[2])) for row in rows),
                      key=lambda removal: removal.partition)
    _one_task_each(removals, operator_name)
    return removals


def fixed_width_rows(column: pa.ChunkedArray | pa.Array) -> np.ndarray | None:
    """Arrow binary values as a numpy uint8 array of one value per row when there are some,
    none is null and all share one width: a view of Arrow's buffer with no Python object
    per value; else None. An array may be a slice of its buffers (offsets not from 0)."""
    import numpy as np
    import pyarrow as pa

    values = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    if not len(values) or values.null_count:
        return None
    offset_type = np.int64 if pa.types.is_large_binary(values.type) else np.int32
    offsets = np.frombuffer(values.buffers()[1], offset_type)[
        values.offset : values.offset + len(values) + 1]
    widths = np.diff(offsets)
    if not (widths == widths[0]).all():
        return None
    data = np.frombuffer(values.buffers()[2], np.uint8)[offsets[0] : offsets[-1]]
    return data.reshape(len(values), int(widths[0]))


def _key_rows(column: pa.ChunkedArray | pa.Array) -> Sequence[bytes] | np.ndarray:
    """A task's keys (Arrow binary) as a numpy array of one key per row when they share one
    width (:func:`fixed_width_rows`); else as bytes."""
    import pyarrow as pa

    rows = fixed_width_rows(column)
    if rows is not None and rows.shape[1] > 0:
        return rows
    keys = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    return [key for key in keys.to_pylist() if key is not None]
