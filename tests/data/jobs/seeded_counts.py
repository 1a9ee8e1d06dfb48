"""Unique events (the dedupe of widened_ids.py), written as they are; with ``hourly=yes`` a
later version adds an aggregation of them: unique events per hour and user, whose state a
resume point can seed from the events the first version wrote (``mode: seed``)."""

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

import sparkpoint as sp


def build(spark: SparkSession, ctx: sp.JobContext):  # type: ignore[no-untyped-def]
    events = (spark.readStream.name("events")
              .schema("event_id INT, user_id INT, score INT, ts TIMESTAMP")
              .json(ctx.require_param("input")))
    unique = ctx.stateful(
        "dedup_events",
        events.withWatermark("ts", "10 minutes").dropDuplicates(["event_id", "ts"]))
    if ctx.param("hourly", "no") != "yes":
        return (unique.writeStream.format("parquet").option("path", ctx.require_param("output"))
                .outputMode("append"))
    hourly = ctx.stateful(
        "hourly_users",
        unique.groupBy(F.window("ts", "1 hour"), "user_id").agg(F.count("*").alias("events")))
    return (hourly.select(F.col("window.start").alias("window_start"), "user_id", "events")
            .writeStream.format("parquet").option("path", ctx.require_param("output"))
            .outputMode("append"))
