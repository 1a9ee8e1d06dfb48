"""A rollback into Spark's Kafka sink: what stays in the topic and what is written again.

Spark's Kafka sink appends each batch's rows to the topic and keeps no log of its own: it is
at least once. A job started from a snapshot of batch N, after the snapshot's job went on to
batch L in the same topic, runs batches N+1.. again; the records the old run wrote for
N+1..L stay in the topic (a topic cannot be rewound: Kafka deletes records only by retention
or below an offset), and the new run writes those batches' records again. Nothing can undo
that; sparkpoint says so and names, per partition, the offsets of the abandoned records, so
that the topic's readers can skip them.

The offsets are read from the topic through the broker, by time: the connector (4.2.0) sends
each record with no timestamp, so Kafka's producer stamps it when it is sent (CreateTime;
LogAppendTime on a topic set so: the broker's append time, later still). Batch N+1 is
planned, its time written in the offsets log (``batchTimestampMs``), only after batch N
committed, i.e. after every record of batch N was flushed: the abandoned records are those at
or after that time (Kafka's ListOffsets by timestamp), to the end of each partition. The
range is by write time: it also holds whatever anyone else wrote to the topic since, and it
needs the executors' clocks to agree with the driver's.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, ConfigDict

# A broker that does not answer in this many seconds: the ranges are not named (the start
# goes on; the warning says they could not be read).
BROKER_TIMEOUT_S = 5.0


class PartitionRange(BaseModel):
    """Offsets [start, end) of one partition: the abandoned batches' records."""

    model_config = ConfigDict(extra="forbid")
    partition: int
    start: int
    end: int

    @property
    def records(self) -> int:
        return self.end - self.start


class KafkaReplay(BaseModel):
    """A start that writes batches into a Kafka topic again (kept in the job's lineage)."""

    model_config = ConfigDict(extra="forbid")
    topic: str | None  # None: each row's topic column names it
    bootstrap: str
    snapshot_job: str
    snapshot_batch: int
    last_batch: int  # the last batch the snapshot's job committed into the topic
    since_ms: int | None  # batchTimestampMs of batch snapshot_batch + 1
    ranges: list[PartitionRange] | None = None  # None: not named (see unnamed)
    unnamed: str | None = None  # why the ranges are not named
    # The rows have a timestamp column (spark/sink.py KafkaOutput): a newer connector stamps
    # the records with it, and then a range by time is not a range by write time.
    timestamp_column: bool = False

    def message(self) -> str:
        caveat = ("; the rows have a timestamp column, which Spark's Kafka connector "
                  "4.2.0 ignores and newer connectors write as the records' timestamp: "
                  "with those, these ranges go by that column, not by write time"
                  if self.timestamp_column and self.ranges else "")
        return self._text() + caveat

    def _text(self) -> str:
        first, last = self.snapshot_batch + 1, self.last_batch
        where = f"Kafka topic '{self.topic}'" if self.topic else "the Kafka sink's topics"
        text = (f"rollback into {where}: job '{self.snapshot_job}' already wrote batches "
                f"{first}..{last} there after the snapshot's batch {self.snapshot_batch}; "
                "Spark's Kafka sink is at least once and a topic cannot be rewound, so those "
                f"records stay in the topic and batches {first}.. are written again")
        if self.ranges is None:
            return f"{text}; {self.unnamed}"
        held = [r for r in self.ranges if r.records > 0]
        if not held:
            return (f"{text}; the topic holds no record written at or after batch {first} "
                    "began (deleted, or the batches wrote none)")
        named = ", ".join(f"{self.topic}-{r.partition} [{r.start}, {r.end})" for r in held)
        return (f"{text}; the abandoned batches' records, by write time (at or after batch "
                f"{first} began, to each partition's end now): {named}")

    def to_dict(self) -> dict[str, Any]:
        return self.model_dump()


# (topic, since_ms) -> {partition: (start, end)}; raises when the broker does not answer.
ReadRanges = Callable[[str, int], dict[int, tuple[int, int]]]


def name_ranges(replay: KafkaReplay, read: ReadRanges) -> KafkaReplay:
    """``replay`` with its ranges read through ``read``, or the reason they are not."""
    if replay.topic is None:
        return replay.model_copy(update={"unnamed": (
            "the ranges of the abandoned records cannot be named: each row's topic column "
            "chooses the topic, and which topics the abandoned batches wrote is known "
            "only from their rows")})
    if replay.since_ms is None:
        return replay.model_copy(update={"unnamed": (
            f"the ranges of the abandoned records cannot be named: job "
            f"'{replay.snapshot_job}' no longer holds the offsets log entry of batch "
            f"{replay.snapshot_batch + 1}, whose time they are read from")})
    try:
        found = read(replay.topic, replay.since_ms)
    except Exception as exc:  # whatever the client raises: the broker did not answer
        return replay.model_copy(update={"unnamed": (
            f"the ranges of the abandoned records in topic '{replay.topic}' could not be "
            f"read: the broker {replay.bootstrap} did not answer within "
            f"{BROKER_TIMEOUT_S:.0f}s ({_reason(exc)})")})
    return replay.model_copy(update={"ranges": [
        PartitionRange(partition=p, start=start, end=end)
        for p, (start, end) in sorted(found.items())]})


def _reason(exc: Exception) -> str:
    """The client's own words: a KafkaException carries a KafkaError whose str() is them."""
    error: Any = exc.args[0] if exc.args else None
    text = error.str() if error is not None and hasattr(error, "str") else str(exc)
    return str(text) or exc.__class__.__name__


def broker_ranges(bootstrap: str) -> ReadRanges:
    """Read the ranges from the broker: per partition, the first offset whose timestamp is
    at or after ``since_ms`` (Kafka's ListOffsets by timestamp) to the partition's end."""

    def read(topic: str, since_ms: int) -> dict[int, tuple[int, int]]:
        from sparkpoint.sources.kafka import KafkaMetadata

        meta = KafkaMetadata(bootstrap, timeout=BROKER_TIMEOUT_S, quiet=True)
        try:
            found = {}
            for partition in meta.partitions([topic])[topic]:
                end = meta.bounds(topic, partition)[1]
                found[partition] = (min(meta.offset_for_time(topic, partition, since_ms), end),
                                    end)
            return found
        finally:
            meta.close()

    return read
