"""Small stateful jobs whose state ``snapshot prune`` tests remove keys from.

--param kind=dedupe     first click of each user ever seen ("first_users", no watermark)
--param kind=windowed   clicks per user and 10-minute window, 10-minute watermark ("counts")
"""

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

import sparkpoint as sp


def build(spark: SparkSession, ctx: sp.JobContext):  # type: ignore[no-untyped-def]
    clicks = (spark.readStream.name("clicks")
              .schema("event_id STRING, user STRING, url STRING, ts TIMESTAMP")
              .json(ctx.require_param("input")))
    kind = ctx.require_param("kind")
    if kind == "dedupe":
        rows = ctx.stateful("first_users", clicks.dropDuplicates(["user"])).select("user")
    elif kind == "windowed":
        counts = ctx.stateful("counts", clicks.withWatermark("ts", "10 minutes")
                              .groupBy(F.window("ts", "10 minutes"), "user").count())
        rows = counts.select("window.start", "window.end", "user", "count")
    else:
        raise ValueError(f"unknown kind {kind!r}")
    return (rows.writeStream.format("parquet").option("path", ctx.require_param("output"))
            .outputMode("append"))
