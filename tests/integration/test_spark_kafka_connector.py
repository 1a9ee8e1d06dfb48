"""Jobs reading Kafka with Spark's own connector (``format("kafka")``, spark-sql-kafka-0-10
4.2.0 on pyspark 4.3.0; scripts/test-deps.sh fetches it) on the real broker: what Kafka's own
tools show of the job (a consumer group, opt-in), the lag read from the broker, a new Kafka
source in a resume point, and the connector's behaviour that sparkpoint builds on, each pinned
by a test that names it. Startpoints and import with the connector: test_startpoints.py and
test_adopt_plain_spark.py run their Kafka scenarios with it."""

from __future__ import annotations

import datetime as dt
import itertools
import json
import re
import subprocess
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml

from sparkpoint import api
from sparkpoint.checkpoint.layout import Checkpoint
from sparkpoint.storage.home import Home
from sparkpoint.testing import (
    clicks_for_slice,
    expected_hourly_counts,
    output_rows,
    sink_files_up_to,
    write_clicks,
)
from tests.conftest import REPO
from tests.support.cli import sparkpoint, wait_for
from tests.support.kafka import BROKER_LIB, KafkaBroker

pytestmark = pytest.mark.spark
JOBS = REPO / "tests" / "data" / "jobs"
PASSTHROUGH = JOBS / "passthrough.py"
CLICKS = JOBS / "clicks_variants.py"
DAY_MS = 86_400_000

Record = tuple[str, int, int, str, dt.datetime]


def _produce(broker: KafkaBroker, topic: str, values: list[str], partitions: int,
             timestamp_ms: int | list[int] | None = None) -> list[Record]:
    """Value i to partition i % partitions (with ``timestamp_ms``, or the i-th of them); the
    rows the passthrough job makes of them."""
    from confluent_kafka import Producer

    rows: list[Record] = []
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for i, value in enumerate(values):
        stamp = timestamp_ms[i] if isinstance(timestamp_ms, list) else timestamp_ms
        extra = {} if stamp is None else {"timestamp": stamp}
        producer.produce(topic, value=value.encode(), partition=i % partitions,
                         on_delivery=lambda err, msg: rows.append((
                             msg.topic(), msg.partition(), msg.offset(), msg.value().decode(),
                             dt.datetime.fromtimestamp(msg.timestamp()[1] / 1000, dt.UTC)
                             .replace(tzinfo=None))), **extra)
    producer.flush(30)
    assert len(rows) == len(values)
    return rows


def _passthrough(spark: object, home: Home, tmp: Path, broker: KafkaBroker, topic: str,
                 **extra: str) -> api.RunResult:
    params = {"source": "kafka", "kafka_format": "kafka", "bootstrap": broker.bootstrap,
              "topic": topic, "output": str(tmp / "out"), **extra}
    return api.run(home, PASSTHROUGH, "k", params=params, until_caught_up=True,
                   spark=spark)  # type: ignore[arg-type]


def _group_offsets(broker: KafkaBroker, group: str) -> dict[tuple[str, int], tuple[int, int]]:
    """(topic, partition) -> (current offset, lag), as Kafka's own kafka-consumer-groups.sh
    (ConsumerGroupCommand) describes the group."""
    done = subprocess.run(
        ["java", "-cp", f"{BROKER_LIB}/*",
         "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand",
         "--bootstrap-server", broker.bootstrap, "--describe", "--group", group],
        capture_output=True, text=True, timeout=120, check=True)
    rows: dict[tuple[str, int], tuple[int, int]] = {}
    for line in done.stdout.splitlines():
        fields = line.split()
        if len(fields) >= 6 and fields[0] == group:
            rows[(fields[1], int(fields[2]))] = (int(fields[3]), int(fields[5]))
    return rows


