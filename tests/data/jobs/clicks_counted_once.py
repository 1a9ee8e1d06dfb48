"""Clicks per user and 20-minute window, every event counted once however often it is read.

The dedupe keeps its keys forever (no watermark on it), so neither a startpoint that reads
files again nor a drain (which evicts what a watermark can evict) lets an event count twice.
The windows are the 20-minute slices of ``sparkpoint.testing.write_clicks``: with one file per
batch, a drain between two batches never splits a window, so the output is every window of
the input however the job was run, stopped and drained (tests/integration/test_home_torture.py).

--param files_per_batch=N  input files per batch (default 1)
"""

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

import sparkpoint as sp


def build(spark: SparkSession, ctx: sp.JobContext):  # type: ignore[no-untyped-def]
    clicks = (spark.readStream.name("clicks")
              .schema("event_id STRING, user STRING, url STRING, ts TIMESTAMP")
              .option("maxFilesPerTrigger", ctx.param("files_per_batch", "1"))
              .json(ctx.require_param("input")))
    once = ctx.stateful("clicks_seen", clicks.dropDuplicates(["event_id"]))
    counts = ctx.stateful(
        "window_counts",
        once.withWatermark("ts", "10 minutes")
        .groupBy(F.window("ts", "20 minutes"), "user").agg(F.count("*").alias("clicks")))
    return (counts.select(F.col("window.start").alias("window_start"),
                          F.col("window.end").alias("window_end"), "user", "clicks")
            .writeStream.format("parquet").option("path", ctx.require_param("output"))
            .outputMode("append"))
