"""A Kafka streaming source on PySpark's Python Data Source API, over confluent-kafka.

Spark's own Kafka connector is a separate jar; this source gives the same columns (key,
value, topic, partition, offset, timestamp, timestampType), the same offset JSON in the
checkpoint (``{"topic":{"0":42}}``: the next offset to read per partition) and the options
``kafka.bootstrap.servers``, ``subscribe``, ``startingOffsets``, ``startingTimestamp`` and
``maxOffsetsPerTrigger``, so startpoints resolve the same way for both sources.

    spark.readStream.format("sparkpoint-kafka")
         .option("kafka.bootstrap.servers", "127.0.0.1:9092").option("subscribe", "clicks")
"""

from __future__ import annotations

import datetime as dt
import json
import re
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

FORMAT = "sparkpoint-kafka"
SCHEMA = ("key binary, value binary, topic string, partition int, offset long, "
          "timestamp timestamp, timestampType int")
KAFKA_KINDS = (FORMAT, "kafka")
TIMEOUT_S = 30.0
EARLIEST = -2  # Spark's Kafka offset JSON: the partition's earliest offset

# {topic: {partition (as a string, as Spark writes it): next offset to read}}
Offsets = dict[str, dict[str, int]]


class KafkaSourceError(ValueError):
    """A Kafka position or option the source cannot take."""


# How a Kafka source names what it reads (Spark's connector takes exactly one of them;
# sparkpoint's own source takes subscribe).
SUBSCRIPTION_OPTIONS = ("subscribe", "subscribePattern", "assign")


@dataclass(frozen=True)
class Subscription:
    """The partitions a Kafka source reads, as its options name them: a list of topics
    (``subscribe``), a Java regular expression over the broker's topics
    (``subscribePattern``) or fixed partitions (``assign``: ``{"topic":[0,1]}``)."""

    option: str
    value: str

    @classmethod
    def of(cls, options: Mapping[str, str]) -> Subscription | None:
        given = [(key, options[key]) for key in SUBSCRIPTION_OPTIONS if options.get(key)]
        return cls(*given[0]) if len(given) == 1 else None

    def partitions(self, meta: KafkaMetadata) -> dict[str, list[int]]:
        if self.option == "subscribe":
            return meta.partitions([t.strip() for t in self.value.split(",") if t.strip()])
        if self.option == "subscribePattern":
            # Spark's connector matches the whole name (Java's Pattern.matcher().matches());
            # the patterns people write mean the same in Python's re.
            pattern = re.compile(self.value)
            topics = sorted(t for t in meta.topics() if pattern.fullmatch(t))
            return meta.partitions(topics) if topics else {}
        assigned = _assignment(self.value)
        held = meta.partitions(sorted(assigned))
        for topic, wanted in assigned.items():
            missing = sorted(set(wanted) - set(held[topic]))
            if missing:
                raise KafkaSourceError(f"assign names {topic} partitions "
                                       f"{','.join(map(str, missing))}, which the broker "
                                       "does not have")
        return {topic: sorted(wanted) for topic, wanted in assigned.items()}


    def covers(self, topic: str) -> bool:
        """Whether ``topic`` is one the subscription reads (asking no broker)."""
        if self.option == "subscribe":
            return topic in {t.strip() for t in self.value.split(",")}
        if self.option == "subscribePattern":
            return re.fullmatch(self.value, topic) is not None
        return topic in _assignment(self.value)


def _assignment(text: str) -> dict[str, list[int]]:
    try:
        parsed = json.loads(text)
    except json.JSONDecodeError:
        parsed = None
    if not isinstance(parsed, dict) or not all(
            isinstance(parts, list) and all(isinstance(p, int) for p in parts)
            for parts in parsed.values()):
        raise KafkaSourceError(f'option assign: expected JSON such as {{"topic":[0,1]}}, '
                               f"found {text!r}")
    return {str(topic): [int(p) for p in parts] for topic, parts in parsed.items()}


def _client_conf(bootstrap: str) -> dict[str, Any]:
    return {"bootstrap.servers": bootstrap, "group.id": "sparkpoint-offsets",
            "enable.auto.commit": False, "socket.timeout.ms": int(TIMEOUT_S * 1000)}