def test_a_consumer_group_shows_the_committed_offsets_and_is_never_read_back(
    spark: object, home: Home, tmp_path: Path, kafka_broker: KafkaBroker
) -> None:
    topic = kafka_broker.new_topic("watched", 3)
    first = _produce(kafka_broker, topic, [f"v{i}" for i in range(15)], 3)
    result = _passthrough(spark, home, tmp_path, kafka_broker, topic, group="watchers")
    assert result.batches_run >= 4  # maxOffsetsPerTrigger=4
    assert output_rows(spark, tmp_path / "out") == Counter(first)  # type: ignore[arg-type]
    # Spark's connector keeps Kafka's offset JSON in the checkpoint, as sparkpoint's source
    # does and as startpoints write it: the next offset to read per partition.
    committed = Checkpoint(home.checkpoint_dir("k"))
    entry = committed.offsets(committed.require_latest_committed_batch())
    assert json.loads(entry.source_offsets()["events"] or "") == {
        topic: {str(p): 5 for p in range(3)}}
    # The broker's own tool: every partition at its end, nothing behind.
    assert _group_offsets(kafka_broker, "watchers") == {(topic, p): (5, 0) for p in range(3)}

    # The first unread record of each partition 3, 2 and 1 hours old, the next ones newer:
    # the lag in time is the oldest of those first ones' age.
    hour_ms, now_ms = 3_600_000, int(time.time() * 1000)
    stamps = [now_ms - 3 * hour_ms, now_ms - 2 * hour_ms, now_ms - hour_ms] + [now_ms] * 3
    later = _produce(kafka_broker, topic, [f"w{i}" for i in range(6)], 3, stamps)
    before = time.time()
    shown = sparkpoint(home, "jobs", "show", "k", "--json")
    after = time.time()
    assert shown.code == 0, shown.err
    lag = shown.json()["lag"]["events"]
    seconds = lag.pop("seconds_behind")
    assert lag == {
        "unit": "records", "behind": 6, "partitions": {f"{topic}-{p}": 2 for p in range(3)}}
    oldest = min(stamps) / 1000
    assert before - oldest - 0.001 <= seconds <= after - oldest + 0.001, (seconds, oldest)
    listed = sparkpoint(home, "jobs", "list")
    assert "6 records 3.0 h behind" in listed.out, listed.out
    text = sparkpoint(home, "jobs", "show", "k").out
    assert f"events: 6 records ({topic}-0: 2, {topic}-1: 2, {topic}-2: 2) 3.0 h behind" \
        in text, text
    assert _group_offsets(kafka_broker, "watchers") == {(topic, p): (5, 2) for p in range(3)}

    # Positions come from the checkpoint only: a group moved back changes nothing read.
    from confluent_kafka import Consumer, TopicPartition

    mover = Consumer({"bootstrap.servers": kafka_broker.bootstrap, "group.id": "watchers"})
    mover.commit(offsets=[TopicPartition(topic, p, 0) for p in range(3)], asynchronous=False)
    mover.close()
    _passthrough(spark, home, tmp_path, kafka_broker, topic, group="watchers")
    assert output_rows(spark, tmp_path / "out") == Counter(first + later)  # type: ignore[arg-type]
    assert _group_offsets(kafka_broker, "watchers") == {(topic, p): (7, 0) for p in range(3)}


def test_spark_connector_fails_on_deleted_offsets_and_a_startpoint_goes_on(
    spark: object, home: Home, tmp_path: Path, kafka_broker: KafkaBroker
) -> None:
    """Spark's connector with its default failOnDataLoss=true refuses to start from offsets
    the broker deleted (here by the topic's retention); sparkpoint says so in one line and
    names the startpoint that goes on from the earliest record held."""
    topic = kafka_broker.new_topic("aged", 2)
    three_days_ago = (int(time.time()) - 3 * 86_400) * 1000
    read = _produce(kafka_broker, topic, ["a0", "a1"], 2, three_days_ago)
    _passthrough(spark, home, tmp_path, kafka_broker, topic)
    unread = _produce(kafka_broker, topic, ["b0", "b1", "b2", "b3"], 2, three_days_ago)
    kafka_broker.set_topic_config(topic, {"retention.ms": str(DAY_MS)})
    wait_for(lambda: all(kafka_broker.watermarks(topic, p)[0] == 3 for p in (0, 1)), 120,
             "the old records deleted by retention")
    fresh = _produce(kafka_broker, topic, ["c0", "c1"], 2)
    failed = sparkpoint(home, "run", str(PASSTHROUGH), "--job", "k", "--until-caught-up",
                        "--param", "source=kafka", "--param", "kafka_format=kafka",
                        "--param", f"bootstrap={kafka_broker.bootstrap}",
                        "--param", f"topic={topic}", "--param", f"output={tmp_path / 'out'}",
                        "--conf", f"spark.jars={_connector_jars()}")
    assert failed.code == 4 and "Traceback" not in failed.err, failed.err
    assert "startpoint set k events --earliest" in failed.err, failed.err
    assert output_rows(spark, tmp_path / "out") == Counter(read)  # type: ignore[arg-type]
    assert unread
    started = sparkpoint(home, "startpoint", "set", "k", "events", "--earliest")
    assert started.code == 0, started.err
    _passthrough(spark, home, tmp_path, kafka_broker, topic)
    assert output_rows(spark, tmp_path / "out") == Counter(read + fresh)  # type: ignore[arg-type]


