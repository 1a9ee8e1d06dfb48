"""The Structured Streaming guide's dropDuplicatesWithinWatermark on a guid, as a sparkpoint
job.

--param input=DIR --param output=DIR [--param files_per_batch=N]
"""

from pyspark.sql import SparkSession

import sparkpoint as sp


def build(spark: SparkSession, ctx: sp.JobContext):  # type: ignore[no-untyped-def]
    events = (spark.readStream.name("events")
              .schema("guid STRING, eventTime TIMESTAMP, payload STRING")
              .option("maxFilesPerTrigger", ctx.param("files_per_batch", "2"))
              .json(ctx.require_param("input")))
    unique = ctx.stateful("unique_events", (
        events.withWatermark("eventTime", "10 hours").dropDuplicatesWithinWatermark(["guid"])))
    return (unique.writeStream.format("parquet").option("path", ctx.require_param("output"))
            .outputMode("append"))
