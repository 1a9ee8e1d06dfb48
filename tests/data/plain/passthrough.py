"""A stateless query as a team runs it without sparkpoint (spark-submit, Spark's defaults,
an unnamed source): every record read becomes one parquet row. One run processes what is
available and stops.

    spark-submit passthrough.py rate|rate-micro-batch OUTPUT CHECKPOINT
    spark-submit passthrough.py kafka OUTPUT CHECKPOINT BOOTSTRAP TOPIC
"""

import sys

from pyspark.sql import SparkSession
from pyspark.sql.functions import col

if __name__ == "__main__":
    kind, out, checkpoint = sys.argv[1:4]
    spark = SparkSession.builder.appName("passthrough").getOrCreate()
    if kind == "kafka":
        # Spark's own Kafka connector (spark-sql-kafka-0-10, handed over by spark.jars).
        rows = (spark.readStream.format("kafka")
                .option("kafka.bootstrap.servers", sys.argv[4]).option("subscribe", sys.argv[5])
                .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", "4").load()
                .select("topic", "partition", "offset", col("value").cast("string").alias("value"),
                        "timestamp"))
    elif kind == "rate-micro-batch":
        rows = (spark.readStream.format("rate-micro-batch").option("rowsPerBatch", "5")
                .option("startTimestamp", "0").load())
    else:
        rows = spark.readStream.format("rate").option("rowsPerSecond", "5").load()
    # The rate source's first batch ends where it starts (the second it was started): a
    # second run reads the seconds that passed since.
    for _run in range(2 if kind == "rate" else 1):
        query = (rows.writeStream.format("parquet").option("path", out)
                 .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())
        query.awaitTermination()
    spark.stop()
