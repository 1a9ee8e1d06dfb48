"""What Kafka's own tools see of a job: its committed offsets in a consumer group (opt-in per
source) and, read from the broker, how many records each partition holds past them.

Spark keeps a query's Kafka positions in its checkpoint only, so ``kafka-consumer-groups.sh``
and the lag dashboards built on consumer groups know nothing of a Structured Streaming job.
``GroupCommitter`` commits each committed batch's end offsets (from Spark's progress of that
batch, which is reported after the commit) to the group a job names, in its code
(``ctx.commit_offsets_to_group``) or as a setting (``--conf
spark.sparkpoint.consumerGroup.<source>=<group>``, recorded with the job's conf like any
other, so given once). Before the query starts it also commits where the run begins (the
last committed batch's offsets): a startpoint or a rollback moves the group with the job,
at once, not only when the next batch commits. Nothing reads them back: positions stay in
the checkpoint.
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
# A job's setting naming the consumer group of one of its Kafka sources:
# ``spark.sparkpoint.consumerGroup.<source>=<group>`` (``spark.``: spark-submit and Spark's
# spark-defaults.conf keep only such keys).
GROUP_SETTING_PREFIX = "spark.sparkpoint.consumerGroup."


def groups_of_settings(conf: Mapping[str, str]) -> dict[str, str]:
    """The consumer group of each source a job's settings name (source -> group)."""
    return {key[len(GROUP_SETTING_PREFIX):]: value for key, value in conf.items()
            if key.startswith(GROUP_SETTING_PREFIX)}


def settings_problem(in_code: Mapping[str, str], settings: Mapping[str, str]) -> str | None:
    """Why the groups of a job's settings cannot be taken with those of its code."""
    for source, group in settings.items():
        if not source:
            return (f"setting {GROUP_SETTING_PREFIX}: expected a source name after the "
                    f"prefix ({GROUP_SETTING_PREFIX}<source>=<group>), found none")
        if not group.strip():
            return (f"setting {GROUP_SETTING_PREFIX}{source}: expected a consumer group id, "
                    "found an empty value; give one, or leave the setting out")
        if source in in_code and in_code[source] != group:
            return (f"source '{source}': its code commits offsets to consumer group "
                    f"'{in_code[source]}' and setting {GROUP_SETTING_PREFIX}{source} names "
                    f"'{group}'; keep one of them")
    return None


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
        """A batch committed: its end offsets (Spark's progress of it) to the groups."""
        reported = progress.get("sources") or []
        self._commit_each([(index, reported[index].get("endOffset"))
                           for index, _source, _group in self.targets
                           if index < len(reported)], "the progress of")

    def commit_start(self, offsets: Sequence[str | None]) -> None:
        """Before the query starts: where it resumes (the last committed batch's offsets
        entry, a line per source in plan order) to the groups, so that a startpoint or a
        rollback moves them with the job. A source with no offset yet commits nothing."""
        self._commit_each([(index, offsets[index]) for index, _source, _group in self.targets
                           if index < len(offsets) and offsets[index] is not None],
                          "the checkpoint's offsets of")

    def _commit_each(self, ends: Sequence[tuple[int, Any]], where: str) -> None:
        sources = {index: (source, group) for index, source, group in self.targets}
        for index, value in ends:
            source, group = sources[index]
            try:
                end = _as_offsets(value)
                subscription = Subscription.of(source.options)
                if subscription is not None and not all(
                        subscription.covers(topic) for topic in end):
                    raise KafkaSourceError(f"{where} source {index} names topics "
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


def groups_problem(sources: Sequence[Any], groups: Mapping[str, str],
                   settings: Mapping[str, str] | None = None) -> str | None:
    """Why the job's ``commit_offsets_to_group`` calls (``groups``) or its consumer-group
    settings (``settings``) cannot be served, else None."""
    kinds = {source.name: source.kind for source in sources}
    named = [(name, "commit_offsets_to_group names") for name in groups] + [
        (name, f"setting {GROUP_SETTING_PREFIX}{name} names") for name in settings or {}]
    for name, what in named:
        if name not in kinds:
            return (f"{what} source '{name}', which the query does not have (its sources: "
                    f"{', '.join(kinds) or 'none'}); name it with .name() on readStream")
        if kinds[name] not in KAFKA_KINDS:
            return (f"{what} source '{name}', a '{kinds[name]}' source; expected a Kafka "
                    "source (format kafka or sparkpoint-kafka)")
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
