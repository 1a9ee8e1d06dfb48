"""A rollback into Spark's Kafka sink (``format("kafka")``) on the real broker: a start from
a snapshot of batch 1 of a job that went on to batch 3 in the same output topic says, before
Spark starts, that batches 2.. are written again (the sink is at least once; a topic cannot
be rewound) and names per partition the offsets of the records the old run wrote for them.
The ranges are checked against the output topic read with a plain consumer (each output
record's key names the input record it came from), and the continued job's output against
rows computed from the input.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from sparkpoint import api
from sparkpoint.checkpoint.layout import Checkpoint
from sparkpoint.cli.render import plan_text
from sparkpoint.errors import TopicNotRewindableError
from sparkpoint.storage.home import Home
from tests.conftest import REPO, kafka_connector_jars
from tests.support.cli import sparkpoint
from tests.support.kafka import TIMEOUT_S, KafkaBroker

pytestmark = pytest.mark.spark
JOB = REPO / "tests" / "data" / "jobs" / "kafka_to_kafka.py"
PARTITIONS = 2
SNAPSHOT_BATCH = 1

# (partition, offset, key, value) of one record of a topic
Record = tuple[int, int, str, str]


def _produce(broker: KafkaBroker, topic: str, count: int) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(count):
        producer.produce(topic, value=f"v{i}".encode(), partition=i % PARTITIONS)
    assert producer.flush(TIMEOUT_S) == 0


def _read(broker: KafkaBroker, topic: str) -> list[Record]:
    """Every record of ``topic``, read with a plain consumer to each partition's end."""
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "tests",
                         "enable.auto.commit": False, "enable.partition.eof": True})
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
        records: list[Record] = []
        ended: set[int] = set()
        while len(ended) < PARTITIONS:
            message = consumer.poll(TIMEOUT_S)
            assert message is not None, f"no record from {topic} within {TIMEOUT_S}s"
            error = message.error()
            if error is not None:
                assert error.code() == KafkaError._PARTITION_EOF, error
                ended.add(message.partition())
                continue
            records.append((message.partition(), message.offset(),
                            message.key().decode(), message.value().decode()))
        return records
    finally:
        consumer.close()


def _input_of(record: Record) -> tuple[int, int]:
    """The input record (partition, offset) an output record came from (its key)."""
    partition, offset = record[2].split(":")
    return int(partition), int(offset)


def test_a_rollback_into_a_kafka_topic_names_the_abandoned_records_and_writes_again(
    spark: Any, home: Home, tmp_path: Path, kafka_broker: KafkaBroker
) -> None:
    source = kafka_broker.new_topic("rollback-in", PARTITIONS)
    out = kafka_broker.new_topic("rollback-out", PARTITIONS)
    _produce(kafka_broker, source, 16)  # 8 per partition: batches 0..3 of 4 offsets
    params = {"bootstrap": kafka_broker.bootstrap, "topic": source, "out_topic": out}
    ran = api.run(home, JOB, "v1", params=params, until_caught_up=True, spark=spark)
    assert ran.last_batch == 3
    api.snapshot_create(home, "v1", "old", batch=SNAPSHOT_BATCH)

    # Independently of the offsets log's times: the input offsets batch 1 had read, and so
    # the output records v1 wrote after the snapshot (their keys name their input).
    v1 = Checkpoint(home.checkpoint_dir("v1"))
    read_by_snapshot = json.loads(v1.offsets(SNAPSHOT_BATCH).source_offsets()["events"] or "")
    resumed_at = {int(p): o for p, o in read_by_snapshot[source].items()}
    written = _read(kafka_broker, out)
    abandoned = [r for r in written if _input_of(r)[1] >= resumed_at[_input_of(r)[0]]]
    assert abandoned and len(abandoned) < len(written)
    expected_ranges = {}
    for p in range(PARTITIONS):
        offsets = sorted(r[1] for r in abandoned if r[0] == p)
        # The abandoned records are each partition's tail: nothing of batch <= 1 among them.
        assert offsets == list(range(offsets[0], offsets[-1] + 1))
        assert offsets[-1] == max(r[1] for r in written if r[0] == p)
        expected_ranges[p] = (offsets[0], offsets[-1] + 1)
    named = ", ".join(f"{out}-{p} [{a}, {b})" for p, (a, b) in expected_ranges.items())
    v2_params = [arg for k, v in params.items() for arg in ("--param", f"{k}={v}")]

    # plan: the warning and the ranges, in text and JSON.
    plan = api.plan(home, JOB, params=params, from_snapshot="old", spark=spark)
    [replay] = plan.kafka_replays
    assert {r.partition: (r.start, r.end) for r in replay.ranges or []} == expected_ranges
    assert (replay.snapshot_job, replay.snapshot_batch, replay.last_batch) == ("v1", 1, 3)
    text = plan_text(plan)
    assert "Spark's Kafka sink is at least once" in text and named in text, text
    assert plan.to_dict()["kafka_replays"][0]["ranges"] == [
        {"partition": p, "start": a, "end": b} for p, (a, b) in expected_ranges.items()]
    assert plan.ok

    # --rewind-output: refused in one line, before anything is created or written.
    with pytest.raises(TopicNotRewindableError) as refused:
        api.run(home, JOB, "v2", params=params, from_snapshot="old", rewind_output=True,
                until_caught_up=True, spark=spark)
    assert "\n" not in refused.value.message and "a topic cannot be rewound" in \
        refused.value.message
    assert not home.job_dir("v2").exists()
    assert _read(kafka_broker, out) == written

    # The start: the warning on stderr, before Spark's first batch; then batches 2..3 again.
    started = sparkpoint(home, "run", str(JOB), "--job", "v2", "--from-snapshot", "old",
                         *v2_params, "--until-caught-up",
                         "--conf", f"spark.jars={kafka_connector_jars()}")
    assert started.code == 0, started.err
    warning = next(line for line in started.err.splitlines() if "rollback into" in line)
    assert warning.startswith("warning: rollback into Kafka topic"), warning
    assert "batches 2..3" in warning and named in warning, warning
    assert started.err.index(warning) < started.err.index("starting at batch 2")
    lineage = api.job_view(home, "v2").record.lineage
    assert [r.ranges for r in lineage.kafka_replays] == [replay.ranges]
    shown = sparkpoint(home, "jobs", "show", "v2")
    assert f"replayed  {replay.message()}" in shown.out, shown.out

    # From each range's start: the abandoned records, then the replayed batches' records
    # once more (at least once), as a multiset of the rows computed from the input.
    after = [r for r in _read(kafka_broker, out) if r[1] >= expected_ranges[r[0]][0]]
    inputs = [(p, o) for p in range(PARTITIONS) for o in range(resumed_at[p], 8)]
    rows = Counter((f"{p}:{o}", f"v{o * PARTITIONS + p}!") for p, o in inputs)
    assert Counter((r[2], r[3]) for r in after) == rows + rows
    rewritten = [r for r in after if r[1] >= expected_ranges[r[0]][1]]
    assert Counter((r[2], r[3]) for r in rewritten) == rows
