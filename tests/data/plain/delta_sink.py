"""A stateless query writing a Delta Lake table, as a team runs it without sparkpoint
(spark-submit, Spark's defaults; Delta's jars, SQL extension and catalog given by --conf).
One run processes the JSON files of INPUT one file a batch and stops; a query that fails
fails the run (exit 1, Spark's log of the query's error on stderr).

    spark-submit delta_sink.py INPUT TABLE CHECKPOINT
"""

import sys

from pyspark.sql import SparkSession

if __name__ == "__main__":
    inp, table, checkpoint = sys.argv[1:4]
    spark = SparkSession.builder.appName("delta-sink").getOrCreate()
    rows = spark.readStream.schema("id LONG, k STRING").option("maxFilesPerTrigger", 1).json(inp)
    query = (rows.writeStream.format("delta").option("checkpointLocation", checkpoint)
             .trigger(availableNow=True).start(table))
    query.awaitTermination()
    spark.stop()
