"""Clicks per key and event-time window, operators left unnamed (derived names).

--param minutes=N     window length (default 10)
--param key=user|url  grouping column besides the window (default user)
--param session=yes   session windows with an N-minute gap instead
"""

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

import sparkpoint as sp


def build(spark: SparkSession, ctx: sp.JobContext):  # type: ignore[no-untyped-def]
    clicks = (spark.readStream.name("clicks")
              .schema("event_id STRING, user STRING, url STRING, ts TIMESTAMP")
              .json(ctx.require_param("input"))
              .withWatermark("ts", "10 minutes"))
    length = f"{ctx.param('minutes', '10')} minutes"
    window = (F.session_window("ts", length) if ctx.param("session") == "yes"
              else F.window("ts", length))
    counts = clicks.groupBy(window.alias("window"), ctx.param("key", "user")).count()
    return (counts.select("window.start", "window.end", ctx.param("key", "user"), "count")
            .writeStream.format("parquet").option("path", ctx.require_param("output"))
            .outputMode("append"))
