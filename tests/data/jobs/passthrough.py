"""Stateless: every input record becomes one output row, so the output shows exactly which
records a run read.

--param source=file   clicks (JSON files in --param input): event_id, user, ts
--param source=kafka  records of --param topic on --param bootstrap: topic, partition,
                      offset, value, timestamp (at most 4 offsets per batch, or
                      --param max_offsets=N), read by
                      sparkpoint's Kafka source, or by Spark's connector with
                      --param kafka_format=kafka; --param group=G commits each
                      batch's end offsets to consumer group G; --param
                      extra_topic=T adds a second Kafka source, "extras", reading T
--param source=rate   Spark's rate source, 5 rows per second: timestamp, value
--param source=rate-micro-batch   Spark's rate-micro-batch source, 5 rows per batch from
                      timestamp 0: timestamp, value
"""

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

import sparkpoint as sp

SCHEMA = "event_id STRING, user STRING, url STRING, ts TIMESTAMP"


def _kafka(spark: SparkSession, ctx: sp.JobContext, name: str, topic: str):  # type: ignore[no-untyped-def]
    return (spark.readStream.name(name)
            .format(ctx.param("kafka_format", "sparkpoint-kafka") or "sparkpoint-kafka")
            .option("kafka.bootstrap.servers", ctx.require_param("bootstrap"))
            .option("subscribe", topic)
            .option("startingOffsets", "earliest")
            .option("maxOffsetsPerTrigger", ctx.param("max_offsets", "4")).load()
            .select("topic", "partition", "offset",
                    F.col("value").cast("string").alias("value"), "timestamp"))


def build(spark: SparkSession, ctx: sp.JobContext):  # type: ignore[no-untyped-def]
    if ctx.param("source", "file") == "kafka":
        rows = _kafka(spark, ctx, "events", ctx.require_param("topic"))
        extra = ctx.param("extra_topic")
        if extra:
            rows = rows.unionByName(_kafka(spark, ctx, "extras", extra))
        group = ctx.param("group")
        if group:
            ctx.commit_offsets_to_group("events", group)
    elif ctx.param("source") == "rate-micro-batch":
        rows = (spark.readStream.name("ticks").format("rate-micro-batch")
                .option("rowsPerBatch", "5").option("startTimestamp", "0").load())
    elif ctx.param("source") == "rate":
        rows = (spark.readStream.name("ticks").format("rate").option("rowsPerSecond", "5")
                .load())
    else:
        rows = (spark.readStream.name("clicks").schema(SCHEMA)
                .option("maxFilesPerTrigger", ctx.param("files_per_batch", "1"))
                .json(ctx.require_param("input")).select("event_id", "user", "ts"))
    return (rows.writeStream.format("parquet").option("path", ctx.require_param("output"))
            .outputMode("append"))
