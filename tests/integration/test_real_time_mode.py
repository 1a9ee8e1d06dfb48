"""Spark 4.3's real-time mode (``trigger(realTime=...)``) on a stateful job, Kafka in and out
through Spark's connector on the real broker: snapshotted while it runs, inspected and pruned
(format v2), started from the pruned snapshot in real-time mode, drained, and continued after
the drain. What real-time mode needs,
measured here: checkpoint format v2 (its default for a new checkpoint: the commit log carries
``stateUniqueIds``), a Kafka source, a slot per Kafka partition plus one per shuffle partition
(so one partition and ``spark.sql.shuffle.partitions=1`` on ``local[2]``). Stopping cancels the
batch in flight; no test here restarts a stopped job's query over it, so every output is
exact."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from sparkpoint.checkpoint.layout import Checkpoint
from sparkpoint.storage.home import Home
from tests.conftest import REPO, kafka_connector_jars
from tests.support.cli import sparkpoint, start, wait_for
from tests.support.kafka import KafkaBroker

pytestmark = pytest.mark.spark
JOB = REPO / "tests" / "data" / "jobs" / "realtime_dedupe.py"
RUN_TIMEOUT_S = 240.0
CHECKPOINT_FORMAT_CONF = "spark.sql.streaming.stateStore.checkpointFormatVersion"

Record = tuple[str, str]


def _produce(broker: KafkaBroker, topic: str, records: list[Record]) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for key, value in records:
        producer.produce(topic, key=key.encode(), value=value.encode())
    assert producer.flush(30) == 0


def _read_topic(broker: KafkaBroker, topic: str) -> Counter[Record]:
    """Every record the topic holds, as (key, value)."""
    from confluent_kafka import Consumer, TopicPartition

    low, high = broker.watermarks(topic, 0)
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "reader",
                         "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition(topic, 0, low)])
        records: list[Record] = []
        while len(records) < high - low:
            message = consumer.poll(30)
            assert message is not None, f"{topic}: {len(records)} of {high - low} records read"
            key, value = message.key(), message.value()
            assert key is not None and value is not None, message
            records.append((key.decode(), value.decode()))
        return Counter(records)
    finally:
        consumer.close()


def _first_of_each_key(records: list[Record], seen: set[str] | None = None) -> Counter[Record]:
    """What dropDuplicates(["key"]) emits, computed here: each key's first record, unless the
    key is in ``seen`` (state the job starts with)."""
    known = set(seen or ())
    first: list[Record] = []
    for key, value in records:
        if key not in known:
            known.add(key)
            first.append((key, value))
    return Counter(first)


def _committed_offset(home: Home, job: str) -> int | None:
    """The offset the job's latest committed batch read up to in partition 0."""
    checkpoint = Checkpoint(home.checkpoint_dir(job))
    batch = checkpoint.latest_committed_batch()
    if batch is None:
        return None
    offsets = json.loads(checkpoint.offsets(batch).source_offsets()["records"] or "{}")
    return int(next(iter(offsets.values()))["0"])


def _run_args(broker: KafkaBroker, topic: str, out_topic: str) -> list[str]:
    return ["--param", f"bootstrap={broker.bootstrap}", "--param", f"topic={topic}",
            "--param", f"out_topic={out_topic}",
            "--conf", "spark.sql.shuffle.partitions=1",
            "--conf", f"spark.jars={kafka_connector_jars()}"]


@contextmanager
def _running(home: Home, job: str, log: Path, *args: str) -> Iterator[Callable[[int], None]]:
    """The job running in its own process while the block runs, stopped by ``jobs stop`` at
    its end; yields a wait for the job to commit the batch that reads up to an offset."""
    process = start(home, "run", str(JOB), "--job", job, *args, log=log)

    def committed(offset: int) -> None:
        wait_for(lambda: _committed_offset(home, job) == offset, RUN_TIMEOUT_S,
                 f"job {job} to commit offset {offset}", log)

    try:
        yield committed
        asked = sparkpoint(home, "jobs", "stop", job)
        assert asked.code == 0, asked.err
        assert process.wait(RUN_TIMEOUT_S) == 0, log.read_text()[-3000:]
    finally:
        if process.poll() is None:
            process.kill()


def _keys_read_by_spark(spark: SparkSession, checkpoint: Path) -> Counter[str]:
    """The dedupe state's keys as Spark's own state reader reads them."""
    frame = spark.read.format("statestore").load(str(checkpoint))
    return Counter(row["key"]["key"] for row in frame.collect())


