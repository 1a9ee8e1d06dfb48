"""Count each key of a parquet input: HDFS-provider state of one width per record (a
fixed-length string key and a count), which sparkpoint moves between partition counts as
Spark tasks."""

from pyspark.sql import SparkSession

import sparkpoint as sp


def build(spark: SparkSession, ctx: sp.JobContext):
    keys = spark.readStream.name("keys").schema("key STRING").parquet(ctx.require_param("input"))
    counts = ctx.stateful("key_counts", keys.groupBy("key").count())
    return counts.writeStream.format("noop").outputMode("update")
