"""Spark's structured_sessionization.py as a sparkpoint job (the socket source as JSON
files, the console sink as parquet in append mode, hence the watermark).

--param input=DIR --param output=DIR [--param files_per_batch=N]
[--param latest=yes]   a later version: each session also keeps its latest event time
                       (max(eventTime), a column lastEvent), an aggregate added to its state
"""

from pyspark.sql import SparkSession
from pyspark.sql.functions import count, explode, session_window, split
from pyspark.sql.functions import max as max_

import sparkpoint as sp


def build(spark: SparkSession, ctx: sp.JobContext):  # type: ignore[no-untyped-def]
    lines = (spark.readStream.name("lines").schema("value STRING, timestamp TIMESTAMP")
             .option("maxFilesPerTrigger", ctx.param("files_per_batch", "2"))
             .json(ctx.require_param("input")))
    events = lines.select(explode(split(lines.value, " ")).alias("sessionId"),
                          lines.timestamp.alias("eventTime"))
    latest = ctx.param("latest", "no") == "yes"
    measures = [count("*").alias("numEvents"),
                *([max_("eventTime").alias("lastEvent")] if latest else [])]
    sessions = ctx.stateful("sessions", (
        events.withWatermark("eventTime", "10 seconds")
        .groupBy(session_window("eventTime", "10 seconds").alias("session"),
                 "sessionId")
        .agg(*measures)))
    return (sessions.selectExpr(
                "sessionId", "CAST(session.start AS LONG)", "CAST(session.end AS LONG)",
                "CAST(session.end AS LONG) - CAST(session.start AS LONG) AS durationMs",
                "numEvents", *(["lastEvent"] if latest else []))
            .writeStream.format("parquet").option("path", ctx.require_param("output"))
            .outputMode("append"))
