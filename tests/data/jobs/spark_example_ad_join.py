"""The Structured Streaming guide's stream-stream join of ad impressions and clicks, with
watermarks on both sides and an event-time range, as a sparkpoint job.

--param impressions=DIR --param clicks=DIR --param output=DIR [--param files_per_batch=N]
[--param with_hour=yes]   a later version: each impression also carries its hour (a column
                          added to the rows the join buffers)
"""

from pyspark.sql import SparkSession
from pyspark.sql.functions import expr, hour

import sparkpoint as sp


def build(spark: SparkSession, ctx: sp.JobContext):  # type: ignore[no-untyped-def]
    per_batch = ctx.param("files_per_batch", "2")
    impressions = (spark.readStream.name("impressions")
                   .schema("adId LONG, impressionTime TIMESTAMP")
                   .option("maxFilesPerTrigger", per_batch)
                   .json(ctx.require_param("impressions"))
                   .withColumnRenamed("adId", "impressionAdId"))
    if ctx.param("with_hour", "no") == "yes":
        impressions = impressions.withColumn("impressionHour", hour("impressionTime"))
    clicks = (spark.readStream.name("clicks").schema("adId LONG, clickTime TIMESTAMP")
              .option("maxFilesPerTrigger", per_batch).json(ctx.require_param("clicks"))
              .withColumnRenamed("adId", "clickAdId"))
    matches = ctx.stateful("impressions_clicks", (
        impressions.withWatermark("impressionTime", "2 hours")
        .join(clicks.withWatermark("clickTime", "3 hours"), expr("""
            clickAdId = impressionAdId AND
            clickTime >= impressionTime AND
            clickTime <= impressionTime + interval 1 hour
            """))))
    return (matches.writeStream.format("parquet").option("path", ctx.require_param("output"))
            .outputMode("append"))
