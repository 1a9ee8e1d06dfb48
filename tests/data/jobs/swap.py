"""Two dedupes with same-typed (string) keys; --param order=user_first|url_first swaps them.

Spark checks key types, not names: restarting after a swap it would load each dedupe's state
into the other. sparkpoint maps state by name.
"""

from pyspark.sql import SparkSession

import sparkpoint as sp


def build(spark: SparkSession, ctx: sp.JobContext):  # type: ignore[no-untyped-def]
    clicks = (spark.readStream.name("clicks")
              .schema("event_id STRING, user STRING, url STRING, ts TIMESTAMP")
              .json(ctx.require_param("input")))

    def by_user(frame):  # type: ignore[no-untyped-def]
        return ctx.stateful("by_user", frame.dropDuplicates(["user"]))

    def by_url(frame):  # type: ignore[no-untyped-def]
        return ctx.stateful("by_url", frame.dropDuplicates(["url"]))

    first, second = (by_user, by_url) if ctx.param("order") == "user_first" else (by_url, by_user)
    return (second(first(clicks)).writeStream.format("parquet")
            .option("path", ctx.require_param("output")).outputMode("append"))
