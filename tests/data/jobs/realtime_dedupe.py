"""Spark 4.3's real-time mode, stateful: records of --param topic (Spark's Kafka connector) are
deduplicated by key and written to --param out_topic, a batch every 5 seconds of continuous
processing. Real-time mode needs a slot per Kafka partition plus one per shuffle partition:
run it with a one-partition topic and spark.sql.shuffle.partitions=1 on local[2]."""

from pyspark.sql import SparkSession

import sparkpoint as sp


def build(spark: SparkSession, ctx: sp.JobContext):  # type: ignore[no-untyped-def]
    bootstrap = ctx.require_param("bootstrap")
    records = (spark.readStream.name("records").format("kafka")
               .option("kafka.bootstrap.servers", bootstrap)
               .option("subscribe", ctx.require_param("topic"))
               .option("startingOffsets", "earliest").load()
               .selectExpr("CAST(key AS STRING) AS key", "CAST(value AS STRING) AS value"))
    return (ctx.stateful("seen_keys", records.dropDuplicates(["key"]))
            .writeStream.format("kafka").option("kafka.bootstrap.servers", bootstrap)
            .option("topic", ctx.require_param("out_topic"))
            .outputMode("update").trigger(realTime="5 seconds"))
