"""A module-level pandas UDF with a DDL return type: url lengths per user, summed."""

import pandas as pd
from pyspark.sql import functions as F


@F.pandas_udf("long")
def url_length(urls: pd.Series) -> pd.Series:
    return urls.str.len()


shout = F.udf(lambda user: user.upper(), "string")


def build(spark, ctx):  # type: ignore[no-untyped-def]
    clicks = (
        spark.readStream.name("clicks")
        .schema("event_id STRING, user STRING, url STRING, ts TIMESTAMP")
        .json(ctx.require_param("input"))
    )
    return (
        clicks.select("event_id", shout("user").alias("user"), url_length("url").alias("len"))
        .writeStream.format("parquet")
        .option("path", ctx.require_param("output"))
        .outputMode("append")
    )
