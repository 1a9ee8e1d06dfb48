"""Which Kafka offsets a job can no longer read, asked of the broker when Spark's connector
fails on data loss.

Spark's connector names one partition, and for a fetch the broker refuses (the position is
below the partition's log start) the range it names ends where the failing task's share of
the batch ends, not where the broker's records start (``spark/errors.py``): it said
``[100, 200)`` when only ``[100, 150)`` was gone. The exact answer is, per partition, from
the job's position (the last committed batch's end offsets: what the failed batch started
from) to the earliest offset the broker holds now.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sparkpoint.checkpoint.layout import Checkpoint
from sparkpoint.errors import SparkpointError
from sparkpoint.sources.kafka import KAFKA_KINDS, KafkaMetadata, Offsets, parse_offsets

log = logging.getLogger(__name__)

# Seconds the failure's report waits for the broker before it says what Spark said.
BROKER_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class DeletedOffsets:
    """Offsets ``[start, earliest)`` of one partition: the job must read from ``start``, and
    the broker's records start at ``earliest``."""

    source: str
    topic: str
    partition: int
    start: int
    earliest: int

    def describe(self) -> str:
        return (f"[{self.start}, {self.earliest}) of {self.topic}-{self.partition} (the "
                f"broker's earliest offset there is {self.earliest})")


@dataclass(frozen=True)
class SourceLoss:
    """A source's deleted offsets, and whether they are all of its partitions."""

    source: str
    deleted: list[DeletedOffsets]
    every_partition: bool


def deleted_offsets(sources: Sequence[Any], checkpoint: Checkpoint,
                    timeout: float = BROKER_TIMEOUT_S) -> list[SourceLoss] | None:
    """Per Kafka source, the partitions whose committed position the broker no longer holds;
    None when that cannot be told (no committed batch, an offset or broker that does not
    answer), so that the caller says what Spark said instead."""
    try:
        batch = checkpoint.latest_committed_batch()
        if batch is None:
            return None  # batch 0 starts where the source options say, not in the log
        committed = checkpoint.offsets(batch).source_offsets()
    except (SparkpointError, OSError):
        return None
    found = []
    for source in sources:
        if source.kind not in KAFKA_KINDS or not committed.get(source.name):
            continue
        bootstrap = source.options.get("kafka.bootstrap.servers")
        if not bootstrap:
            return None
        try:
            positions = parse_offsets(committed[source.name] or "", "committed offsets")
            deleted = _below_log_start(source.name, bootstrap, positions, timeout)
        except Exception:  # a failure's report says what it can: Spark's own words then
            log.debug("asking the broker for %s's log start failed", source.name,
                      exc_info=True)
            return None
        if deleted:
            count = sum(len(parts) for parts in positions.values())
            found.append(SourceLoss(source.name, deleted, len(deleted) == count))
    return found or None


def _below_log_start(source: str, bootstrap: str, positions: Offsets,
                     timeout: float) -> list[DeletedOffsets]:
    meta = KafkaMetadata(bootstrap, timeout=timeout)
    try:
        deleted = []
        for topic, parts in sorted(positions.items()):
            for part, start in sorted(parts.items(), key=lambda item: int(item[0])):
                earliest, _ = meta.bounds(topic, int(part))
                if start < earliest:
                    deleted.append(DeletedOffsets(source, topic, int(part), start, earliest))
        return deleted
    finally:
        meta.close()


def startpoint_commands(job: str, losses: Sequence[SourceLoss]) -> list[str]:
    """The startpoints that go on from the earliest record held where offsets are gone, and
    only there: a whole-source --earliest would also take back partitions that lost
    nothing."""
    commands = []
    for loss in losses:
        if loss.every_partition:
            commands.append(f"sparkpoint startpoint set {job} {loss.source} --earliest")
            continue
        commands.extend(f"sparkpoint startpoint set {job} {loss.source} --earliest "
                        f"--partition {d.topic}:{d.partition}" for d in loss.deleted)
    return commands
