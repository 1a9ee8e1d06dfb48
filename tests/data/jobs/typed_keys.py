"""Counts per key of many column types (string, int, bigint, double, decimal, date,
timestamp, boolean, a nested struct, an array and a null), the keys whose stored bytes
``snapshot prune`` must reproduce from their decoded columns ("typed_counts")."""

from pyspark.sql import SparkSession

import sparkpoint as sp

COLUMNS = ("s STRING, i INT, l BIGINT, d DOUBLE, m DECIMAL(12,3), day DATE, ts TIMESTAMP, "
           "b BOOLEAN, nested STRUCT<name: STRING, n: INT>, tags ARRAY<STRING>, maybe STRING")
KEYS = ("s", "i", "l", "d", "m", "day", "ts", "b", "nested", "tags", "maybe")


def build(spark: SparkSession, ctx: sp.JobContext):  # type: ignore[no-untyped-def]
    rows = spark.readStream.name("typed").schema(COLUMNS).json(ctx.require_param("input"))
    counts = ctx.stateful("typed_counts", rows.groupBy(*KEYS).count())
    return counts.writeStream.format("noop").outputMode("update")
