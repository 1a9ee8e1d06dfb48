"""One pipeline per stateful operator kind, each behind a dedupe, for upgrade tests.

--param kind=session|join|pandas|within   which pipeline
--param version=v1|v2              v2 inserts a dropDuplicatesWithinWatermark ("recent_ids")
                                   after the dedupe; it removes nothing, the input has no
                                   repeats left by then, so v2 emits what v1 emits.
"""

from collections.abc import Iterator

import pandas as pd
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming.state import GroupState, GroupStateTimeout

import sparkpoint as sp

SCHEMA = "event_id STRING, user STRING, url STRING, ts TIMESTAMP"


def _clicks(spark: SparkSession, ctx: sp.JobContext, name: str, param: str) -> DataFrame:
    clicks = (spark.readStream.name(name).schema(SCHEMA).option("maxFilesPerTrigger", "1")
              .json(ctx.require_param(param)))
    unique = ctx.stateful(f"dedup_{name}", clicks.withWatermark("ts", "10 minutes")
                          .dropDuplicates(["event_id", "ts"]))
    if ctx.param("version", "v1") == "v2":
        unique = ctx.stateful(f"recent_ids_{name}",
                              unique.dropDuplicatesWithinWatermark(["event_id"]))
    return unique


def _running_counts(
    key: tuple[str], batches: Iterator[pd.DataFrame], state: GroupState
) -> Iterator[pd.DataFrame]:
    seen = state.get[0] if state.exists else 0
    for batch in batches:
        seen += len(batch)
    state.update((seen,))
    yield pd.DataFrame({"user": [key[0]], "seen": [seen]})


def build(spark: SparkSession, ctx: sp.JobContext):  # type: ignore[no-untyped-def]
    kind = ctx.require_param("kind")
    clicks = _clicks(spark, ctx, "clicks", "input")
    if kind == "session":
        rows = ctx.stateful("sessions", clicks.groupBy(
            F.session_window("ts", "5 minutes"), "user").agg(F.count("*").alias("n")))
        rows = rows.select("user", F.col("session_window.start").alias("start"),
                           F.col("session_window.end").alias("end"), "n")
    elif kind == "join":
        views = _clicks(spark, ctx, "views", "views_input").select(
            F.col("user").alias("v_user"), F.col("url").alias("v_url"), F.col("ts").alias("v_ts"))
        rows = ctx.stateful("clicks_views", clicks.join(views, F.expr(
            "user = v_user AND v_ts BETWEEN ts - INTERVAL 2 MINUTES AND ts + INTERVAL 2 MINUTES")))
        rows = rows.select("event_id", "user", "url", "v_url", "ts", "v_ts")
    elif kind == "within":
        rows = ctx.stateful("first_visits", clicks.dropDuplicatesWithinWatermark(["user", "url"]))
        rows = rows.select("user", "url", "ts")
    elif kind == "pandas":
        rows = ctx.stateful("running_counts", clicks.groupBy("user").applyInPandasWithState(
            _running_counts, "user STRING, seen LONG", "seen LONG", "append",
            GroupStateTimeout.NoTimeout))
    else:
        raise ValueError(f"unknown kind {kind!r}")
    return (rows.writeStream.format("parquet").option("path", ctx.require_param("output"))
            .outputMode("append"))
