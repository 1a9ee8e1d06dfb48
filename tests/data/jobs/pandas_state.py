"""applyInPandasWithState: clicks per user, each batch emitting that batch's count and the
running total kept in state (the sum of batch counts and the last total do not depend on how
Spark cuts the input into batches)."""

from collections.abc import Iterator

import pandas as pd
from pyspark.sql.streaming.state import GroupState, GroupStateTimeout


def count_clicks(
    key: tuple[str], frames: Iterator[pd.DataFrame], state: GroupState
) -> Iterator[pd.DataFrame]:
    batch = sum(len(frame) for frame in frames)
    total = (state.get[0] if state.exists else 0) + batch
    state.update((total,))
    yield pd.DataFrame({"user": [key[0]], "batch_clicks": [batch], "total": [total]})


def build(spark, ctx):  # type: ignore[no-untyped-def]
    clicks = (
        spark.readStream.name("clicks")
        .schema("event_id STRING, user STRING, url STRING, ts TIMESTAMP")
        .option("maxFilesPerTrigger", "1")
        .json(ctx.require_param("input"))
    )
    counted = ctx.stateful("click_counts", clicks.groupBy("user").applyInPandasWithState(
        count_clicks, "user STRING, batch_clicks LONG, total LONG", "total LONG", "append",
        GroupStateTimeout.NoTimeout))
    return (
        counted.writeStream.format("parquet")
        .option("path", ctx.require_param("output"))
        .outputMode("append")
    )
