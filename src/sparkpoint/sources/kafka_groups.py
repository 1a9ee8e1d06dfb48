"""What Kafka's own tools see of a job: its committed offsets in a consumer group (opt-in per
source) and, read from the broker, how many records each partition holds past them.

Spark keeps a query's Kafka positions in its checkpoint only, so ``kafka-consumer-groups.sh``
and the lag dashboards built on consumer groups know nothing of a Structured Streaming job.
``GroupCommitter`` commits each committed batch's end offsets (from Spark's progress of that
batch, which is reported after the commit) to the group a job names with
``ctx.commit_offsets_to_group``. Nothing reads them back: positions stay in the checkpoint.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sparkpoint.sources.kafka import (
    KAFKA_KINDS,
    KafkaMetadata,
    KafkaSourceError,
    Offsets,
    Subscription,
    parse_offsets,
)

log = logging.getLogger(__name__)

# Seconds a read-only view waits for the broker before it reports the lag as unknown.
LAG_TIMEOUT_S = 5.0


class GroupCommitter:
    """Commits the end offsets of each batch that ran to the consumer groups a job named."""

    def __init__(self, sources: Sequence[Any], groups: Mapping[str, str],
                 echo: Callable[[str], None]) -> None:
        # Spark's progress lists a query's sources in plan order, as the job's sources are.
        self.targets: list[tuple[int, Any, str]] = [
            (index, source, groups[source.name]) for index, source in enumerate(sources)
            if source.name in groups]
        self.echo = echo
        self.warned: set[str] = set()
        self._consumers: dict[str, Any] = {}

    def commit(self, progress: Mapping[str, Any]) -> None:
        reported = progress.get("sources") or []
        for index, source, group in self.targets:
            if index >= len(reported):
                continue
            try:
                end = _as_offsets(reported[index].get("endOffset"))
                subscription = Subscription.of(source.options)
                if subscription is not None and not all(
                        subscription.covers(topic) for topic in end):
                    raise KafkaSourceError(f"the progress of source {index} names topics "
                                           f"{sorted(end)}, not those '{source.name}' reads")
                self._commit(source, group, end)
            except Exception as exc:  # watching must never stop the job
                if group not in self.warned:
                    self.warned.add(group)
                    self.echo(f"source '{source.name}': could not commit offsets to consumer "
                              f"group '{group}' ({exc}); the job goes on, the group's lag "
                              "is stale")
                log.warning("committing offsets to group %s failed", group, exc_info=True)

    def _commit(self, source: Any, group: str, end: Offsets) -> None:
        from confluent_kafka import Consumer, TopicPartition

        consumer = self._consumers.get(group)
        if consumer is None:
            # A consumer that never joins the group: a "simple" commit, as the group's
            # offsets tools expect from a consumer that assigns its own partitions.
            consumer = Consumer({"bootstrap.servers": source.options["kafka.bootstrap.servers"],
                                 "group.id": group, "enable.auto.commit": False})
            self._consumers[group] = consumer
        offsets = [TopicPartition(topic, int(part), offset)
                   for topic, parts in end.items() for part, offset in parts.items()]
        if offsets:
            consumer.commit(offsets=offsets, asynchronous=False)

    def close(self) -> None:
        for consumer in self._consumers.values():
            consumer.close()
        self._consumers.clear()


def _as_offsets(value: Any) -> Offsets:
    if isinstance(value, dict):
        value = json.dumps(value)
    return parse_offsets(str(value), "the batch's end offset")


def groups_problem(sources: Sequence[Any], groups: Mapping[str, str]) -> str | None:
    """Why the job's ``commit_offsets_to_group`` calls cannot be served, else None."""
    kinds = {source.name: source.kind for source in sources}
    for name in groups:
        if name not in kinds:
            return (f"commit_offsets_to_group names source '{name}', which the query does not "
                    f"have (its sources: {', '.join(kinds) or 'none'}); name it with "
                    ".name() on readStream")
        if kinds[name] not in KAFKA_KINDS:
            return (f"commit_offsets_to_group names source '{name}', a '{kinds[name]}' source; "
                    "expected a Kafka source (format kafka or sparkpoint-kafka)")
    return None


@dataclass(frozen=True)
class KafkaLag:
    """How far behind a Kafka source a job is, measured now."""

    # Per partition ("topic-partition"): records the broker holds past the committed batch.
    records: dict[str, int]
    # Now minus the timestamp of the oldest record not read yet (the first one past the
    # committed batch, over the partitions that have one); 0.0 when nothing is behind;
    # None when the broker did not send a record behind in time.
    seconds: float | None


def kafka_lag(source: Any, committed: str | None, timeout: float = LAG_TIMEOUT_S,
              now: Callable[[], float] = time.time) -> KafkaLag | None:
    """The records the broker holds past the committed batch's end offsets (a partition the
    batch did not know yet: all it holds) and how old the oldest of them is; None when the
    broker cannot say within ``timeout`` or the source names no subscription."""
    bootstrap = source.options.get("kafka.bootstrap.servers")
    subscription = Subscription.of(source.options)
    if not bootstrap or subscription is None:
        return None
    try:
        done = parse_offsets(committed, "committed offsets") if committed else {}
        meta = KafkaMetadata(bootstrap, timeout=timeout)
        try:
            marks = meta.watermarks(subscription.partitions(meta))
            behind, first_unread = {}, {}
            for topic, parts in marks.items():
                for part, (low, high) in parts.items():
                    at = max(done.get(topic, {}).get(part, low), low)
                    behind[f"{topic}-{part}"] = max(0, high - at)
                    if high > at:
                        first_unread[(topic, int(part))] = at
            stamps = meta.timestamps_at(first_unread)
        finally:
            meta.close()
    except Exception:  # a view reports what it can: an unreachable broker is unknown lag
        log.debug("reading the lag of %s failed", source.name, exc_info=True)
        return None
    if not first_unread:
        return KafkaLag(behind, 0.0)
    if len(stamps) < len(first_unread):
        return KafkaLag(behind, None)
    # A record stamped in the future (a producer's clock ahead) is no time behind.
    return KafkaLag(behind, round(max(0.0, now() - min(stamps.values()) / 1000), 3))
