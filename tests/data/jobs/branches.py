"""Click pipelines, one per branch, unioned into one output: --param branches=a,b

Each branch reads source <b> from --param input_<b>, deduplicates (dedup_<b>) and counts
per hour and user (counts_<b>); rows carry their branch. A job with branches=a and one with
branches=b can be merged into branches=a,b, and split back.
"""

from functools import reduce

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

import sparkpoint as sp

SCHEMA = "event_id STRING, user STRING, url STRING, ts TIMESTAMP"


def _branch(spark: SparkSession, ctx: sp.JobContext, branch: str) -> DataFrame:
    clicks = (spark.readStream.name(branch).schema(SCHEMA).option("maxFilesPerTrigger", "1")
              .json(ctx.require_param(f"input_{branch}")))
    unique = ctx.stateful(f"dedup_{branch}", clicks.withWatermark("ts", "10 minutes")
                          .dropDuplicates(["event_id", "ts"]))
    counts = ctx.stateful(f"counts_{branch}", unique.groupBy(F.window("ts", "1 hour"), "user")
                          .agg(F.count("*").alias("n")))
    return counts.select(F.lit(branch).alias("branch"),
                         F.col("window.start").alias("window_start"),
                         F.col("window.end").alias("window_end"), "user", "n")


def build(spark: SparkSession, ctx: sp.JobContext):  # type: ignore[no-untyped-def]
    branches = ctx.require_param("branches").split(",")
    rows = reduce(DataFrame.unionByName, [_branch(spark, ctx, b) for b in branches])
    return (rows.writeStream.format("parquet").option("path", ctx.require_param("output"))
            .outputMode("append"))