def test_deleted_offsets_are_named_per_partition_as_the_broker_holds_them(
    spark: object, home: Home, tmp_path: Path, kafka_broker: KafkaBroker
) -> None:
    """Records deleted below the job's position (Kafka's DeleteRecords: the log start moves,
    as retention moves it a segment at a time). Spark's connector names one partition, and
    for a fetch the broker refuses the range of the failing task's share of the batch
    (here [2, 10) where [2, 7) is gone); KAFKA_OFFSETS_DELETED names, per partition, exactly
    what is gone: from the job's position to the earliest offset the broker holds. The
    startpoints it names take only those partitions to their earliest record held."""
    from sparkpoint.errors import KafkaOffsetsDeletedError

    topic = kafka_broker.new_topic("trimmed", 3)
    first = _produce(kafka_broker, topic, [f"a{i}" for i in range(6)], 3)  # offsets 0, 1
    _passthrough(spark, home, tmp_path, kafka_broker, topic, max_offsets="100")
    later = _produce(kafka_broker, topic, [f"b{i}" for i in range(24)], 3)  # offsets 2..9
    kafka_broker.delete_records(topic, {0: 7, 1: 3})
    with pytest.raises(KafkaOffsetsDeletedError) as refused:
        _passthrough(spark, home, tmp_path, kafka_broker, topic, max_offsets="100")
    line = refused.value.message
    assert refused.value.exit_code == 4 and "\n" not in line, line
    assert (f"source 'events' offsets [2, 7) of {topic}-0 (the broker's earliest offset there "
            f"is 7), [2, 3) of {topic}-1 (the broker's earliest offset there is 3), which "
            "the broker no longer holds") in line, line
    assert "[2, 10)" not in line and f"{topic}-2" not in line, line
    assert (f"sparkpoint startpoint set k events --earliest --partition {topic}:0 and "
            f"sparkpoint startpoint set k events --earliest --partition {topic}:1, then run "
            "again") in line, line
    assert output_rows(spark, tmp_path / "out") == Counter(first)  # type: ignore[arg-type]

    for partition in (0, 1):
        done = sparkpoint(home, "startpoint", "set", "k", "events", "--earliest",
                          "--partition", f"{topic}:{partition}")
        assert done.code == 0, done.err
    _passthrough(spark, home, tmp_path, kafka_broker, topic, max_offsets="100")
    held = [r for r in later if r[2] >= {0: 7, 1: 3, 2: 0}[r[1]]]
    assert output_rows(spark, tmp_path / "out") == Counter(first + held)  # type: ignore[arg-type]


def test_a_past_batch_of_a_connector_job_is_snapshotted_continued_and_rehearsed(
    spark: object, home: Home, tmp_path: Path, kafka_broker: KafkaBroker,
    monkeypatch: pytest.MonkeyPatch
) -> None:
    """``snapshot create --batch`` and ``--at`` of a batch the job committed earlier, with
    Spark's connector: the job started from it reads exactly the records after that batch,
    and ``rehearse`` replays the old job's later batches from it with equal output; from a
    snapshot of another job it is refused before Spark starts."""
    topic = kafka_broker.new_topic("past", 2)
    records = _produce(kafka_broker, topic, [f"p{i}" for i in range(16)], 2)
    first = _passthrough(spark, home, tmp_path, kafka_broker, topic)
    assert first.last_batch is not None and first.last_batch >= 3  # maxOffsetsPerTrigger=4
    shown = sparkpoint(home, "jobs", "show", "k", "--json")
    assert shown.code == 0, shown.err
    held = {entry["batch"]: entry["batch_time"]
            for entry in shown.json()["snapshottable_batches"]}
    assert 1 in held, held
    created = sparkpoint(home, "snapshot", "create", "k", "past", "--batch", "1", "--json")
    assert created.code == 0 and created.json()["batch_id"] == 1, created.err
    at = sparkpoint(home, "snapshot", "create", "k", "past_at", "--at",
                    held[1].removesuffix("Z"), "--json")
    assert at.code == 0 and at.json()["batch_id"] == 1, at.err

    out, later_out = tmp_path / "out", tmp_path / "later"
    api.run(home, PASSTHROUGH, "k2", from_snapshot="past", until_caught_up=True,
            params={"source": "kafka", "kafka_format": "kafka",
                    "bootstrap": kafka_broker.bootstrap, "topic": topic,
                    "output": str(later_out)}, spark=spark)  # type: ignore[arg-type]
    up_to = output_rows(spark, out, sink_files_up_to(out, 1))  # type: ignore[arg-type]
    after = output_rows(spark, later_out)  # type: ignore[arg-type]
    assert sum(up_to.values()) == 8 and after  # two batches of 4 records, then the rest
    assert up_to + after == Counter(records)
    assert after == output_rows(spark, out) - up_to  # type: ignore[arg-type]

    rehearsed = sparkpoint(home, "rehearse", str(PASSTHROUGH), "--from-snapshot", "past",
                           "--against", "k", "--conf", f"spark.jars={_connector_jars()}",
                           "--json", "--fail-on-diff")
    assert rehearsed.code == 0, rehearsed.err
    doc = rehearsed.json()
    assert doc["equal"] is True and doc["batches"] == [2, first.last_batch], doc
    assert doc["old_rows"] == doc["new_rows"] == sum(after.values())

    # A snapshot of another job (another topic) is not in k's history: refused from the
    # files, before any Spark session (found once Spark had started and restored it before).
    from sparkpoint.errors import PreconditionError
    from tests.support.jvm import forbid_spark_sessions

    elsewhere = kafka_broker.new_topic("elsewhere", 2)
    _produce(kafka_broker, elsewhere, ["e0", "e1"], 2)
    api.run(home, PASSTHROUGH, "other", params={
        "source": "kafka", "kafka_format": "kafka", "bootstrap": kafka_broker.bootstrap,
        "topic": elsewhere, "output": str(tmp_path / "other")}, until_caught_up=True,
        spark=spark)  # type: ignore[arg-type]
    api.snapshot_create(home, "other", "other-past", batch=0)
    forbid_spark_sessions(monkeypatch)
    with pytest.raises(PreconditionError) as refused:
        api.rehearse(home, PASSTHROUGH, "k", from_snapshot="other-past")
    theirs = json.dumps({elsewhere: {"0": 1, "1": 1}}, separators=(",", ":"))
    ours = Checkpoint(home.checkpoint_dir("k")).offsets(0).source_offsets()["events"]
    assert refused.value.message == (
        f"snapshot 'other-past' (batch 0) is not in the history of the job to compare with: "
        f"its offset of source 'events' is {theirs}, the job's at batch 0 is {ours}; rehearse "
        "against the job the snapshot was taken of")


