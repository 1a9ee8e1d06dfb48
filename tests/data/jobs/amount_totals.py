"""Hourly totals of amounts per user: a sum of doubles, which Spark adds in the order its
input partitions deliver them, so the last bits of a total depend on how the input is split
(spark.sql.files.maxPartitionBytes). An amount of NaN makes its total NaN.

--param input=DIR --param output=DIR [--param files_per_batch=N]
"""

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

import sparkpoint as sp


def build(spark: SparkSession, ctx: sp.JobContext):  # type: ignore[no-untyped-def]
    payments = (
        spark.readStream.name("payments")
        .schema("user STRING, amount DOUBLE, ts TIMESTAMP")
        .option("maxFilesPerTrigger", ctx.param("files_per_batch", "1000"))
        .json(ctx.require_param("input"))
    )
    totals = ctx.stateful(
        "hourly_totals",
        payments.withWatermark("ts", "10 minutes")
        .groupBy(F.window("ts", "1 hour"), "user")
        .agg(F.sum("amount").alias("total")),
    )
    return (
        totals.select(
            F.col("window.start").alias("window_start"),
            F.col("window.end").alias("window_end"),
            "user",
            "total",
        )
        .writeStream.format("parquet")
        .option("path", ctx.require_param("output"))
        .outputMode("append")
    )
