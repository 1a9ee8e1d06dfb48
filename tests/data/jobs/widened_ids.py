"""Unique events per hour and user, with the highest score: ids and scores typed by the
``id_type`` param (INT, then BIGINT when the ids outgrow int), the change of type users make
to a running job. Both operators' state holds the type: the dedupe's key (event_id) and the
aggregation's key (user_id) and value (the max buffer). ``dedupe_on``: the dedupe's columns
(``event_id,ts``; a later version drops ``ts``). ``per_user=no``: a later version counts
per hour only (the user_id grouping column removed). ``with_total=yes``: a later version
also sums the scores (an aggregate added)."""

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

import sparkpoint as sp


def build(spark: SparkSession, ctx: sp.JobContext):  # type: ignore[no-untyped-def]
    kind = ctx.param("id_type", "INT")
    events = (spark.readStream.name("events")
              .schema(f"event_id {kind}, user_id {kind}, score {kind}, ts TIMESTAMP")
              .json(ctx.require_param("input")))
    unique = ctx.stateful(
        "dedup_events",
        events.withWatermark("ts", "10 minutes")
        .dropDuplicates(ctx.param("dedupe_on", "event_id,ts").split(",")))
    per_user = ctx.param("per_user", "yes") == "yes"
    grouping = [F.window("ts", "1 hour"), *(["user_id"] if per_user else [])]
    total = [F.sum("score").alias("total")] if ctx.param("with_total", "no") == "yes" else []
    hourly = ctx.stateful(
        "hourly_scores",
        unique.groupBy(*grouping).agg(F.count("*").alias("events"), F.max("score").alias("top"),
                                      *total))
    return (hourly.select(F.col("window.start").alias("window_start"),
                          *(["user_id"] if per_user else []), "events", "top",
                          *(["total"] if total else []))
            .writeStream.format("parquet").option("path", ctx.require_param("output"))
            .outputMode("append"))
