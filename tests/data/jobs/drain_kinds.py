"""One pipeline per drain case, reading clicks (and views) with a 10-minute watermark.

--param kind=tumbling|sliding|session|outer|within|residual
tumbling  per user, 1-hour windows: count
sliding   per user, 1-hour windows every 30 minutes: count
session   per user, 5-minute-gap sessions: count
outer     clicks LEFT OUTER JOIN views of the same user within 2 minutes
within    dropDuplicatesWithinWatermark(user, url)
residual  dropDuplicates(event_id) without a watermark, then 1-hour tumbling counts
"""

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

import sparkpoint as sp

SCHEMA = "event_id STRING, user STRING, url STRING, ts TIMESTAMP"


def _read(spark: SparkSession, ctx: sp.JobContext, name: str, param: str) -> DataFrame:
    return (spark.readStream.name(name).schema(SCHEMA).option("maxFilesPerTrigger", "1")
            .json(ctx.require_param(param)))


def _counts(ctx: sp.JobContext, name: str, frame: DataFrame, window: object) -> DataFrame:
    counts = ctx.stateful(name, frame.groupBy(window, "user").agg(F.count("*").alias("n")))
    column = "session_window" if name == "sessions" else "window"
    return counts.select("user", F.col(f"{column}.start").alias("start"),
                         F.col(f"{column}.end").alias("end"), "n")


def build(spark: SparkSession, ctx: sp.JobContext):  # type: ignore[no-untyped-def]
    kind = ctx.require_param("kind")
    clicks = _read(spark, ctx, "clicks", "input")
    if kind == "residual":
        unique = ctx.stateful("unique_ids", clicks.dropDuplicates(["event_id"]))
        rows = _counts(ctx, "hourly", unique.withWatermark("ts", "10 minutes"),
                       F.window("ts", "1 hour"))
    else:
        clicks = clicks.withWatermark("ts", "10 minutes")
    if kind == "tumbling":
        rows = _counts(ctx, "hourly", clicks, F.window("ts", "1 hour"))
    elif kind == "sliding":
        rows = _counts(ctx, "sliding", clicks, F.window("ts", "1 hour", "30 minutes"))
    elif kind == "session":
        rows = _counts(ctx, "sessions", clicks, F.session_window("ts", "5 minutes"))
    elif kind == "within":
        rows = ctx.stateful("first_visits", clicks.dropDuplicatesWithinWatermark(["user", "url"]))
        rows = rows.select("event_id", "user", "url", "ts")
    elif kind == "outer":
        views = _read(spark, ctx, "views", "views_input").withWatermark("ts", "10 minutes")
        views = views.select(F.col("event_id").alias("view_id"), F.col("user").alias("v_user"),
                             F.col("ts").alias("v_ts"))
        rows = ctx.stateful("clicks_views", clicks.join(views, F.expr(
            "user = v_user AND v_ts BETWEEN ts - INTERVAL 2 MINUTES AND ts + INTERVAL 2 MINUTES"),
            "left_outer"))
        rows = rows.select("event_id", "view_id")
    elif kind != "residual":
        raise ValueError(f"unknown kind {kind!r}")
    return (rows.writeStream.format("parquet").option("path", ctx.require_param("output"))
            .outputMode("append"))
