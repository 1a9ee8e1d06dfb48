"""Stateless, Kafka to Kafka with Spark's connector: every record of --param topic becomes
one record of --param out_topic (same value with "!" appended, key the input's
"partition:offset"), so a reader of the output topic can tell which input record each came
from and count how often it was written.

--param bootstrap=HOST:PORT --param topic=IN --param out_topic=OUT
[--param max_offsets=N]        at most N input offsets per batch (default 4)
[--param topic_from=column]    the output topic from a topic column instead of the option
"""

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

import sparkpoint as sp


def build(spark: SparkSession, ctx: sp.JobContext):  # type: ignore[no-untyped-def]
    bootstrap = ctx.require_param("bootstrap")
    out_topic = ctx.require_param("out_topic")
    rows = (spark.readStream.name("events").format("kafka")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", ctx.require_param("topic"))
            .option("startingOffsets", "earliest")
            .option("maxOffsetsPerTrigger", ctx.param("max_offsets", "4")).load()
            .select(F.concat_ws(":", F.col("partition").cast("string"),
                                F.col("offset").cast("string")).alias("key"),
                    F.concat(F.col("value").cast("string"), F.lit("!")).alias("value")))
    writer = rows.writeStream.format("kafka").option("kafka.bootstrap.servers", bootstrap)
    if ctx.param("topic_from") == "column":
        return rows.withColumn("topic", F.lit(out_topic)).writeStream.format("kafka") \
            .option("kafka.bootstrap.servers", bootstrap)
    return writer.option("topic", out_topic)