class KafkaMetadata:
    """Partitions and their offsets, as the broker reports them."""

    def __init__(self, bootstrap: str, timeout: float = TIMEOUT_S, quiet: bool = False) -> None:
        from confluent_kafka import Consumer

        self.timeout = timeout
        self._bootstrap = bootstrap
        # quiet: librdkafka's own log lines (a refused connection, every 50 ms) stay off
        # stderr; the caller says what failed in its own words.
        self._consumer = Consumer({**_client_conf(bootstrap),
                                   "socket.timeout.ms": int(timeout * 1000),
                                   **({"log_level": 0} if quiet else {})})

    def close(self) -> None:
        self._consumer.close()

    def topics(self) -> list[str]:
        """The broker's topics, without its internal ones (as a pattern subscription sees)."""
        listed = self._consumer.list_topics(timeout=self.timeout).topics
        return sorted(t for t in listed if not t.startswith("__"))

    def partitions(self, topics: Sequence[str]) -> dict[str, list[int]]:
        found = {}
        for topic in topics:
            metadata = self._consumer.list_topics(topic, timeout=self.timeout).topics.get(topic)
            if metadata is None or metadata.error is not None or not metadata.partitions:
                raise KafkaSourceError(f"topic '{topic}' does not exist on the broker")
            found[topic] = sorted(metadata.partitions)
        return found

    def bounds(self, topic: str, partition: int) -> tuple[int, int]:
        """(earliest, latest) offsets: latest is the offset the next record will get."""
        from confluent_kafka import TopicPartition

        low, high = self._consumer.get_watermark_offsets(
            TopicPartition(topic, partition), timeout=self.timeout)
        return int(low), int(high)

    def offset_for_time(self, topic: str, partition: int, timestamp_ms: int) -> int:
        """The first offset whose record timestamp is >= ``timestamp_ms`` (latest if none)."""
        from confluent_kafka import TopicPartition

        [found] = self._consumer.offsets_for_times(
            [TopicPartition(topic, partition, timestamp_ms)], timeout=self.timeout)
        if found.offset < 0:  # no such record yet: start at the end
            return self.bounds(topic, partition)[1]
        return int(found.offset)

    def timestamps_at(self, positions: Mapping[tuple[str, int], int]) -> dict[tuple[str, int], int]:
        """The timestamp (ms) of the record at each (topic, partition)'s offset, read from the
        broker (one fetch of all the partitions); a partition that sends nothing within the
        timeout, or a record without a timestamp, is left out."""
        from confluent_kafka import TIMESTAMP_NOT_AVAILABLE, TopicPartition

        if not positions:
            return {}
        found: dict[tuple[str, int], int] = {}
        self._consumer.assign([TopicPartition(t, p, o) for (t, p), o in positions.items()])
        deadline = time.monotonic() + self.timeout
        try:
            while len(found) < len(positions) and (left := deadline - time.monotonic()) > 0:
                message = self._consumer.poll(min(left, 1.0))
                if message is None or message.error() is not None:
                    continue
                topic, partition = message.topic(), message.partition()
                if topic is None or partition is None:
                    continue
                key = (topic, partition)
                if key not in positions or key in found:
                    continue
                kind, stamp = message.timestamp()
                if kind != TIMESTAMP_NOT_AVAILABLE:
                    found[key] = int(stamp)
                # One record per partition is all that is asked: the others are not fetched.
                self._consumer.pause([TopicPartition(topic, partition)])
        finally:
            self._consumer.unassign()
        return found

    def group_offsets(self, group: str, partitions: dict[str, list[int]]
                      ) -> dict[tuple[str, int], int]:
        """The offsets consumer group ``group`` committed for the partitions (the next
        record its application would read); a partition it committed nothing for is left
        out. Read with the group's id without joining it: the group's members, if any run,
        are not disturbed."""
        from confluent_kafka import Consumer, TopicPartition

        reader = Consumer({**_client_conf(self._bootstrap), "group.id": group})
        try:
            found = reader.committed([TopicPartition(topic, number)
                                      for topic, numbers in partitions.items()
                                      for number in numbers], timeout=self.timeout)
        finally:
            reader.close()
        return {(entry.topic, entry.partition): int(entry.offset) for entry in found
                if entry.error is None and entry.offset >= 0}

    def watermarks(self, partitions: dict[str, list[int]]) -> dict[str, dict[str, tuple[int, int]]]:
        """(earliest, latest) of every partition, one broker request each."""
        return {t: {str(p): self.bounds(t, p) for p in ps} for t, ps in partitions.items()}

    def earliest(self, partitions: dict[str, list[int]]) -> Offsets:
        return _side(self.watermarks(partitions), 0)

    def latest(self, partitions: dict[str, list[int]]) -> Offsets:
        return _side(self.watermarks(partitions), 1)

    def offsets_at(self, partitions: dict[str, list[int]], timestamp_ms: int) -> Offsets:
        """Per partition, the first offset at or after ``timestamp_ms``."""
        return {t: {str(p): self.offset_for_time(t, p, timestamp_ms) for p in ps}
                for t, ps in partitions.items()}


