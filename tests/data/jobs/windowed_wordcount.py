"""Spark's example structured_network_wordcount_windowed.py as a sparkpoint job: lines of
words with a timestamp (JSON files instead of a socket), counted per word over windows of
--param window sliding every --param slide, emitted in append mode once the watermark
(10 minutes) passes the window's end. With --param gap, session windows of that gap instead
(as in Spark's example structured_sessionization.py)."""

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

import sparkpoint as sp


def build(spark: SparkSession, ctx: sp.JobContext):  # type: ignore[no-untyped-def]
    lines = (spark.readStream.name("lines").schema("value STRING, timestamp TIMESTAMP")
             .option("maxFilesPerTrigger", ctx.param("files_per_batch", "1"))
             .json(ctx.require_param("input")))
    words = lines.select(F.explode(F.split(lines.value, " ")).alias("word"), lines.timestamp)
    gap = ctx.param("gap")
    window = (F.session_window(F.col("timestamp"), gap) if gap else
              F.window(F.col("timestamp"), ctx.param("window", "10 minutes"),
                       ctx.param("slide", "5 minutes")))
    column = "session_window" if gap else "window"
    counts = ctx.stateful("word_counts", words.withWatermark("timestamp", "10 minutes")
                          .groupBy(window, F.col("word")).count())
    return (counts.select(F.col(f"{column}.start").alias("start"),
                          F.col(f"{column}.end").alias("end"), "word", "count")
            .writeStream.format("parquet").option("path", ctx.require_param("output"))
            .outputMode("append"))
