"""examples/clicks_job.py with one change: clicks on /p/1 to /p/4 are no longer counted
(a changed filter, state schemas as before, so it resumes the example job's snapshots)."""

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

import sparkpoint as sp

DROPPED_URLS = ("/p/1", "/p/2", "/p/3", "/p/4")


def build(spark: SparkSession, ctx: sp.JobContext):  # type: ignore[no-untyped-def]
    clicks = (
        spark.readStream.name("clicks")
        .schema("event_id STRING, user STRING, url STRING, ts TIMESTAMP")
        .option("maxFilesPerTrigger", ctx.param("files_per_batch", "1000"))
        .json(ctx.require_param("input"))
        .where(~F.col("url").isin(*DROPPED_URLS))
    )
    unique = ctx.stateful(
        "dedup_clicks",
        clicks.withWatermark("ts", "10 minutes").dropDuplicates(["event_id", "ts"]),
    )
    hourly = ctx.stateful(
        "hourly_counts",
        unique.groupBy(F.window("ts", "1 hour"), "user").agg(F.count("*").alias("clicks")),
    )
    return (
        hourly.select(
            F.col("window.start").alias("window_start"),
            F.col("window.end").alias("window_end"),
            "user",
            "clicks",
        )
        .writeStream.format("parquet")
        .option("path", ctx.require_param("output"))
        .outputMode("append")
    )