def _side(marks: dict[str, dict[str, tuple[int, int]]], index: int) -> Offsets:
    return {t: {p: bounds[index] for p, bounds in parts.items()} for t, parts in marks.items()}


def parse_offsets(text: str, where: str) -> Offsets:
    """Spark's Kafka offset JSON: ``{"topic":{"0":42}}`` (-2 earliest, -1 latest)."""
    try:
        parsed = json.loads(text)
    except json.JSONDecodeError as exc:
        raise KafkaSourceError(f"{where}: expected offset JSON such as "
                               f'{{"topic":{{"0":42}}}}, found {text!r}') from exc
    if not isinstance(parsed, dict) or not all(
        isinstance(parts, dict) and all(str(p).isdigit() and isinstance(o, int)
                                        for p, o in parts.items())
        for parts in parsed.values()
    ):
        raise KafkaSourceError(f"{where}: expected {{topic: {{partition: offset}}}} with "
                               f"integer offsets, found {text!r}")
    return {t: {str(p): int(o) for p, o in parts.items()} for t, parts in parsed.items()}


@dataclass(frozen=True)
class KafkaRange(InputPartition):
    topic: str
    partition: int
    start: int
    end: int


class KafkaStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, options: Mapping[str, str]) -> None:
        # Spark hands options over case-insensitively: keep the mapping it gives.
        self.bootstrap = options.get("kafka.bootstrap.servers", "")
        self.topics = [t.strip() for t in options.get("subscribe", "").split(",") if t.strip()]
        if not self.bootstrap or not self.topics:
            raise KafkaSourceError(
                f"the {FORMAT} source needs the options kafka.bootstrap.servers and subscribe")
        self.starting = options.get("startingOffsets", "latest")
        self.starting_timestamp = options.get("startingTimestamp")
        limit = options.get("maxOffsetsPerTrigger")
        self.max_offsets = int(limit) if limit else None
        self.available_now_end: Offsets | None = None

    def _metadata(self) -> KafkaMetadata:
        return KafkaMetadata(self.bootstrap)

    def initialOffset(self) -> Offsets:
        meta = self._metadata()
        try:
            partitions = meta.partitions(self.topics)
            if self.starting_timestamp is not None:
                return meta.offsets_at(partitions, int(self.starting_timestamp))
            if self.starting == "earliest":
                return meta.earliest(partitions)
            if self.starting == "latest":
                return meta.latest(partitions)
            given = parse_offsets(self.starting, "option startingOffsets")
            marks = meta.watermarks(partitions)
            earliest, latest = _side(marks, 0), _side(marks, 1)
            start = _side(marks, 1)
            for topic, parts in given.items():
                for part, offset in parts.items():
                    if topic not in start or part not in start[topic]:
                        raise KafkaSourceError(f"startingOffsets names {topic}-{part}, which the "
                                               "subscribed topics do not have")
                    start[topic][part] = (earliest[topic][part] if offset == -2 else
                                          latest[topic][part] if offset == -1 else offset)
            return start
        finally:
            meta.close()

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadMaxRows(self.max_offsets) if self.max_offsets else ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        meta = self._metadata()
        try:
            self.available_now_end = meta.latest(meta.partitions(self.topics))
        finally:
            meta.close()

    def latestOffset(self, start: Offsets, limit: ReadLimit) -> Offsets:
        meta = self._metadata()
        try:
            marks = meta.watermarks(meta.partitions(self.topics))
        finally:
            meta.close()
        end = self.available_now_end or _side(marks, 1)
        # Partitions that appeared since the start begin at their earliest record.
        begin = {t: {p: start.get(t, {}).get(p, marks[t][p][0]) for p in ps}
                 for t, ps in end.items()}
        end = {t: {p: max(begin[t][p], o) for p, o in ps.items()} for t, ps in end.items()}
        if isinstance(limit, ReadMaxRows):
            end = _rate_limited(begin, end, int(limit.max_rows or 0))
        return end

    def partitions(self, start: Offsets, end: Offsets) -> Sequence[KafkaRange]:
        ranges = []
        for topic, parts in end.items():
            for part, stop in parts.items():
                # A partition the start does not know appeared since: from its earliest.
                first = start.get(topic, {}).get(part, EARLIEST)
                if stop > max(first, 0):
                    ranges.append(KafkaRange(topic, int(part), first, stop))
        return ranges

    def read(self, partition: InputPartition) -> Iterator[tuple[Any, ...]]:
        assert isinstance(partition, KafkaRange)
        from confluent_kafka import Consumer, KafkaError, TopicPartition

        # Never jump elsewhere silently when the start is gone (librdkafka's default goes to
        # the end): records that cannot be read are an error, as with Spark's connector.
        consumer = Consumer({**_client_conf(self.bootstrap), "enable.partition.eof": True,
                             "auto.offset.reset": "error"})
        try:
            low, _ = consumer.get_watermark_offsets(
                TopicPartition(partition.topic, partition.partition), timeout=TIMEOUT_S)
            begin = int(low) if partition.start == EARLIEST else partition.start
            if begin < low:
                raise KafkaSourceError(_deleted_message(partition, int(low)))
            consumer.assign([TopicPartition(partition.topic, partition.partition, begin)])
            while True:
                message = consumer.poll(TIMEOUT_S)
                if message is None:
                    raise KafkaSourceError(
                        f"no record from {partition.topic}-{partition.partition} within "
                        f"{TIMEOUT_S:.0f}s while reading offsets {partition.start}.."
                        f"{partition.end - 1}")
                error = message.error()
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF:
                        break
                    raise KafkaSourceError(str(error))
                offset = message.offset() or 0
                if offset >= partition.end:
                    break
                kind, millis = message.timestamp()
                yield (message.key(), message.value(), message.topic(), message.partition(),
                       offset, dt.datetime.fromtimestamp(millis / 1000, dt.UTC),
                       max(kind - 1, -1))  # Spark: 0 create time, 1 log append time
                if offset >= partition.end - 1:
                    break
        finally:
            consumer.close()

    def commit(self, end: Offsets) -> None:
        pass  # offsets live in Spark's checkpoint, not in a consumer group


