"""Spark's example queries as a team runs them without sparkpoint: plain PySpark launched by
spark-submit, Spark's defaults (HDFS state store, 200 shuffle partitions, unnamed sources,
source evolution off), checkpoint where the team chose. The socket source is replaced by
JSON files, the console sink by parquet in append mode (hence a watermark on aggregations,
and columns named by string: Spark's examples refer to `words.timestamp`, the column
before `withWatermark`, which carries no watermark).

    spark-submit plain.py EXAMPLE OUTPUT CHECKPOINT INPUT [INPUT2]

EXAMPLE: wordcount_windowed | sessionization | ad_join | dedupe_guid. Runs what is
available (two files per batch) and stops.
"""

import sys

from pyspark.sql import SparkSession
from pyspark.sql.functions import count, explode, expr, session_window, split, window

FILES_PER_BATCH = "2"


def lines(spark, path):
    # What the socket source gives with includeTimestamp.
    return (spark.readStream.schema("value STRING, timestamp TIMESTAMP")
            .option("maxFilesPerTrigger", FILES_PER_BATCH).json(path))


def wordcount_windowed(spark, inputs):
    # structured_network_wordcount_windowed.py, window 10 s sliding every 5 s.
    lines_df = lines(spark, inputs[0])
    words = lines_df.select(explode(split(lines_df.value, " ")).alias("word"),
                            lines_df.timestamp)
    windowed_counts = (words.withWatermark("timestamp", "10 seconds")
                       .groupBy(window("timestamp", "10 seconds", "5 seconds"), "word")
                       .count())
    return windowed_counts.select("window.start", "window.end", "word", "count")


def sessionization(spark, inputs):
    # structured_sessionization.py.
    lines_df = lines(spark, inputs[0])
    events = lines_df.select(explode(split(lines_df.value, " ")).alias("sessionId"),
                             lines_df.timestamp.alias("eventTime"))
    return (events.withWatermark("eventTime", "10 seconds")
            .groupBy(session_window("eventTime", "10 seconds").alias("session"),
                     "sessionId")
            .agg(count("*").alias("numEvents"))
            .selectExpr("sessionId", "CAST(session.start AS LONG)", "CAST(session.end AS LONG)",
                        "CAST(session.end AS LONG) - CAST(session.start AS LONG) AS durationMs",
                        "numEvents"))


def ad_join(spark, inputs):
    # The guide's stream-stream inner join with watermarks and an event-time range.
    impressions = (spark.readStream.schema("adId LONG, impressionTime TIMESTAMP")
                   .option("maxFilesPerTrigger", FILES_PER_BATCH).json(inputs[0])
                   .withColumnRenamed("adId", "impressionAdId"))
    clicks = (spark.readStream.schema("adId LONG, clickTime TIMESTAMP")
              .option("maxFilesPerTrigger", FILES_PER_BATCH).json(inputs[1])
              .withColumnRenamed("adId", "clickAdId"))
    impressions_with_watermark = impressions.withWatermark("impressionTime", "2 hours")
    clicks_with_watermark = clicks.withWatermark("clickTime", "3 hours")
    return impressions_with_watermark.join(clicks_with_watermark, expr("""
        clickAdId = impressionAdId AND
        clickTime >= impressionTime AND
        clickTime <= impressionTime + interval 1 hour
        """))


def dedupe_guid(spark, inputs):
    # The guide's dropDuplicatesWithinWatermark on a guid.
    streaming_df = (spark.readStream.schema("guid STRING, eventTime TIMESTAMP, payload STRING")
                    .option("maxFilesPerTrigger", FILES_PER_BATCH).json(inputs[0]))
    return (streaming_df.withWatermark("eventTime", "10 hours")
            .dropDuplicatesWithinWatermark(["guid"]))


if __name__ == "__main__":
    example, output, checkpoint, *inputs = sys.argv[1:]
    spark = SparkSession.builder.appName(example).getOrCreate()
    frame = globals()[example](spark, inputs)
    query = (frame.writeStream.format("parquet").option("path", output)
             .option("checkpointLocation", checkpoint).outputMode("append")
             .trigger(availableNow=True).start())
    query.awaitTermination()
    spark.stop()
