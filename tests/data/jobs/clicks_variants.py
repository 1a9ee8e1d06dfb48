"""Versions of the clicks job that an upgrade may go through, chosen with --param variant=...

v1          clicks -> dedup_clicks (dropDuplicates) -> hourly_counts
inserted    clicks -> dedup_clicks -> recent_ids (new, dropDuplicatesWithinWatermark)
            -> hourly_counts
renamed     clicks -> unique_clicks -> counts_per_hour          (same operators, new names)
no_dedupe   clicks -> hourly_counts                              (dedup_clicks removed)
two_sources (clicks2 = old clicks renamed, union extra) -> dedup_clicks -> hourly_counts
reordered   extra union clicks2                                  (sources swapped in the plan)
clicks2     clicks2 alone                                       (extra removed)
kafka_extra clicks2 union extra, where extra is clicks as JSON records of the topics matching
            --param topic_pattern on --param bootstrap, read by Spark's Kafka connector
rekeyed     like v1, but dedup_clicks keys on event_id and url     (key schema changed: a
            column added, which no migration gives a value)
listed      like v1, but hourly_counts collects the urls instead of counting (an aggregate
            added whose buffer has no initial value: no migration)
"""

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

import sparkpoint as sp

SCHEMA = "event_id STRING, user STRING, url STRING, ts TIMESTAMP"


def _read(spark: SparkSession, ctx: sp.JobContext, name: str, path_param: str) -> DataFrame:
    return (spark.readStream.name(name).schema(SCHEMA)
            .option("maxFilesPerTrigger", ctx.param("files_per_batch", "1"))
            .json(ctx.require_param(path_param)))


def build(spark: SparkSession, ctx: sp.JobContext):  # type: ignore[no-untyped-def]
    variant = ctx.param("variant", "v1")
    dedup_name, counts_name = "dedup_clicks", "hourly_counts"
    if variant == "renamed":
        dedup_name, counts_name = "unique_clicks", "counts_per_hour"
    if variant == "two_sources":
        clicks = _read(spark, ctx, "clicks2", "input").unionByName(
            _read(spark, ctx, "extra", "extra_input"))
    elif variant == "reordered":
        clicks = _read(spark, ctx, "extra", "extra_input").unionByName(
            _read(spark, ctx, "clicks2", "input"))
    elif variant == "kafka_extra":
        extra = (spark.readStream.name("extra").format("kafka")
                 .option("kafka.bootstrap.servers", ctx.require_param("bootstrap"))
                 .option("subscribePattern", ctx.require_param("topic_pattern")).load()
                 .select(F.from_json(F.col("value").cast("string"), SCHEMA).alias("click"))
                 .select("click.*"))
        clicks = _read(spark, ctx, "clicks2", "input").unionByName(extra)
    elif variant == "clicks2":
        clicks = _read(spark, ctx, "clicks2", "input")
    else:
        clicks = _read(spark, ctx, "clicks", "input")
    events = clicks.withWatermark("ts", "10 minutes")
    if variant != "no_dedupe":
        keys = ["event_id", "url"] if variant == "rekeyed" else ["event_id", "ts"]
        events = ctx.stateful(dedup_name, events.dropDuplicates(keys))
    if variant == "inserted":
        events = ctx.stateful("recent_ids", events.dropDuplicatesWithinWatermark(["event_id"]))
    measure = F.collect_list("url") if variant == "listed" else F.count("*")
    hourly = ctx.stateful(
        counts_name, events.groupBy(F.window("ts", "1 hour"), "user").agg(measure.alias("n")))
    return (hourly.select(F.col("window.start").alias("window_start"),
                          F.col("window.end").alias("window_end"), "user", "n")
            .writeStream.format("parquet").option("path", ctx.require_param("output"))
            .outputMode("append"))
