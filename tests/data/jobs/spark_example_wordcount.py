"""Spark's structured_network_wordcount_windowed.py as a sparkpoint job (the socket source
as JSON files, the console sink as parquet in append mode, hence the watermark).

--param input=DIR --param output=DIR [--param files_per_batch=N]
[--param skip_word=W]   a faulty version: lines holding W are lost
"""

from pyspark.sql import SparkSession
from pyspark.sql.functions import explode, split, window

import sparkpoint as sp


def build(spark: SparkSession, ctx: sp.JobContext):  # type: ignore[no-untyped-def]
    lines = (spark.readStream.name("lines").schema("value STRING, timestamp TIMESTAMP")
             .option("maxFilesPerTrigger", ctx.param("files_per_batch", "2"))
             .json(ctx.require_param("input")))
    if ctx.param("skip_word"):
        lines = lines.where(~lines.value.contains(ctx.param("skip_word")))
    words = lines.select(explode(split(lines.value, " ")).alias("word"), lines.timestamp)
    windowed_counts = ctx.stateful("windowed_counts", (
        words.withWatermark("timestamp", "10 seconds")
        .groupBy(window("timestamp", "10 seconds", "5 seconds"), "word").count()))
    return (windowed_counts.select("window.start", "window.end", "word", "count")
            .writeStream.format("parquet").option("path", ctx.require_param("output"))
            .outputMode("append"))
