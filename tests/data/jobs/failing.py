"""A job that fails: --param fail=column refers to a column the input lacks (Spark's analysis
fails in build); --param fail=udf raises in a Python UDF inside the first batch."""

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

import sparkpoint as sp


def _reject(user: str) -> str:
    raise ValueError(f"bad user {user}")


def build(spark: SparkSession, ctx: sp.JobContext):  # type: ignore[no-untyped-def]
    clicks = (spark.readStream.name("clicks")
              .schema("event_id STRING, user STRING, url STRING, ts TIMESTAMP")
              .json(ctx.require_param("input")))
    if ctx.require_param("fail") == "column":
        rows = clicks.select("event_id", "no_such_column")
    else:
        rows = clicks.select(F.udf(_reject, "string")("user").alias("user"))
    return rows.writeStream.format("parquet").option("path", ctx.require_param("output"))
