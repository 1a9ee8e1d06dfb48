"""Spark's windowed word count (spark_example_wordcount.py) grown the way users grow it: the
count kept, each window's letters (sum(length(word))) and its latest timestamp
(max(timestamp)) added, in one agg(). Its state resumes the plain count's: the two new
aggregates start as if they had seen no row before the switch.

--param input=DIR --param output=DIR [--param files_per_batch=N]
"""

from pyspark.sql import SparkSession
from pyspark.sql.functions import count, explode, length, split, window
from pyspark.sql.functions import max as max_
from pyspark.sql.functions import sum as sum_

import sparkpoint as sp


def build(spark: SparkSession, ctx: sp.JobContext):  # type: ignore[no-untyped-def]
    lines = (spark.readStream.name("lines").schema("value STRING, timestamp TIMESTAMP")
             .option("maxFilesPerTrigger", ctx.param("files_per_batch", "2"))
             .json(ctx.require_param("input")))
    words = lines.select(explode(split(lines.value, " ")).alias("word"), lines.timestamp)
    windowed_counts = ctx.stateful("windowed_counts", (
        words.withWatermark("timestamp", "10 seconds")
        .groupBy(window("timestamp", "10 seconds", "5 seconds"), "word")
        .agg(sum_(length("word")).alias("letters"), count("*").alias("count"),
             max_("timestamp").alias("latest"))))
    return (windowed_counts.select("window.start", "window.end", "word", "count", "letters",
                                   "latest")
            .writeStream.format("parquet").option("path", ctx.require_param("output"))
            .outputMode("append"))
