"""The example clicks job with a foreachBatch sink that is idempotent by batch id: batch k
is written to <output>/batch=k once, and a batch id already there is skipped."""

import os

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

import sparkpoint as sp


def build(spark: SparkSession, ctx: sp.JobContext):  # type: ignore[no-untyped-def]
    clicks = (
        spark.readStream.name("clicks")
        .schema("event_id STRING, user STRING, url STRING, ts TIMESTAMP")
        .option("maxFilesPerTrigger", ctx.param("files_per_batch", "1000"))
        .json(ctx.require_param("input"))
    )
    unique = ctx.stateful(
        "dedup_clicks",
        clicks.withWatermark("ts", "10 minutes").dropDuplicates(["event_id", "ts"]),
    )
    hourly = ctx.stateful(
        "hourly_counts",
        unique.groupBy(F.window("ts", "1 hour"), "user").agg(F.count("*").alias("clicks")),
    )
    output = ctx.require_param("output")

    def write(frame: DataFrame, batch_id: int) -> None:
        target = os.path.join(output, f"batch={batch_id}")
        if not os.path.exists(target):
            frame.write.parquet(target)

    return (
        hourly.select(F.col("window.start").alias("window_start"),
                      F.col("window.end").alias("window_end"), "user", "clicks")
        .writeStream.foreachBatch(write).outputMode("append")
    )
