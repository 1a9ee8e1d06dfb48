"""Whether a start from snapshots goes back in a Kafka topic its snapshots' jobs wrote: a
rollback whose replayed batches Spark's Kafka sink writes again (``sinks/kafka_replay.py``
says what that means and reads the abandoned records' offsets from the broker).

A rollback here: the new job writes with Spark's Kafka sink to the topic (on the same
brokers) that a snapshot's job wrote in its latest run, and that job committed batches after
the snapshot's batch. Which topic a job wrote is in its record (``kafka_output``); the time
the abandoned batches began is in its checkpoint's offsets log.
"""

from __future__ import annotations

from collections.abc import Mapping

from sparkpoint.errors import SparkpointError
from sparkpoint.runtime.registry import JobRegistry, KafkaOutputRecord
from sparkpoint.sinks.kafka_replay import KafkaReplay, ReadRanges, broker_ranges, name_ranges
from sparkpoint.spark.sink import KafkaOutput


def _same_topic(written: KafkaOutputRecord, output: KafkaOutput) -> bool:
    """The same topic on the same brokers (a bootstrap list in any order); a topic chosen
    by a column matches any topic on those brokers: which ones the rows chose is unknown."""
    brokers = {b.strip() for b in written.bootstrap.split(",")} == \
        {b.strip() for b in output.bootstrap.split(",")}
    return brokers and (written.topic is None or output.topic is None
                        or written.topic == output.topic)


def kafka_replays(registry: JobRegistry, output: KafkaOutput | None,
                  snapshots: Mapping[str, tuple[str, int]],
                  read: ReadRanges | None = None) -> list[KafkaReplay]:
    """The rollbacks into ``output`` of a start from ``snapshots`` (name -> (job, batch)),
    one per snapshot job that went on past its snapshot's batch in that topic, with the
    abandoned records' offsets read through ``read`` (default: from the broker)."""
    if output is None:
        return []
    replays = []
    for job, batch in sorted(set(snapshots.values())):
        try:
            written = registry.get(job).kafka_output if registry.exists(job) else None
        except SparkpointError:
            continue  # a damaged record: nothing known of what it wrote
        if written is None or not _same_topic(written, output):
            continue
        checkpoint = registry.checkpoint(job)
        last = checkpoint.latest_committed_batch()
        if last is None or last <= batch:
            continue
        try:
            since: int | None = checkpoint.offsets(batch + 1).batch_timestamp_ms
        except SparkpointError:
            since = None  # purged by Spark's retention of the log
        # The abandoned records are where the old job wrote them.
        replay = KafkaReplay(topic=written.topic,
                             bootstrap=output.bootstrap, snapshot_job=job,
                             snapshot_batch=batch, last_batch=last, since_ms=since,
                             timestamp_column=output.timestamp_column)
        replays.append(name_ranges(replay, read or broker_ranges(output.bootstrap)))
    return replays
