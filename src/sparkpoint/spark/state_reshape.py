"""Rewrite one state store of an operator into a new shape as one Spark job: Spark's state
reader decodes every key and value, Spark SQL computes the new key and value columns
(casts, for widened columns), Spark's own hash places each new key in its partition, and
one task per new partition writes that partition's store with the rows it receives, each
key and value as the ``UnsafeRow`` Spark encodes: in the JVM (``StateVersionWriter``,
sparkpoint's jar: Spark's projection for the row's type) for every store it writes, else in
Python (the bytes given by Spark's encoder, ``UnsafeRowBytes``). The driver moves no state
bytes.

The partition is ``pmod(hash(clustering columns), n)``: ``hash`` is Spark's ``Murmur3Hash``
with seed 42, the expression of the ``HashPartitioning`` a stateful operator's input is
clustered by (``StatefulOpClusteredDistribution``), over the same columns; so a key widened
from int to bigint, whose hash differs, lands where the new job's shuffle sends its rows.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sparkpoint.spark.state_prune import UNSAFE_ROW_BYTES

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession

# The new key and value take the old ones' column names: ``collapse`` reads ``value``.
_PARTITION, _KEY, _VALUE = "__sparkpoint_partition", "key", "value"
_WRITTEN_SCHEMA = "partition int, rows long"

# A task's writer: (partition, its keys, its values as UnsafeRow bytes) -> nothing.
PartitionWriter = Callable[[int, "pa.Array", "pa.Array"], None]


def _quoted(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def state_frame(spark: SparkSession, checkpoint: Path | str, batch: int, operator_id: int,
                labels: list[tuple[str, str]] | None = None,
                store_name: str | None = None) -> DataFrame:
    """The operator's state at ``batch`` (its only store, or a join's ``store_name``) as
    Spark's state reader gives it (``key`` and ``value`` structs), with ``labels``: more
    columns, each (name, SQL over ``key`` and ``value``)."""
    from pyspark.sql import functions as F

    reader = (spark.read.format("statestore").option("batchId", batch)
              .option("operatorId", operator_id))
    if store_name is not None:
        reader = reader.option("storeName", store_name)
    old = reader.load(str(checkpoint))
    if labels:
        old = old.select("key", "value", *[F.expr(sql).alias(name) for name, sql in labels])
    return old


def placed_store(spark: SparkSession, old: DataFrame, key_sql: str, key_type: dict[str, Any],
                 value_sql: str, value_type: dict[str, Any], clustered: list[str],
                 partitions: int, collapse: str | None = None) -> DataFrame:
    """The rows of a store made from the rows of ``old`` (an operator's state,
    :func:`state_frame`, or a batch query's rows), as (partition int, key struct, value
    struct): the new key is ``key_sql`` cast to ``key_type``, the new value ``value_sql``
    cast to ``value_type`` (Spark SQL over ``old``'s columns; a cast from struct to struct
    goes field by field, by position), each new key placed in one of ``partitions`` by its
    ``clustered`` columns. ``collapse``: new keys may repeat (columns were removed), and
    this SQL aggregate of ``value`` gives the one value each keeps."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import _parse_datatype_json_value

    # As many map tasks as the cluster runs at once, not one per old partition: the shuffle
    # that places the rows writes (map tasks x new partitions) blocks, and 200 x 200 of them
    # cost about three times Spark's read of the state (measured at 1M keys on 2 cores);
    # each task still reads whole partitions through the state reader (coalesce never adds
    # tasks).
    old = old.coalesce(max(1, spark.sparkContext.defaultParallelism))
    shaped = old.select(F.expr(key_sql).cast(_parse_datatype_json_value(key_type)).alias(_KEY),
                        F.expr(value_sql).cast(_parse_datatype_json_value(value_type))
                        .alias(_VALUE))
    if collapse is not None:
        shaped = shaped.groupBy(_KEY).agg(F.expr(collapse).alias(_VALUE))
    hashed = ", ".join(f"{_KEY}.{_quoted(name)}" for name in clustered)
    # No clustering columns (a global aggregation): Spark keeps the state in partition 0.
    placed = F.expr(f"pmod(hash({hashed}), {partitions})") if clustered else F.lit(0)
    return shaped.select(placed.cast("int").alias(_PARTITION), _KEY, _VALUE)


