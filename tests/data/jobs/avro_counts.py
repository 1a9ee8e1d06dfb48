"""transformWithStateInPandas keeping a running count of clicks per user in a value state,
for the Avro state encoding (spark.sql.streaming.stateStore.encodingFormat=avro), whose state
schemas may evolve: each batch emits (user, n), the user's count so far.

--param value=count_only   the state value is (n LONG)
--param value=with_note    (n LONG, note STRING): a field added, which Avro state accepts
--param value=as_text      (n STRING): a changed type, which no state encoding accepts
--param value=as_double    (n DOUBLE, note STRING): with_note's count widened, which Avro
                           state accepts
"""

from collections.abc import Iterator
from typing import Any

import pandas as pd
from pyspark.sql import SparkSession
from pyspark.sql.streaming.stateful_processor import (
    StatefulProcessor,
    StatefulProcessorHandle,
    TimerValues,
)

import sparkpoint as sp

SCHEMA = "event_id STRING, user STRING, url STRING, ts TIMESTAMP"
VALUES = {"count_only": "n LONG", "with_note": "n LONG, note STRING", "as_text": "n STRING",
          "as_double": "n DOUBLE, note STRING"}


class RunningCount(StatefulProcessor):
    def __init__(self, value: str) -> None:
        self.value = value

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.count = handle.getValueState("count", VALUES[self.value])

    def handleInputRows(self, key: Any, rows: Iterator[pd.DataFrame],
                        timerValues: TimerValues) -> Iterator[pd.DataFrame]:
        total = int(self.count.get()[0]) if self.count.exists() else 0
        total += sum(len(frame) for frame in rows)
        if self.value == "with_note":
            self.count.update((total, "counted"))
        elif self.value == "as_double":
            self.count.update((float(total), "counted"))
        elif self.value == "as_text":
            self.count.update((str(total),))
        else:
            self.count.update((total,))
        yield pd.DataFrame({"user": [key[0]], "n": [total]})

    def close(self) -> None:
        pass


def build(spark: SparkSession, ctx: sp.JobContext):  # type: ignore[no-untyped-def]
    clicks = (spark.readStream.name("clicks").schema(SCHEMA).option("maxFilesPerTrigger", "1")
              .json(ctx.require_param("input")))
    counts = ctx.stateful("counts", clicks.groupBy("user").transformWithStateInPandas(
        RunningCount(ctx.param("value", "count_only") or "count_only"), "user STRING, n LONG",
        "Append", "None"))
    return (counts.writeStream.format("parquet").option("path", ctx.require_param("output"))
            .outputMode("append"))