def test_a_real_time_job_is_snapshotted_running_pruned_started_from_it_and_drained(
    spark: SparkSession, home: Home, tmp_path: Path, kafka_broker: KafkaBroker
) -> None:
    topic = kafka_broker.new_topic("rt-in", 1)
    out_a, out_b = kafka_broker.new_topic("rt-a", 1), kafka_broker.new_topic("rt-b", 1)
    first = [(f"k{i % 20}", f"a{i}") for i in range(40)]
    second = [(f"k{10 + i % 20}", f"b{i}") for i in range(40)]
    third = [(f"k{25 + i % 10}", f"c{i}") for i in range(20)]
    _produce(kafka_broker, topic, first)

    with _running(home, "rt", tmp_path / "rt.log",
                  *_run_args(kafka_broker, topic, out_a)) as committed:
        committed(len(first))
        made = sparkpoint(home, "snapshot", "create", "rt", "s1")
        assert made.code == 0, made.err
        _produce(kafka_broker, topic, second)
        committed(len(first) + len(second))
    # The job ran in real-time mode on format v2: the commit log names the state files.
    checkpoint = Checkpoint(home.checkpoint_dir("rt"))
    assert checkpoint.commit(checkpoint.require_latest_committed_batch()).state_unique_ids
    assert _read_topic(kafka_broker, out_a) == _first_of_each_key(first + second)

    shown = sparkpoint(home, "snapshot", "show", "s1", "--json")
    assert shown.code == 0, shown.err
    assert shown.json()["sources"][0]["offset"] == {topic: {"0": len(first)}}
    assert sparkpoint(home, "snapshot", "verify", "s1").code == 0

    # Pruned and inspected in format v2 (a real-time job refuses any other): five keys of the
    # first records leave the state, so they count as new when the second records bring them.
    forgotten = {f"k{i}" for i in range(10, 15)}
    where = "key IN ({})".format(", ".join(f"'{key}'" for key in sorted(forgotten)))
    pruned = sparkpoint(home, "snapshot", "prune", "s1", "p1", "--operator", "seen_keys",
                        "--where", where, "--json", timeout=RUN_TIMEOUT_S)
    assert pruned.code == 0, pruned.err
    assert pruned.json()["rows_removed"] == len(forgotten)
    # Format v2 state too is rewritten by Spark tasks, one per partition.
    assert pruned.json()["rewritten_by"] == "spark_tasks"
    inspected = sparkpoint(home, "snapshot", "inspect", "p1", "--json")
    assert inspected.code == 0, inspected.err
    seen_before = {key for key, _ in first} - forgotten
    assert inspected.json()["operators"][0]["rows"] == len(seen_before)
    pruned_checkpoint = home.snapshots_dir / "p1" / "checkpoint"
    # Spark's state reader reads format v2 only when the session's checkpointFormatVersion
    # is 2: real-time mode makes v2 its default without recording the setting in the offsets
    # log, so with the default of 1 the reader takes the files for plain-named ones and fails.
    with pytest.raises(Exception, match="CANNOT_LOAD_STATE_STORE"):
        _keys_read_by_spark(spark, pruned_checkpoint)
    spark.conf.set(CHECKPOINT_FORMAT_CONF, "2")
    try:
        assert _keys_read_by_spark(spark, pruned_checkpoint) == Counter(seen_before)
    finally:
        spark.conf.unset(CHECKPOINT_FORMAT_CONF)

    # A new job from the pruned snapshot of the running job, in real-time mode: the keys it
    # holds do not come out again, every other key of the second records does, once.
    with _running(home, "rt2", tmp_path / "rt2.log", "--from-snapshot", "p1",
                  *_run_args(kafka_broker, topic, out_b)) as committed:
        committed(len(first) + len(second))
    assert _read_topic(kafka_broker, out_b) == _first_of_each_key(second, seen_before)

    drained = sparkpoint(home, "drain", "rt2", "--snapshot", "d1", timeout=RUN_TIMEOUT_S)
    assert drained.code == 0, drained.err
    assert "seen_keys" in drained.out and "RESIDUAL" in drained.out, drained.out
    assert sparkpoint(home, "snapshot", "verify", "d1").code == 0
    # After the drain the job goes on (a micro-batch run over its real-time checkpoint): the
    # keys it holds stay deduplicated.
    _produce(kafka_broker, topic, third)
    continued = sparkpoint(home, "run", str(JOB), "--job", "rt2", "--until-caught-up",
                           timeout=RUN_TIMEOUT_S)
    assert continued.code == 0, continued.err
    assert _committed_offset(home, "rt2") == len(first) + len(second) + len(third)
    assert _read_topic(kafka_broker, out_b) == _first_of_each_key(second + third, seen_before)
