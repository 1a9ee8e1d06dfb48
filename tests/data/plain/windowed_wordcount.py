"""Spark's example structured_network_wordcount_windowed.py as a team runs it without
sparkpoint (spark-submit, Spark's defaults, an unnamed file source instead of the socket),
writing parquet in append mode; one run processes what is available and stops.

    spark-submit windowed_wordcount.py INPUT OUTPUT CHECKPOINT [WINDOW SLIDE]
    spark-submit windowed_wordcount.py INPUT OUTPUT CHECKPOINT session GAP

The second form counts per session window (structured_sessionization.py's grouping).
"""

import sys

from pyspark.sql import SparkSession
from pyspark.sql.functions import col, explode, session_window, split, window

if __name__ == "__main__":
    inp, out, checkpoint = sys.argv[1:4]
    window_duration = sys.argv[4] if len(sys.argv) > 4 else "10 minutes"
    slide_duration = sys.argv[5] if len(sys.argv) > 5 else "5 minutes"
    spark = SparkSession.builder.appName("StructuredNetworkWordCountWindowed").getOrCreate()
    lines = spark.readStream.schema("value STRING, timestamp TIMESTAMP").json(inp)
    words = lines.select(explode(split(lines.value, " ")).alias("word"), lines.timestamp)
    if window_duration == "session":
        grouping, column = session_window(col("timestamp"), slide_duration), "session_window"
    else:
        grouping, column = window(col("timestamp"), window_duration, slide_duration), "window"
    windowed_counts = words.withWatermark("timestamp", "10 minutes").groupBy(
        grouping, col("word")).count()
    query = (windowed_counts.select(col(f"{column}.start").alias("start"),
                                    col(f"{column}.end").alias("end"), "word", "count")
             .writeStream.format("parquet").option("path", out)
             .option("checkpointLocation", checkpoint).outputMode("append")
             .trigger(availableNow=True).start())
    query.awaitTermination()
    spark.stop()
