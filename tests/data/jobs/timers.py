"""transformWithStateInPandas with timers: per user, count clicks in state and emit the
count when the user's timer fires, then clear the state.

--param mode=EventTime|ProcessingTime
EventTime       the timer is one day of event time after the user's newest click
ProcessingTime  the timer is one day of processing time after the user's latest batch
Neither fires during a test's run: only a drain makes them fire.
--param after=dedupe  adds a dedupe ("unique_counts") after the counts, which moves the
                      counts operator from Spark operator id 0 to 1
--param before=dedupe deduplicates clicks ("unique_clicks") before counting them
--param only=dedupe   writes the deduplicated clicks and counts nothing (no timers)
"""

from collections.abc import Iterator
from typing import Any

import pandas as pd
from pyspark.sql import SparkSession
from pyspark.sql.streaming.stateful_processor import (
    ExpiredTimerInfo,
    StatefulProcessor,
    StatefulProcessorHandle,
    TimerValues,
)

import sparkpoint as sp

SCHEMA = "event_id STRING, user STRING, url STRING, ts TIMESTAMP"
DAY_MS = 24 * 3600 * 1000


class CountUntilTimer(StatefulProcessor):
    def __init__(self, mode: str) -> None:
        self.mode = mode

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.handle = handle
        self.count = handle.getValueState("count", "n LONG")
        self.due = handle.getValueState("due", "at LONG")

    def handleInputRows(self, key: Any, rows: Iterator[pd.DataFrame],
                        timerValues: TimerValues) -> Iterator[pd.DataFrame]:
        total = self.count.get()[0] if self.count.exists() else 0
        newest = 0
        for frame in rows:
            total += len(frame)
            newest = max(newest, int(frame["ts"].max().value // 1_000_000))
        self.count.update((total,))
        if self.mode == "EventTime":
            at = max(newest, self.due.get()[0] - DAY_MS if self.due.exists() else 0) + DAY_MS
        else:
            at = timerValues.getCurrentProcessingTimeInMs() + DAY_MS
        if self.due.exists():
            self.handle.deleteTimer(self.due.get()[0])
        self.handle.registerTimer(at)
        self.due.update((at,))
        return iter([])

    def handleExpiredTimer(self, key: Any, timerValues: TimerValues,
                           expiredTimerInfo: ExpiredTimerInfo) -> Iterator[pd.DataFrame]:
        total = self.count.get()[0] if self.count.exists() else 0
        self.count.clear()
        self.due.clear()
        yield pd.DataFrame({"user": [key[0]], "n": [total]})

    def close(self) -> None:
        pass


def build(spark: SparkSession, ctx: sp.JobContext):  # type: ignore[no-untyped-def]
    mode = ctx.param("mode", "EventTime")
    clicks = (spark.readStream.name("clicks").schema(SCHEMA).option("maxFilesPerTrigger", "1")
              .json(ctx.require_param("input")).withWatermark("ts", "10 minutes"))
    if "dedupe" in (ctx.param("before"), ctx.param("only")):
        clicks = ctx.stateful("unique_clicks", clicks.dropDuplicates(["event_id", "ts"]))
    if ctx.param("only") == "dedupe":
        return (clicks.select("event_id", "user").writeStream.format("parquet")
                .option("path", ctx.require_param("output")).outputMode("append"))
    counts = ctx.stateful("counts", clicks.groupBy("user").transformWithStateInPandas(
        CountUntilTimer(mode), "user STRING, n LONG", "Append", mode))
    if ctx.param("after") == "dedupe":
        counts = ctx.stateful("unique_counts", counts.dropDuplicates(["user", "n"]))
    return (counts.writeStream.format("parquet").option("path", ctx.require_param("output"))
            .outputMode("append"))
