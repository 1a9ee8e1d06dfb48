"""Spark's structured_kafka_wordcount.py as a sparkpoint job: lines from Kafka with Spark's
connector, split into words and counted. Its console sink in complete mode becomes parquet
in append mode, so the counts are per 10-second window of the records' Kafka timestamps,
with a watermark.

--param bootstrap=HOST:PORT --param topic=T --param output=DIR
[--param lines=DIR]   a second source: lines as JSON files (value, timestamp), as Spark's
                      socket example reads them, counted with the Kafka lines
"""

from pyspark.sql import SparkSession
from pyspark.sql.functions import explode, split, window

import sparkpoint as sp


def build(spark: SparkSession, ctx: sp.JobContext):  # type: ignore[no-untyped-def]
    lines = (spark.readStream.name("words").format("kafka")
             .option("kafka.bootstrap.servers", ctx.require_param("bootstrap"))
             .option("subscribe", ctx.require_param("topic"))
             .option("startingOffsets", "earliest").load()
             .selectExpr("CAST(value AS STRING) AS value", "timestamp"))
    if ctx.param("lines"):
        lines = lines.unionByName(
            spark.readStream.name("lines").schema("value STRING, timestamp TIMESTAMP")
            .json(ctx.param("lines")))
    words = lines.select(explode(split(lines.value, " ")).alias("word"), lines.timestamp)
    word_counts = ctx.stateful("word_counts", (
        words.withWatermark("timestamp", "10 seconds")
        .groupBy(window("timestamp", "10 seconds"), "word").count()))
    return (word_counts.select("window.start", "window.end", "word", "count")
            .writeStream.format("parquet").option("path", ctx.require_param("output"))
            .outputMode("append"))