NO_OFFSET = -1001  # librdkafka's OFFSET_INVALID: the group committed nothing there


def _committed(broker: KafkaBroker, group: str, topic: str, partitions: int) -> list[int]:
    """The consumer group's committed offset of each partition (NO_OFFSET: none), read from the
    broker with the group's id, without joining it."""
    from confluent_kafka import Consumer, TopicPartition

    reader = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group})
    try:
        found = reader.committed([TopicPartition(topic, p) for p in range(partitions)],
                                 timeout=30)
    finally:
        reader.close()
    return [tp.offset for tp in sorted(found, key=lambda tp: tp.partition)]


def test_a_consumer_group_set_as_a_job_setting_follows_startpoints_and_rollbacks_not_rehearsals(
    spark: object, home: Home, tmp_path: Path, kafka_broker: KafkaBroker
) -> None:
    """The group a job's settings name (``spark.sparkpoint.consumerGroup.<source>``, given
    once and recorded with the job's conf) is moved where the job starts, before any batch
    runs: a startpoint's position and a rollback's snapshot are what Kafka's tools show at
    once. A rehearsal replays old batches in scratch space and leaves the group alone (it
    moved the group back to the replayed batches' offsets before)."""
    topic = kafka_broker.new_topic("grouped", 3)
    setting = {"spark.sparkpoint.consumerGroup.events": "billing"}
    params = {"source": "kafka", "kafka_format": "kafka", "bootstrap": kafka_broker.bootstrap,
              "topic": topic, "output": str(tmp_path / "out")}
    first = _produce(kafka_broker, topic, [f"a{i}" for i in range(6)], 3)
    api.run(home, PASSTHROUGH, "k", params=params, conf=setting, until_caught_up=True,
            spark=spark)  # type: ignore[arg-type]
    assert _committed(kafka_broker, "billing", topic, 3) == [2, 2, 2]
    api.snapshot_create(home, "k", "early")

    # Given once: the next run (no setting given) commits with the recorded one.
    second = _produce(kafka_broker, topic, [f"b{i}" for i in range(6)], 3)
    api.run(home, PASSTHROUGH, "k", until_caught_up=True, spark=spark)  # type: ignore[arg-type]
    assert output_rows(spark, tmp_path / "out") == Counter(first + second)  # type: ignore[arg-type]
    assert _committed(kafka_broker, "billing", topic, 3) == [4, 4, 4]

    # The version rehearsed names a group of its own: nothing is committed to it (nor to
    # the job's, whose last replayed batch ends where the group is anyway).
    rehearsal = api.rehearse(home, PASSTHROUGH, "k", from_snapshot="early",
                             conf={"spark.sparkpoint.consumerGroup.events": "billing-v2"},
                             spark=spark)  # type: ignore[arg-type]
    assert rehearsal.equal and rehearsal.batches[0] > 0, rehearsal
    assert _committed(kafka_broker, "billing-v2", topic, 3) == [NO_OFFSET] * 3
    assert _committed(kafka_broker, "billing", topic, 3) == [4, 4, 4]

    # A startpoint to the end: the run has nothing to read, and the group is there anyway.
    skipped = _produce(kafka_broker, topic, [f"c{i}" for i in range(3)], 3)
    assert sparkpoint(home, "startpoint", "set", "k", "events", "--latest").code == 0
    ran = api.run(home, PASSTHROUGH, "k", until_caught_up=True,
                  spark=spark)  # type: ignore[arg-type]
    assert ran.batches_run == 0 and skipped
    assert _committed(kafka_broker, "billing", topic, 3) == [5, 5, 5]

    # A rollback to the first snapshot: the group is back there when the query starts
    # (before any batch of the new job commits), then follows the job to the end.
    at_start: list[list[int]] = []
    api.run(home, PASSTHROUGH, "k-back", params={**params, "output": str(tmp_path / "back")},
            conf=setting, from_snapshot="early", until_caught_up=True, spark=spark,  # type: ignore[arg-type]
            on_started=lambda _query: at_start.append(
                _committed(kafka_broker, "billing", topic, 3)))
    assert at_start == [[2, 2, 2]]
    assert _committed(kafka_broker, "billing", topic, 3) == [5, 5, 5]
    assert output_rows(spark, tmp_path / "back") == Counter(second + skipped)  # type: ignore[arg-type]

    # A setting naming a source the job does not have is refused before Spark runs it.
    from sparkpoint.errors import JobFileError

    with pytest.raises(JobFileError) as refused:
        api.run(home, PASSTHROUGH, "k", conf={"spark.sparkpoint.consumerGroup.clicks": "x"},
                until_caught_up=True, spark=spark)  # type: ignore[arg-type]
    assert "setting spark.sparkpoint.consumerGroup.clicks names source 'clicks', which the " \
        "query does not have (its sources: events)" in refused.value.message


