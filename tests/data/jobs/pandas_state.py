"""applyInPandasWithState: a running click count per user, emitted on every update."""

from collections.abc import Iterator

import pandas as pd
from pyspark.sql.streaming.state import GroupState, GroupStateTimeout


def count_clicks(
    key: tuple[str], frames: Iterator[pd.DataFrame], state: GroupState
) -> Iterator[pd.DataFrame]:
    total = state.get[0] if state.exists else 0
    for frame in frames:
        total += len(frame)
    state.update((total,))
    yield pd.DataFrame({"user": [key[0]], "clicks": [total]})


def build(spark, ctx):  # type: ignore[no-untyped-def]
    clicks = (
        spark.readStream.name("clicks")
        .schema("event_id STRING, user STRING, url STRING, ts TIMESTAMP")
        .json(ctx.require_param("input"))
    )
    counted = ctx.stateful("click_counts", clicks.groupBy("user").applyInPandasWithState(
        count_clicks, "user STRING, clicks LONG", "clicks LONG", "update",
        GroupStateTimeout.NoTimeout))
    return (
        counted.writeStream.format("parquet")
        .option("path", ctx.require_param("output"))
        .outputMode("append")
    )
