"""Stateless: the clicks of the users in --param users (comma-separated; default every user),
one input file per batch, so each batch's rows are one file's rows.

An upgrade changes the filter: --param users=ana,bo.
"""

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

import sparkpoint as sp

SCHEMA = "event_id STRING, user STRING, url STRING, ts TIMESTAMP"


def build(spark: SparkSession, ctx: sp.JobContext):  # type: ignore[no-untyped-def]
    clicks = (spark.readStream.name("clicks").schema(SCHEMA)
              .option("maxFilesPerTrigger", "1").json(ctx.require_param("input")))
    users = ctx.param("users")
    if users:
        clicks = clicks.where(F.col("user").isin(users.split(",")))
    return (clicks.writeStream.format("parquet").option("path", ctx.require_param("output"))
            .outputMode("append"))