def encoded_store(spark: SparkSession, placed: DataFrame) -> DataFrame:
    """:func:`placed_store`'s rows with the key and value as their ``UnsafeRow`` bytes
    (binary; Spark's encoder for their types), as Python tasks take them."""
    from pyspark.sql import functions as F

    jvm = spark._jvm
    assert jvm is not None
    functions = {}
    for column in (_KEY, _VALUE):
        function = f"__sparkpoint_{column}_bytes"
        spark._jsparkSession.udf().register(
            function, getattr(jvm, UNSAFE_ROW_BYTES)(placed.schema[column].dataType.json()),
            jvm.org.apache.spark.sql.types.DataTypes.BinaryType)
        functions[column] = function
    return placed.select(_PARTITION,
                         F.call_function(functions[_KEY], F.col(_KEY)).alias("key"),
                         F.call_function(functions[_VALUE], F.col(_VALUE)).alias("value"))


def write_in_python(encoded: DataFrame, write: PartitionWriter) -> dict[int, int]:
    """``write`` run in Python tasks, once per partition of ``encoded``
    (:func:`encoded_store`) that has rows; the rows written per partition."""
    import pyarrow as pa

    def write_group(table: pa.Table) -> pa.Table:
        partition = int(table.column(_PARTITION)[0].as_py())
        write(partition, table.column("key").combine_chunks(),
              table.column("value").combine_chunks())
        return pa.table({"partition": pa.array([partition], pa.int32()),
                         "rows": pa.array([table.num_rows], pa.int64())})

    written = encoded.groupBy(_PARTITION).applyInArrow(write_group, _WRITTEN_SCHEMA).collect()
    return {int(row["partition"]): int(row["rows"]) for row in written}


# java/sparkpoint/spark/StateVersionWriter.java: tasks writing a provider's version from
# encoded rows, the rows never leaving the JVM.
STATE_VERSION_WRITER = "sparkpoint.spark.StateVersionWriter"


@dataclass(frozen=True)
class VersionFiles:
    """What :func:`write_in_jvm` writes: version ``version`` of each partition, in
    ``partition_dirs`` (by partition; made by the tasks), on a disk where the tasks see
    ``checked_dir``, or URLs of a store (``checked_dir`` None) the tasks upload to.
    RocksDB: ``rocksdb``, the OPTIONS text and ``metadata`` of a version Spark's provider
    wrote; None for the HDFS-backed provider (whose keys must be stored without a prefix
    column). ``check_repeats``: the rows come from a query, whose keys may repeat
    (refused)."""

    partition_dirs: list[str]
    version: int
    checked_dir: str | None
    rocksdb: tuple[str, dict[str, Any]] | None
    check_repeats: bool


def write_in_jvm(spark: SparkSession, placed: DataFrame, files: VersionFiles) -> dict[int, int]:
    """Each partition of ``placed`` (:func:`placed_store`) that has rows written as ``files``
    says, by ``StateVersionWriter``'s tasks (which encode the rows: no SQL function turns
    them into Java objects and back); the rows written per partition. The session must
    load sparkpoint's jar."""
    jvm = spark._jvm
    assert jvm is not None
    dirs = spark.sparkContext._gateway.new_array(jvm.java.lang.String,  # type: ignore[union-attr]
                                                 len(files.partition_dirs))
    for partition, directory in enumerate(files.partition_dirs):
        dirs[partition] = directory
    options, metadata = files.rocksdb if files.rocksdb is not None else (None, None)
    flat = list(getattr(jvm, STATE_VERSION_WRITER).run(
        placed._jdf, dirs, files.version, files.checked_dir, options,
        None if metadata is None else json.dumps(metadata), files.check_repeats))
    return {int(flat[i]): int(flat[i + 1]) for i in range(0, len(flat), 2)}


def sql_types(spark: SparkSession, readable: list[tuple[str, Any]],
              expressions: dict[str, str]) -> dict[str, Any]:
    """Spark's JSON type of each SQL expression analysed over columns ``readable`` (name and
    Spark's JSON type; no row is read), or the first line of Spark's refusal as text."""
    from pyspark.sql.types import StructField, StructType, _parse_datatype_json_value

    frame = spark.createDataFrame([], StructType([
        StructField(name, _parse_datatype_json_value(spark_type))
        for name, spark_type in readable]))
    found: dict[str, Any] = {}
    for name, sql in expressions.items():
        try:
            data_type = frame.selectExpr(sql).schema.fields[0].dataType
        except Exception as exc:  # PySpark's AnalysisException or ParseException
            text = str(exc).strip()
            found[name] = text.splitlines()[0] if text else type(exc).__name__
            continue
        found[name] = {"json": json.loads(data_type.json())}
    return found


def query_columns(spark: SparkSession, query: str) -> dict[str, Any] | str:
    """A batch query's columns with Spark's JSON of their types (the query is analysed, not
    run), or the first line of Spark's refusal."""
    try:
        frame = spark.sql(query)
    except Exception as exc:  # PySpark's AnalysisException or ParseException
        text = str(exc).strip()
        return text.splitlines()[0] if text else type(exc).__name__
    return {field.name: json.loads(field.dataType.json()) for field in frame.schema.fields}