def test_a_rehearsal_of_a_version_that_adds_a_topic_reads_it_over_the_replayed_batches_time(
    spark: object, home: Home, tmp_path: Path, kafka_broker: KafkaBroker
) -> None:
    """The new version reads a second topic as a new source: the rehearsal replays the old
    job's batches as they were and reads the new topic over the same time, each replayed
    batch its records from the previous batch's time to its own (by record timestamp, as
    a startpoint ``--timestamp`` places a source). Records of the new topic before the
    snapshot's batch or after the last replayed one are not read."""
    topic, added = kafka_broker.new_topic("kept", 2), kafka_broker.new_topic("added", 2)
    params = {"source": "kafka", "kafka_format": "kafka", "bootstrap": kafka_broker.bootstrap,
              "topic": topic, "output": str(tmp_path / "out")}
    _produce(kafka_broker, topic, ["a0", "a1"], 2)
    api.run(home, PASSTHROUGH, "k", params=params, until_caught_up=True,
            spark=spark)  # type: ignore[arg-type]
    api.snapshot_create(home, "k", "before")
    replayed: list[Record] = []
    for run in range(3):  # a batch a run: each its own batch time
        replayed += _produce(kafka_broker, topic, [f"b{run}-0", f"b{run}-1"], 2)
        api.run(home, PASSTHROUGH, "k", until_caught_up=True,
                spark=spark)  # type: ignore[arg-type]
    old = Checkpoint(home.checkpoint_dir("k"))
    times = [old.offsets(batch).batch_timestamp_ms for batch in range(4)]
    assert times == sorted(times) and len(set(times)) == 4, times
    # Two records (one a partition) at each moment, in time order within each partition.
    moments = [times[0] - 5000, *((a + b) // 2 for a, b in itertools.pairwise(times)),
               times[3] + 5000]
    extra = _produce(kafka_broker, added, [f"x{i}" for i in range(2 * len(moments))], 2,
                     [moment for moment in moments for _ in range(2)])
    inside = [record for record in extra if times[0] <= record[4].replace(
        tzinfo=dt.UTC).timestamp() * 1000 < times[3]]
    assert len(inside) == 6

    rehearsal = api.rehearse(home, PASSTHROUGH, "k", from_snapshot="before",
                             params={"extra_topic": added}, keep=True,
                             spark=spark)  # type: ignore[arg-type]
    assert rehearsal.batches == (1, 3) and rehearsal.scratch is not None
    assert rehearsal.equal is False and rehearsal.new_rows == len(replayed) + len(inside)
    rows = output_rows(spark, Path(rehearsal.scratch) / "output")  # type: ignore[arg-type]
    assert rows == Counter(replayed + inside)


WORDCOUNT = JOBS / "spark_example_kafka_wordcount.py"
WORDS = ("spark", "kafka", "state", "lag", "offset")
Line = tuple[int, str]  # Kafka timestamp (ms), text


def _lines(seed: int, count: int, start_ms: int) -> list[Line]:
    """``count`` lines of three words, one a second from ``start_ms``."""
    import random

    rng = random.Random(seed)
    return [(start_ms + i * 1000, " ".join(rng.choice(WORDS) for _ in range(3)))
            for i in range(count)]


def _produce_lines(broker: KafkaBroker, topic: str, lines: list[Line]) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for i, (ms, text) in enumerate(lines):
        producer.produce(topic, value=text.encode(), partition=i % 2, timestamp=ms)
    assert producer.flush(30) == 0


def _write_lines(directory: Path, name: str, lines: list[Line]) -> None:
    from tests.support.spark_examples import write_json_file

    write_json_file(directory, name, [
        {"value": text, "timestamp": dt.datetime.fromtimestamp(ms / 1000, dt.UTC).isoformat()}
        for ms, text in lines])


def _window_counts(lines: list[Line]) -> Counter[tuple[Any, ...]]:
    """(window start, end, word, count) of every 10-second window: what the word count
    has written once drained (every window emitted)."""
    counts: Counter[tuple[int, str]] = Counter(
        (ms // 10_000 * 10_000, word) for ms, text in lines for word in text.split(" "))
    moment = lambda ms: dt.datetime.fromtimestamp(ms / 1000, dt.UTC).replace(  # noqa: E731
        tzinfo=None)
    return Counter((moment(start), moment(start + 10_000), word, n)
                   for (start, word), n in counts.items())


def test_the_lag_is_one_figure_per_source_measured_now_and_none_once_superseded_or_drained(
    spark: object, home: Home, tmp_path: Path, kafka_broker: KafkaBroker
) -> None:
    """Spark's structured_kafka_wordcount.py with a second source (lines as files): after
    its run caught up, 700 records arrive. The job is stopped: its last batch's progress
    still says nothing was behind; its lag, measured when asked, is 700 records and one
    file, each named by its source. Upgraded (a job started from its snapshot into the same
    output) it is superseded, and the upgraded job once drained: neither has a lag."""
    topic = kafka_broker.new_topic("wordcount", 2)
    base_ms = (int(time.time()) - 3600) // 10 * 10_000
    first, later = _lines(0, 20, base_ms), _lines(1, 700, base_ms + 20_000)
    early_file, late_file = _lines(2, 4, base_ms + 2500), _lines(3, 3, base_ms + 30_500)
    _produce_lines(kafka_broker, topic, first)
    _write_lines(tmp_path / "lines", "a.json", early_file)
    params = {"bootstrap": kafka_broker.bootstrap, "topic": topic,
              "output": str(tmp_path / "out"), "lines": str(tmp_path / "lines")}
    api.run(home, WORDCOUNT, "wc", params=params, until_caught_up=True,
            spark=spark)  # type: ignore[arg-type]
    _produce_lines(kafka_broker, topic, later)
    _write_lines(tmp_path / "lines", "b.json", late_file)

    before = time.time()
    shown = sparkpoint(home, "jobs", "show", "wc", "--json")
    after = time.time()
    assert shown.code == 0, shown.err
    doc = shown.json()
    # The first unread record of each partition is later[0] and later[1] (i % 2).
    oldest = min(later[0][0], later[1][0]) / 1000
    seconds = doc["lag"]["words"].pop("seconds_behind")
    assert before - oldest - 0.001 <= seconds <= after - oldest + 0.001, (seconds, oldest)
    assert doc["lag"] == {
        "words": {"unit": "records", "behind": 700,
                  "partitions": {f"{topic}-0": 350, f"{topic}-1": 350}},
        "lines": {"unit": "files", "behind": 1}}, doc["lag"]
    reported = doc["progress"]["sources"]
    assert [source["name"] for source in reported] == ["words", "lines"], reported
    assert all("records_behind" not in source for source in reported), reported
    listed = sparkpoint(home, "jobs", "list")
    assert re.search(r"words: 700 records [0-9.]+ (min|h) behind, lines: 1 file", listed.out), \
        listed.out

    api.snapshot_create(home, "wc", "before-upgrade")
    api.run(home, WORDCOUNT, "wc2", params=params, from_snapshot="before-upgrade",
            until_caught_up=True, spark=spark)  # type: ignore[arg-type]
    old = sparkpoint(home, "jobs", "show", "wc", "--json").json()
    assert (old["status"], old["superseded_by"], old["lag"]) == ("stopped", "wc2", None)
    text = sparkpoint(home, "jobs", "show", "wc").out
    assert "lag       - (superseded by job 'wc2')" in text, text
    assert "superseded by job 'wc2'" in text.splitlines()[1], text
    api.drain(home, "wc2", spark=spark)  # type: ignore[arg-type]
    drained = sparkpoint(home, "jobs", "show", "wc2", "--json").json()
    assert (drained["status"], drained["lag"]) == ("drained", None)
    rows = [line.split() for line in sparkpoint(home, "jobs", "list").out.splitlines()[1:]]
    assert [(row[0], row[1], row[5]) for row in rows] == [("wc", "stopped", "-"),
                                                         ("wc2", "drained", "-")], rows
    expected = _window_counts(first + early_file + later + late_file)
    assert output_rows(spark, tmp_path / "out") == expected  # type: ignore[arg-type]


def _connector_jars() -> str:
    from tests.conftest import kafka_connector_jars

    return kafka_connector_jars()


def test_a_resume_point_adds_a_kafka_source_at_a_timestamp(
    spark: object, home: Home, tmp_path: Path, kafka_broker: KafkaBroker
) -> None:
    """A job of one file source gains a Kafka source (Spark's connector, by subscribePattern)
    from a resume point that starts it at a record time: dedupe and hourly counts keep their
    state, the Kafka records before that time are skipped, the ones after counted once."""
    v1 = write_clicks(tmp_path / "in", range(0, 4))
    params = {"input": str(tmp_path / "in"), "output": str(tmp_path / "out1"), "variant": "v1"}
    api.run(home, CLICKS, "v1", params=params, until_caught_up=True,
            spark=spark)  # type: ignore[arg-type]
    api.snapshot_create(home, "v1", "s1")

    topic = kafka_broker.new_topic("extra", 2)
    an_hour_ago = (int(time.time()) - 3600) * 1000
    early = [c for index in (4, 5) for c in clicks_for_slice(index, seed=11)]
    later = [c for index in (6, 7, 8) for c in clicks_for_slice(index, seed=11)]
    skipped = _produce(kafka_broker, topic, [c.to_json() for c in early], 2, an_hour_ago)
    _produce(kafka_broker, topic, [c.to_json() for c in later], 2, an_hour_ago + 600_000)
    cut = dt.datetime.fromtimestamp((an_hour_ago + 300_000) / 1000, dt.UTC)
    point = tmp_path / "resume.yaml"
    point.write_text(yaml.safe_dump({"version": 1, "sources": {
        "clicks2": {"mode": "resume", "snapshot": "s1", "source": "clicks"},
        "extra": {"mode": "initialize", "start": {"timestamp": cut.isoformat()}}},
        "state": {name: {"mode": "resume", "snapshot": "s1"}
                  for name in ("dedup_clicks", "hourly_counts")}}))
    v2 = {**params, "output": str(tmp_path / "out2"), "variant": "kafka_extra",
          "bootstrap": kafka_broker.bootstrap, "topic_pattern": f"{topic}|absent-.*"}
    shown = sparkpoint(home, "plan", str(CLICKS), "--resume-point", str(point), "--json",
                       "--conf", f"spark.jars={_connector_jars()}",
                       *[arg for k, v in v2.items() for arg in ("--param", f"{k}={v}")])
    assert shown.code == 0, shown.err
    rows = {row["name"]: row for row in shown.json()["sources"]}
    # Each partition starts at its first record at or after the cut: past the early ones.
    assert rows["extra"]["offset"] == {
        topic: {str(p): sum(1 for r in skipped if r[1] == p) for p in (0, 1)}}
    api.run(home, CLICKS, "v2", params=v2, resume_point=point, until_caught_up=True,
            spark=spark)  # type: ignore[arg-type]
    combined = output_rows(spark, tmp_path / "out1") + output_rows(
        spark, tmp_path / "out2")  # type: ignore[arg-type]
    assert combined == expected_hourly_counts(v1 + later)
    # Drained, the job with Spark's connector emits its open hours too.
    api.drain(home, "v2", snapshot="drained", spark=spark)  # type: ignore[arg-type]
    combined = output_rows(spark, tmp_path / "out1") + output_rows(
        spark, tmp_path / "out2")  # type: ignore[arg-type]
    assert combined == expected_hourly_counts(v1 + later, delay=-dt.timedelta(days=1))


def test_the_three_ways_a_kafka_source_names_its_partitions(kafka_broker: KafkaBroker) -> None:
    """subscribe, subscribePattern (a whole-name match, as Spark's Pattern.matches) and
    assign, resolved on the broker as Spark's connector reads them."""
    from sparkpoint.sources.kafka import KafkaMetadata, KafkaSourceError, Subscription

    first = kafka_broker.new_topic("ways", 2)
    second = kafka_broker.new_topic("ways", 3)
    meta = KafkaMetadata(kafka_broker.bootstrap)
    try:
        assert Subscription("subscribe", f"{first}, {second}").partitions(meta) == {
            first: [0, 1], second: [0, 1, 2]}
        prefix = first.rsplit("-", 1)[0]
        matched = Subscription("subscribePattern", f"{prefix}-.*").partitions(meta)
        assert {first, second} <= set(matched) and matched[second] == [0, 1, 2]
        assert Subscription("subscribePattern", "ways").partitions(meta) == {}  # whole name
        assert Subscription("assign", f'{{"{second}":[2,0]}}').partitions(meta) == {
            second: [0, 2]}
        with pytest.raises(KafkaSourceError, match="partitions 5"):
            Subscription("assign", f'{{"{second}":[5]}}').partitions(meta)
    finally:
        meta.close()
    assert Subscription.of({"subscribePattern": "a.*"}) == Subscription("subscribePattern", "a.*")
    assert Subscription.of({}) is None
    assert Subscription("subscribePattern", "ways-.*").covers("ways-1")
    assert not Subscription("subscribe", "a,b").covers("c")
    assert Subscription("assign", '{"t":[0]}').covers("t")


def _jobs_and_snapshots(home_dir: Path) -> dict[str, bytes]:
    """Every file of the home's jobs and snapshots (logs aside): what a refused start must
    leave as it found."""
    return {str(p.relative_to(home_dir)): p.read_bytes()
            for sub in ("jobs", "snapshots") for p in sorted((home_dir / sub).rglob("*"))
            if p.is_file()}


def test_a_snapshot_older_than_the_topic_retains_is_refused_then_accepted_explicitly(
    spark: object, home: Home, tmp_path: Path, kafka_broker: KafkaBroker
) -> None:
    """The Kafka TTL trap: a snapshot whose offsets the broker has since deleted (here by
    DeleteRecords, which moves the log start at once, as retention does a segment at a time).
    The start from it is refused before Spark starts, in one line naming the partitions and
    how many records each lost, and nothing is created; plan lists the same gap; with
    --accept-data-loss the lost partitions resume at the earliest offset held, the output is
    exactly the records still on the broker, and the job's lineage records the loss."""
    from sparkpoint.errors import SourceDataLostError

    topic = kafka_broker.new_topic("ttl", 2, {"retention.ms": str(3_600_000)})
    first = _produce(kafka_broker, topic, [f"a{i}" for i in range(6)], 2)
    _passthrough(spark, home, tmp_path, kafka_broker, topic, max_offsets="100")
    assert output_rows(spark, tmp_path / "out") == Counter(first)  # type: ignore[arg-type]
    snapshot = api.snapshot_create(home, "k", "s1")
    source = snapshot.source("events")
    assert source is not None
    resumed = {int(p): o for p, o in source.offset[topic].items()}
    later = _produce(kafka_broker, topic, [f"b{i}" for i in range(10)], 2)
    deleted_below = {0: 6, 1: 4}
    kafka_broker.delete_records(topic, deleted_below)
    # Computed apart from sparkpoint: deleted minus what the snapshot had read already.
    lost = {p: deleted_below[p] - resumed[p] for p in (0, 1)}
    assert lost == {0: 3, 1: 1}

    params = {"source": "kafka", "kafka_format": "kafka", "bootstrap": kafka_broker.bootstrap,
              "topic": topic, "output": str(tmp_path / "out2"), "max_offsets": "100"}
    home_dir = tmp_path / "home"
    before = _jobs_and_snapshots(home_dir)
    with pytest.raises(SourceDataLostError) as refused:
        api.run(home, PASSTHROUGH, "k2", params=params, from_snapshot="s1",
                until_caught_up=True, spark=spark)  # type: ignore[arg-type]
    line = refused.value.message
    assert refused.value.exit_code == 4 and "\n" not in line, line
    assert line.startswith("job 'k2' not started, nothing was created: source 'events' "
                           "resumes at Kafka offsets the broker no longer holds"), line
    assert (f"{lost[0]} record(s) of {topic}-0 (offsets {resumed[0]}..{deleted_below[0] - 1}; "
            f"the broker's earliest offset there is {deleted_below[0]}), {lost[1]} record(s) "
            f"of {topic}-1") in line, line
    assert "--accept-data-loss" in line, line
    assert _jobs_and_snapshots(home_dir) == before
    assert not (tmp_path / "out2").exists()

    plan = api.plan(home, PASSTHROUGH, params=params, from_snapshot="s1",
                    spark=spark)  # type: ignore[arg-type]
    [problem] = plan.problems
    assert f"{lost[0]} record(s) of {topic}-0" in problem and "--accept-data-loss" in problem

    api.run(home, PASSTHROUGH, "k2", params=params, from_snapshot="s1", until_caught_up=True,
            accept_data_loss=True, spark=spark)  # type: ignore[arg-type]
    held = {p: kafka_broker.watermarks(topic, p)[0] for p in (0, 1)}
    still_on_broker = [r for r in first + later if r[2] >= held[r[1]]]
    assert output_rows(spark, tmp_path / "out2") == Counter(still_on_broker)  # type: ignore[arg-type]
    shown = sparkpoint(home, "jobs", "show", "k2", "--json")
    assert shown.code == 0, shown.err
    accepted = shown.json()["lineage"]["accepted_loss"]
    assert [(a["topic"], a["partition"], a["records"], a["by"]) for a in accepted] == [
        (topic, 0, lost[0], "run --from-snapshot s1"), (topic, 1, lost[1],
                                                        "run --from-snapshot s1")]
    text = sparkpoint(home, "jobs", "show", "k2").out
    assert f"lost      source 'events': {lost[0]} record(s) of {topic}-0" in text, text


def test_the_connector_given_once_in_spark_defaults_conf_reaches_the_cli(
    spark: object, home: Home, tmp_path: Path, kafka_broker: KafkaBroker
) -> None:
    """Spark's spark-defaults.conf in $SPARK_CONF_DIR, with the connector's jars and no
    --conf: sparkpoint's own jar is added to its spark.jars, not put in its place."""
    topic = kafka_broker.new_topic("defaults", 2)
    produced = _produce(kafka_broker, topic, [f"v{i}" for i in range(6)], 2)
    conf_dir = tmp_path / "spark-conf"
    conf_dir.mkdir()
    (conf_dir / "spark-defaults.conf").write_text(f"spark.jars {_connector_jars()}\n")
    ran = sparkpoint(home, "run", str(PASSTHROUGH), "--job", "d", "--until-caught-up",
                     "--param", "source=kafka", "--param", "kafka_format=kafka",
                     "--param", f"bootstrap={kafka_broker.bootstrap}",
                     "--param", f"topic={topic}", "--param", f"output={tmp_path / 'out'}",
                     env={"SPARK_CONF_DIR": str(conf_dir)})
    assert ran.code == 0, ran.err
    assert output_rows(spark, tmp_path / "out") == Counter(produced)  # type: ignore[arg-type]
