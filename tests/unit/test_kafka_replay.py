"""A rollback into Spark's Kafka sink, without Spark or a broker: which starts are one
(upgrade/kafka_rollback.py), what the warning says (sinks/kafka_replay.py), and the refusal
of --rewind-output (upgrade/batches.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sparkpoint.errors import TopicNotRewindableError
from sparkpoint.runtime.registry import JobRecord, JobRegistry, KafkaOutputRecord
from sparkpoint.sinks.kafka_replay import KafkaReplay, name_ranges
from sparkpoint.spark.sink import KafkaOutput
from sparkpoint.storage.home import Home
from sparkpoint.upgrade.batches import BatchChoice, SinkInfo, number_batches
from sparkpoint.upgrade.kafka_rollback import kafka_replays

BATCH_MS = {0: 1_000, 1: 2_000, 2: 3_000, 3: 4_000}


def _replay(**changes: object) -> KafkaReplay:
    fields: dict[str, object] = {"topic": "out", "bootstrap": "b:9092", "snapshot_job": "v1",
                                 "snapshot_batch": 1, "last_batch": 3, "since_ms": 3_000}
    return KafkaReplay.model_validate({**fields, **changes})


def test_ranges_are_named_per_partition_holding_abandoned_records() -> None:
    asked: list[tuple[str, int]] = []

    def read(topic: str, since_ms: int) -> dict[int, tuple[int, int]]:
        asked.append((topic, since_ms))
        return {1: (7, 9), 0: (4, 8), 2: (5, 5)}

    replay = name_ranges(_replay(), read)
    assert asked == [("out", 3_000)]
    assert [(r.partition, r.start, r.end) for r in replay.ranges or []] == \
        [(0, 4, 8), (1, 7, 9), (2, 5, 5)]
    message = replay.message()
    assert "\n" not in message
    assert "job 'v1' already wrote batches 2..3" in message
    assert "Spark's Kafka sink is at least once" in message
    assert "batches 2.. are written again" in message
    assert message.endswith("out-0 [4, 8), out-1 [7, 9)")  # partition 2: none abandoned
    assert "by write time" in message
    assert replay.to_dict()["ranges"][0] == {"partition": 0, "start": 4, "end": 8}


def test_a_topic_holding_no_abandoned_record_says_so() -> None:
    replay = name_ranges(_replay(), lambda topic, since: {0: (3, 3)})
    assert "holds no record written at or after batch 2 began" in replay.message()


def test_a_topic_column_names_no_ranges_and_asks_no_broker() -> None:
    def read(topic: str, since_ms: int) -> dict[int, tuple[int, int]]:
        raise AssertionError("no broker is asked")

    replay = name_ranges(_replay(topic=None), read)
    assert replay.ranges is None
    assert "each row's topic column chooses the topic" in replay.message()
    assert "batches 2.. are written again" in replay.message()


def test_a_purged_offsets_entry_names_no_ranges() -> None:
    replay = name_ranges(_replay(since_ms=None), lambda topic, since: {})
    assert "no longer holds the offsets log entry of batch 2" in replay.message()


def test_a_broker_that_does_not_answer_is_named_with_the_topic() -> None:
    def read(topic: str, since_ms: int) -> dict[int, tuple[int, int]]:
        raise RuntimeError("Failed to get metadata: Local: Broker transport failure")

    message = name_ranges(_replay(), read).message()
    assert ("the ranges of the abandoned records in topic 'out' could not be read: the "
            "broker b:9092 did not answer within 5s (Failed to get metadata") in message
    assert "batches 2.. are written again" in message


def test_a_timestamp_column_is_said_to_change_what_the_ranges_mean() -> None:
    replay = name_ranges(_replay(timestamp_column=True), lambda topic, since: {0: (1, 2)})
    assert "newer connectors write as the records' timestamp" in replay.message()


def _job(home: Home, name: str, written: KafkaOutputRecord | None, batches: range) -> None:
    registry = JobRegistry(home)
    registry.save(JobRecord(name=name, job_file="job.py", kafka_output=written))
    root = Path(str(registry.checkpoint(name).root))
    (root / "offsets").mkdir(parents=True)
    (root / "commits").mkdir()
    (root / "metadata").write_text('{"id":"q"}')
    for batch in batches:
        meta = json.dumps({"batchWatermarkMs": 0, "batchTimestampMs": BATCH_MS[batch]})
        (root / "offsets" / str(batch)).write_text(f"v1\n{meta}\n{{}}")
        (root / "commits" / str(batch)).write_text('v1\n{"nextBatchWatermarkMs":0}')


def _ranges(topic: str, since_ms: int) -> dict[int, tuple[int, int]]:
    return {0: (since_ms, since_ms + 2)}


def test_a_start_behind_the_snapshots_job_in_its_topic_is_a_rollback(tmp_path: Path) -> None:
    home = Home(tmp_path / "home")
    _job(home, "v1", KafkaOutputRecord(bootstrap="b:1,c:2", topic="out"), range(4))
    output = KafkaOutput("c:2, b:1", "out")
    [replay] = kafka_replays(JobRegistry(home), output, {"old": ("v1", 1)}, _ranges)
    assert (replay.snapshot_job, replay.snapshot_batch, replay.last_batch) == ("v1", 1, 3)
    assert replay.since_ms == BATCH_MS[2]  # batch 2 began: the first abandoned batch
    assert replay.ranges is not None and replay.ranges[0].start == BATCH_MS[2]
    # Its latest batch, another topic, other brokers, no Kafka sink: no rollback.
    assert kafka_replays(JobRegistry(home), output, {"new": ("v1", 3)}, _ranges) == []
    assert kafka_replays(JobRegistry(home), KafkaOutput("b:1,c:2", "other"),
                         {"old": ("v1", 1)}, _ranges) == []
    assert kafka_replays(JobRegistry(home), KafkaOutput("d:3", "out"),
                         {"old": ("v1", 1)}, _ranges) == []
    assert kafka_replays(JobRegistry(home), None, {"old": ("v1", 1)}, _ranges) == []
    _job(home, "files", None, range(4))
    assert kafka_replays(JobRegistry(home), output, {"f": ("files", 1)}, _ranges) == []
    # A job the home no longer has: nothing known of what it wrote.
    assert kafka_replays(JobRegistry(home), output, {"gone": ("gone", 1)}, _ranges) == []


def test_a_topic_column_of_either_job_is_a_rollback_with_no_ranges(tmp_path: Path) -> None:
    home = Home(tmp_path / "home")
    _job(home, "v1", KafkaOutputRecord(bootstrap="b:1", topic=None), range(4))
    [replay] = kafka_replays(JobRegistry(home), KafkaOutput("b:1", "out"),
                             {"old": ("v1", 0)}, _ranges)
    assert replay.topic is None and replay.ranges is None
    assert "topic column" in (replay.unnamed or "")


def test_rewind_output_of_a_kafka_sink_is_refused_in_one_line() -> None:
    with pytest.raises(TopicNotRewindableError) as refused:
        number_batches(1, SinkInfo("kafka", None), BatchChoice(rewind=True))
    assert refused.value.exit_code == 2 and refused.value.code == "TOPIC_NOT_REWINDABLE"
    message = refused.value.message
    assert "\n" not in message and "a topic cannot be rewound" in message
    assert message.endswith("nothing was changed")


def test_a_kafka_sink_gets_no_batch_id_warning() -> None:
    """Spark's Kafka sink skips no batch id: the warning for sinks idempotent by batch id
    does not apply (the rollback's own warning does, when it is one)."""
    check = number_batches(1, SinkInfo("kafka", None), BatchChoice())
    assert check.warning is None and check.problem is None
    assert check.numbering.first_batch == 2
    assert number_batches(1, SinkInfo("kafka", None),
                          BatchChoice(first_batch=5)).numbering.first_batch == 5
    assert number_batches(1, SinkInfo("foreachBatch", None), BatchChoice()).warning