def _deleted_message(partition: KafkaRange, low: int) -> str:
    last = min(partition.end, low) - 1
    return (f"offsets {partition.start}..{last} of {partition.topic}-{partition.partition} "
            f"are no longer on the broker (its earliest offset is {low}: deleted, e.g. by the "
            "topic's retention) and cannot be read; to go on from the earliest record held, "
            "set a startpoint: sparkpoint startpoint set JOB SOURCE --earliest --partition "
            f"{partition.topic}:{partition.partition}")


def _rate_limited(begin: Offsets, end: Offsets, max_rows: int) -> Offsets:
    """Spread ``max_rows`` over partitions in proportion to what each has available."""
    available = {(t, p): end[t][p] - begin[t][p] for t in end for p in end[t]}
    total = sum(available.values())
    if total <= max_rows:
        return end
    limited = {t: dict(parts) for t, parts in begin.items()}
    granted = 0
    for (topic, part), count in sorted(available.items()):
        share = count * max_rows // total
        limited[topic][part] += share
        granted += share
    for (topic, part), count in sorted(available.items()):
        if granted >= max_rows:
            break
        if limited[topic][part] - begin[topic][part] < count:
            limited[topic][part] += 1
            granted += 1
    return limited


class KafkaDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return FORMAT

    def schema(self) -> str:
        return SCHEMA

    def streamReader(self, schema: Any) -> KafkaStreamReader:
        return KafkaStreamReader(self.options)
