"""key_counts.py's next version: each key's count and, new, the length of its longest
occurrence (an aggregate added: sparkpoint migrates the counts' state, the new aggregate
starting as if it had seen no row before the switch)."""

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

import sparkpoint as sp


def build(spark: SparkSession, ctx: sp.JobContext):
    keys = spark.readStream.name("keys").schema("key STRING").parquet(ctx.require_param("input"))
    counts = ctx.stateful("key_counts", keys.groupBy("key").agg(
        F.count(F.lit(1)).alias("count"), F.max(F.length("key")).alias("longest")))
    return counts.writeStream.format("noop").outputMode("update")
