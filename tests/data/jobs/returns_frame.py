"""A job whose build returns a DataFrame instead of its writer."""

from pyspark.sql import SparkSession

import sparkpoint as sp


def build(spark: SparkSession, ctx: sp.JobContext):  # type: ignore[no-untyped-def]
    return spark.readStream.name("ticks").format("rate").load()
