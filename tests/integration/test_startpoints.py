"""Startpoints on real Spark: a file source and the Kafka source read exactly the records
from the resolved positions on, once; startpoints set while a job runs wait for its next
start; bad positions are refused and nothing is stored."""

from __future__ import annotations

import datetime as dt
import signal
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from sparkpoint import api
from sparkpoint.storage.home import Home
from sparkpoint.testing import Click, output_rows, write_clicks
from tests.support.cli import files_committed, sparkpoint, start, wait_for
from tests.support.kafka import KafkaBroker

pytestmark = pytest.mark.spark
JOB = Path(__file__).resolve().parent.parent / "data" / "jobs" / "passthrough.py"


def _rows(clicks: list[Click]) -> Counter[Any]:
    return Counter((c.event_id, c.user, c.ts.replace(tzinfo=None)) for c in clicks)


def _run(spark: object, home: Home, tmp: Path, job: str = "j") -> None:
    api.run(home, JOB, job, params={"input": str(tmp / "in"), "output": str(tmp / "out")},
            until_caught_up=True, spark=spark)  # type: ignore[arg-type]


def _out(spark: object, tmp: Path) -> Counter[Any]:
    return output_rows(spark, tmp / "out")  # type: ignore[arg-type]


def test_earliest_rereads_everything_once_then_is_cleared(
    spark: object, home: Home, tmp_path: Path
) -> None:
    first = write_clicks(tmp_path / "in", range(0, 3))
    _run(spark, home, tmp_path)
    dry = sparkpoint(home, "startpoint", "set", "j", "clicks", "--earliest", "--dry-run",
                     "--json")
    assert dry.code == 0, dry.err
    assert "reads 3 files again (log entry 3)" in dry.json()["resolves_to"]["positions"]
    assert sparkpoint(home, "startpoint", "list", "j", "--json").json() == []
    # Set twice: the second replaces the first at the next start, which consumes both.
    sets = [sparkpoint(home, "startpoint", "set", "j", "clicks", "--earliest", "--json")
            for _ in range(2)]
    assert [done.code for done in sets] == [0, 0]
    set_ids = [done.json()["startpoints"][-1]["set_id"] for done in sets]
    assert all(set_ids) and set_ids[0] != set_ids[1]
    assert [s["kind"] for s in sparkpoint(home, "startpoint", "list", "j", "--json").json()] \
        == ["earliest"]
    later = write_clicks(tmp_path / "in", range(3, 4))
    _run(spark, home, tmp_path)
    assert _out(spark, tmp_path) == _rows(first + first + later)
    assert sparkpoint(home, "startpoint", "list", "j", "--json").json() == []
    _run(spark, home, tmp_path)  # applied once: the next start reads nothing again
    assert _out(spark, tmp_path) == _rows(first + first + later)
    applied = sparkpoint(home, "jobs", "show", "j", "--json").json()["startpoints_applied"]
    assert [a["source"] for a in applied] == ["clicks"]
    assert applied[0]["set_ids"] == set_ids  # the replaced set too: consumed, once
    assert "reads 3 files again (log entry 3)" in sparkpoint(home, "jobs", "show", "j").out


def test_latest_skips_the_backlog(spark: object, home: Home, tmp_path: Path) -> None:
    first = write_clicks(tmp_path / "in", range(0, 2))
    _run(spark, home, tmp_path)
    write_clicks(tmp_path / "in", range(2, 4))  # backlog, never to be read
    assert sparkpoint(home, "startpoint", "set", "j", "clicks", "--latest").code == 0
    _run(spark, home, tmp_path)
    assert _out(spark, tmp_path) == _rows(first)
    fresh = write_clicks(tmp_path / "in", range(4, 5))
    _run(spark, home, tmp_path)
    assert _out(spark, tmp_path) == _rows(first + fresh)


def _mtime_cut(directory: Path) -> str:
    newest_ms = max(p.stat().st_mtime_ns for p in directory.iterdir()) // 1_000_000
    return dt.datetime.fromtimestamp((newest_ms + 1) / 1000, dt.UTC).isoformat()


def test_timestamp_starts_at_the_first_file_modified_at_or_after_it(
    spark: object, home: Home, tmp_path: Path
) -> None:
    first = write_clicks(tmp_path / "in", range(0, 2))
    _run(spark, home, tmp_path)
    skipped = write_clicks(tmp_path / "in", range(2, 3))
    cut = _mtime_cut(tmp_path / "in")  # after slice 2, before slices 3-4
    after = write_clicks(tmp_path / "in", range(3, 5))
    assert sparkpoint(home, "startpoint", "set", "j", "clicks", "--timestamp", cut).code == 0
    _run(spark, home, tmp_path)
    assert _out(spark, tmp_path) == _rows(first + after)
    # The time of slice 1: every file from slice 1 on is read, slice 2 (skipped before) too.
    one = write_clicks(tmp_path / "in", range(5, 6))
    slice_1 = sorted((tmp_path / "in").glob("clicks-*.json"))[1]
    at = dt.datetime.fromtimestamp(slice_1.stat().st_mtime_ns / 1e9, dt.UTC)
    assert sparkpoint(home, "startpoint", "set", "j", "clicks", "--timestamp",
                      at.isoformat()).code == 0
    _run(spark, home, tmp_path)
    again = [c for c in first if c.event_id.startswith("e1-")] + skipped + after
    assert _out(spark, tmp_path) == _rows(first + after + one + again)


def test_startpoint_set_while_running_applies_at_the_next_start(
    spark: object, home: Home, tmp_path: Path
) -> None:
    first = write_clicks(tmp_path / "in", range(0, 2))
    log = tmp_path / "live.log"
    proc = start(home, "run", str(JOB), "--job", "live", "--param", f"input={tmp_path / 'in'}",
                 "--param", f"output={tmp_path / 'out'}", log=log)
    try:
        wait_for(lambda: files_committed(home, "live", "clicks") == 2, 180, "2 files", log)
        shown = sparkpoint(home, "startpoint", "set", "live", "clicks", "--earliest")
        assert shown.code == 0, shown.err
        time.sleep(2)  # the running job does not pick it up
        assert _out(spark, tmp_path) == _rows(first)
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=120) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
    _run(spark, home, tmp_path, job="live")
    assert _out(spark, tmp_path) == _rows(first + first)


def test_bad_startpoints_are_refused_and_nothing_is_stored(
    spark: object, home: Home, tmp_path: Path
) -> None:
    write_clicks(tmp_path / "in", range(0, 2))
    _run(spark, home, tmp_path)
    cases = [
        (["nope", "clicks", "--earliest"], 4, "job 'nope' not found"),
        (["j", "views", "--earliest"], 4, "no source 'views' (sources: clicks)"),
        (["j", "clicks", "--timestamp", "yesterday"], 3, "ISO 8601"),
        (["j", "clicks", "--earliest", "--partition", "0"], 3, "has no partitions"),
        (["j", "clicks", "--offset", '{"logOffset": 7}'], 3, "past the end"),
        (["j", "clicks", "--earliest", "--latest"], 2, "exactly one"),
    ]
    for args, code, fragment in cases:
        result = sparkpoint(home, "startpoint", "set", *args)
        assert result.code == code, (args, result.err)
        assert fragment in result.err, (args, result.err)
    assert sparkpoint(home, "startpoint", "list", "j", "--json").json() == []
    cleared = sparkpoint(home, "startpoint", "clear", "j", "clicks")
    assert cleared.code == 4 and "no startpoint" in cleared.err


def test_rate_source_starts_at_the_second_of_a_timestamp(
    spark: object, home: Home, tmp_path: Path
) -> None:
    """The rate source's offset counts seconds since its start; second s emits the values
    5s..5s+4 (5 rows per second) stamped from start + s seconds on."""
    params = {"source": "rate", "output": str(tmp_path / "out")}
    api.run(home, JOB, "r", params=params, max_batches=2, spark=spark)  # type: ignore[arg-type]
    ckpt = home.checkpoint_dir("r")
    started_ms = int((ckpt / "sources" / "ticks" / "0").read_text().split("\n")[1])
    # Seconds up to the newest offsets entry are read (a batch planned when the run stopped
    # is completed first); the startpoint skips the next two seconds.
    planned = max(int(p.name) for p in (ckpt / "offsets").iterdir() if p.name.isdigit())
    reached = int((ckpt / "offsets" / str(planned)).read_text().split("ticks:")[1])
    target = reached + 2
    # A position the source has not reached yet is refused: wait until it has.
    time.sleep(max(0.0, (started_ms + (target + 1) * 1000) / 1000 - time.time()))
    at = dt.datetime.fromtimestamp((started_ms + target * 1000 - 500) / 1000, dt.UTC)
    shown = sparkpoint(home, "startpoint", "set", "r", "ticks", "--timestamp", at.isoformat(),
                       "--json")
    assert shown.code == 0, shown.err
    assert shown.json()["resolves_to"]["offset_after"] == target  # rows at or after the time
    future = sparkpoint(home, "startpoint", "set", "r", "ticks", "--offset", "100000")
    assert future.code == 3 and "past the end" in future.err
    api.run(home, JOB, "r", params=params, max_batches=1, spark=spark)  # type: ignore[arg-type]
    values = sorted(row[1] for row in _out(spark, tmp_path).elements())
    before = [v for v in values if v < 5 * reached]
    after = [v for v in values if v >= 5 * reached]
    assert before == list(range(5 * reached))
    assert after and after == list(range(5 * target, 5 * target + len(after)))


# -- Kafka (a real broker: tests/support/kafka.py) ---------------------------------------

# Record timestamps an hour back: well within the broker's retention (7 days).
BASE_MS = (int(time.time()) - 3600) * 1000
DAY_MS = 86_400_000

Record = tuple[str, int, int, str, int]  # topic, partition, offset, value, timestamp ms


def _produce(broker: KafkaBroker, topic: str, first: int, count: int, partitions: int = 3,
             base_ms: int = BASE_MS) -> list[Record]:
    """Records i = first..first+count-1 to partition i % partitions with timestamp base + i s;
    returns (topic, partition, offset, value, timestamp ms) of each, offsets as the broker
    assigned them."""
    from confluent_kafka import Producer

    delivered: list[Record] = []
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(first, first + count):
        producer.produce(topic, value=f"v{i}".encode(), partition=i % partitions,
                         timestamp=base_ms + i * 1000,
                         on_delivery=lambda err, msg: delivered.append(
                             (msg.topic(), msg.partition(), msg.offset(), msg.value().decode(),
                              msg.timestamp()[1])))
        producer.flush(30)
    assert len(delivered) == count
    return delivered


def _kafka_rows(records: list[Record]) -> Counter[Any]:
    return Counter((t, p, o, v, dt.datetime.fromtimestamp(ms / 1000, dt.UTC)
                    .replace(tzinfo=None)) for t, p, o, v, ms in records)


@pytest.fixture(params=["sparkpoint-kafka", "kafka"])
def kafka_format(request: pytest.FixtureRequest) -> str:
    """Each Kafka scenario with sparkpoint's own source and with Spark's connector."""
    return str(request.param)


def _kafka_run(spark: object, home: Home, tmp: Path, broker: KafkaBroker, topic: str,
               kafka_format: str, job: str = "k") -> api.RunResult:
    params = {"source": "kafka", "bootstrap": broker.bootstrap, "topic": topic,
              "output": str(tmp / "out"), "kafka_format": kafka_format}
    return api.run(home, JOB, job, params=params, until_caught_up=True,
                   spark=spark)  # type: ignore[arg-type]


def test_kafka_source_and_per_partition_startpoints(
    spark: object, home: Home, tmp_path: Path, kafka_broker: KafkaBroker,
    kafka_format: str
) -> None:
    topic = kafka_broker.new_topic("events", 3)
    records = _produce(kafka_broker, topic, 0, 15)
    result = _kafka_run(spark, home, tmp_path, kafka_broker, topic, kafka_format)
    # maxOffsetsPerTrigger=4: 15 records take 4 batches; every record exactly once.
    assert result.batches_run >= 4
    assert _out(spark, tmp_path) == _kafka_rows(records)
    later = _produce(kafka_broker, topic, 15, 6)
    # Partition 0 from the first record at or after record 6's time (offset 2), partition 1
    # from offset 1; partition 2 continues where it was.
    at = dt.datetime.fromtimestamp((BASE_MS + 6000) / 1000, dt.UTC).isoformat()
    shown = sparkpoint(home, "startpoint", "set", "k", "events", "--timestamp", at,
                       "--partition", "0", "--json")
    assert shown.code == 0, shown.err
    assert shown.json()["resolves_to"]["positions"] == [f"{topic}-0: 5 -> 2"]
    offset = sparkpoint(home, "startpoint", "set", "k", "events", "--offset",
                        f'{{"{topic}":{{"1":1}}}}', "--partition", "1", "--json")
    assert offset.code == 0, offset.err
    assert offset.json()["resolves_to"]["offset_after"] == {
        topic: {"0": 2, "1": 1, "2": 5}}
    _kafka_run(spark, home, tmp_path, kafka_broker, topic, kafka_format)
    everything = records + later
    again = [r for r in everything if (r[1] == 0 and r[2] >= 2) or (r[1] == 1 and r[2] >= 1)]
    new_in_2 = [r for r in later if r[1] == 2]
    assert _out(spark, tmp_path) == _kafka_rows(records) + _kafka_rows(again + new_in_2)
    refused = [
        (["--offset", f'{{"{topic}":{{"2":99}}}}'], "outside what the broker holds"),
        (["--latest", "--partition", "7"], "partition 7 does not exist"),
    ]
    for args, fragment in refused:
        result = sparkpoint(home, "startpoint", "set", "k", "events", *args)
        assert result.code == 3 and fragment in result.err, result.err
    assert sparkpoint(home, "startpoint", "list", "k", "--json").json() == []


def test_a_partition_takes_a_plain_offset_and_a_mismatch_says_what_it_is(
    spark: object, home: Home, tmp_path: Path, kafka_broker: KafkaBroker
) -> None:
    """``--partition TOPIC:P --offset N`` sets that partition to N (no JSON repeating the
    partition); offset JSON naming another partition than --partition is refused as the
    contradiction it is (exit 2, nothing stored), not as a partition that does not exist."""
    topic = kafka_broker.new_topic("plain", 2)
    records = _produce(kafka_broker, topic, 0, 8, partitions=2)
    _kafka_run(spark, home, tmp_path, kafka_broker, topic, "sparkpoint-kafka")
    assert _out(spark, tmp_path) == _kafka_rows(records)

    mismatch = sparkpoint(home, "startpoint", "set", "k", "events", "--partition",
                          f"{topic}:0", "--offset", f'{{"{topic}":{{"1":1}}}}')
    assert mismatch.code == 2, mismatch.err
    line = mismatch.err.strip()
    assert "\n" not in line and "does not exist" not in line, line
    assert f"--offset names {topic}-1, which --partition {topic}:0 does not select" in line
    alone = sparkpoint(home, "startpoint", "set", "k", "events", "--offset", "1")
    assert alone.code == 2 and "--partition TOPIC:P" in alone.err, alone.err
    assert sparkpoint(home, "startpoint", "list", "k", "--json").json() == []

    plain = sparkpoint(home, "startpoint", "set", "k", "events", "--partition", f"{topic}:0",
                       "--offset", "2", "--json")
    assert plain.code == 0, plain.err
    assert plain.json()["resolves_to"]["offset_after"] == {topic: {"0": 2, "1": 4}}
    # Partition 1 alone, named by its number: the source reads one topic.
    by_number = sparkpoint(home, "startpoint", "set", "k", "events", "--partition", "1",
                           "--offset", "3", "--json")
    assert by_number.code == 0, by_number.err
    assert by_number.json()["resolves_to"]["offset_after"] == {topic: {"0": 2, "1": 3}}
    _kafka_run(spark, home, tmp_path, kafka_broker, topic, "sparkpoint-kafka")
    again = [r for r in records if (r[1], r[2]) in {(0, 2), (0, 3), (1, 3)}]
    assert _out(spark, tmp_path) == _kafka_rows(records + again)


def test_kafka_partitions_added_between_runs_are_read_from_their_beginning(
    spark: object, home: Home, tmp_path: Path, kafka_broker: KafkaBroker,
    kafka_format: str
) -> None:
    topic = kafka_broker.new_topic("grows", 2)
    first = _produce(kafka_broker, topic, 0, 6, partitions=2)
    _kafka_run(spark, home, tmp_path, kafka_broker, topic, kafka_format)
    assert _out(spark, tmp_path) == _kafka_rows(first)
    kafka_broker.add_partitions(topic, 3)
    # Partition 2 did not exist when the checkpoint's last offsets were written.
    second = _produce(kafka_broker, topic, 6, 9, partitions=3)
    assert {r[1] for r in second} == {0, 1, 2}
    _kafka_run(spark, home, tmp_path, kafka_broker, topic, kafka_format)
    assert _out(spark, tmp_path) == _kafka_rows(first + second)


def test_kafka_timestamp_older_than_retention_starts_at_the_earliest_record_held(
    spark: object, home: Home, tmp_path: Path, kafka_broker: KafkaBroker
) -> None:
    """Kafka's offsets-for-times gives the first record at or after the time among those the
    broker still holds: a time before the topic's retention resolves to the log start, and
    the startpoint says that what came before it was deleted."""
    kafka_format = "kafka"  # Spark's connector (the resolution is the broker's, not the source's)
    topic = kafka_broker.new_topic("retained", 2)
    three_days_ago = (int(time.time()) - 3 * 86_400) * 1000
    old = _produce(kafka_broker, topic, 0, 4, partitions=2, base_ms=three_days_ago)
    _kafka_run(spark, home, tmp_path, kafka_broker, topic, kafka_format)
    assert _out(spark, tmp_path) == _kafka_rows(old)
    # Keep one day: the broker deletes the old records at its next retention check.
    kafka_broker.set_topic_config(topic, {"retention.ms": str(DAY_MS)})
    wait_for(lambda: all(kafka_broker.watermarks(topic, p)[0] == 2 for p in (0, 1)), 120,
             "the old records deleted by retention")
    recent = _produce(kafka_broker, topic, 4, 4, partitions=2)
    _kafka_run(spark, home, tmp_path, kafka_broker, topic, kafka_format)
    newer = _produce(kafka_broker, topic, 8, 2, partitions=2)
    before_retention = dt.datetime.fromtimestamp(three_days_ago / 1000 - 3600, dt.UTC)
    shown = sparkpoint(home, "startpoint", "set", "k", "events", "--timestamp",
                       before_retention.isoformat(), "--json")
    assert shown.code == 0, shown.err
    held = "the earliest offset the broker holds; offsets below 2 were deleted"
    assert shown.json()["resolves_to"]["positions"] == [
        f"{topic}-0: 4 -> 2 ({held})", f"{topic}-1: 4 -> 2 ({held})"]
    _kafka_run(spark, home, tmp_path, kafka_broker, topic, kafka_format)
    # Every record still held is read again once; the deleted ones cannot be.
    assert _out(spark, tmp_path) == _kafka_rows(old + recent + recent + newer)
    applied = sparkpoint(home, "jobs", "show", "k", "--json").json()["startpoints_applied"]
    assert [a["source"] for a in applied] == ["events"]


def test_kafka_reader_options_and_rate_limit(kafka_broker: KafkaBroker) -> None:
    """The reader on its own (as Spark drives it): starting positions, read limits, rows."""
    from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

    from sparkpoint.sources.kafka import KafkaStreamReader

    topic = kafka_broker.new_topic("reader", 2)
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": kafka_broker.bootstrap})
    for i in range(10):
        producer.produce(topic, key=f"k{i}".encode(), value=f"v{i}".encode(), partition=i % 2,
                         timestamp=BASE_MS + i * 1000)
    producer.flush(30)

    def reader(**options: str) -> KafkaStreamReader:
        return KafkaStreamReader({"kafka.bootstrap.servers": kafka_broker.bootstrap,
                                  "subscribe": topic, **options})

    assert reader().initialOffset() == {topic: {"0": 5, "1": 5}}  # Spark's default: latest
    assert reader(startingOffsets="earliest").initialOffset() == {topic: {"0": 0, "1": 0}}
    assert reader(startingOffsets=f'{{"{topic}":{{"0":3,"1":-2}}}}').initialOffset() == {
        topic: {"0": 3, "1": 0}}
    # Record 6 is partition 0's offset 3; partition 1's first at or after it is record 7.
    assert reader(startingTimestamp=str(BASE_MS + 6000)).initialOffset() == {
        topic: {"0": 3, "1": 3}}
    limited = reader(startingOffsets="earliest", maxOffsetsPerTrigger="3")
    start = limited.initialOffset()
    assert isinstance(limited.getDefaultReadLimit(), ReadMaxRows)
    end = limited.latestOffset(start, limited.getDefaultReadLimit())
    assert sum(end[topic].values()) - sum(start[topic].values()) == 3
    assert limited.latestOffset(start, ReadAllAvailable()) == {topic: {"0": 5, "1": 5}}
    rows = [row for part in limited.partitions(start, {topic: {"0": 2, "1": 0}})
            for row in limited.read(part)]
    assert [(r[0], r[1], r[2], r[3], r[4], r[6]) for r in rows] == [
        (b"k0", b"v0", topic, 0, 0, 0), (b"k2", b"v2", topic, 0, 1, 0)]
    assert rows[1][5] == dt.datetime.fromtimestamp((BASE_MS + 2000) / 1000, dt.UTC)


def test_kafka_reader_refuses_records_the_broker_no_longer_holds(
    kafka_broker: KafkaBroker
) -> None:
    """A checkpoint's position below the log start (records deleted by retention before the
    job read them) fails the batch naming what is lost, instead of skipping past it."""
    from sparkpoint.sources.kafka import KafkaRange, KafkaSourceError, KafkaStreamReader

    topic = kafka_broker.new_topic("gone", 1)
    three_days_ago = (int(time.time()) - 3 * 86_400) * 1000
    _produce(kafka_broker, topic, 0, 4, partitions=1, base_ms=three_days_ago)
    kafka_broker.set_topic_config(topic, {"retention.ms": str(DAY_MS)})
    wait_for(lambda: kafka_broker.watermarks(topic, 0)[0] == 4, 120,
             "the old records deleted by retention")
    kept = _produce(kafka_broker, topic, 4, 2, partitions=1)
    reader = KafkaStreamReader({"kafka.bootstrap.servers": kafka_broker.bootstrap,
                                "subscribe": topic})
    with pytest.raises(KafkaSourceError) as refused:
        list(reader.read(KafkaRange(topic, 0, 1, 6)))
    assert str(refused.value).startswith(
        f"offsets 1..3 of {topic}-0 are no longer on the broker (its earliest offset is 4")
    assert f"--earliest --partition {topic}:0" in str(refused.value)
    held = [(o, v.encode()) for _, _, o, v, _ in kept]
    assert [(r[4], r[1]) for r in reader.read(KafkaRange(topic, 0, 4, 6))] == held
    # A partition the batch's start does not know (added since) is read from its earliest.
    [added] = reader.partitions({}, {topic: {"0": 6}})
    assert [(r[4], r[1]) for r in reader.read(added)] == held


def test_a_start_with_startpoints_proves_the_partitions_they_leave_where_they_were(
    spark: object, home: Home, tmp_path: Path, kafka_broker: KafkaBroker
) -> None:
    """A startpoint moves partition 0; partition 1 stays at its committed offset, below which
    the broker has since deleted records. The start is refused before anything is recorded
    (the startpoint stays pending, the checkpoint unchanged), naming partition 1 and the
    count; with --accept-data-loss partition 1 goes on from the earliest offset held, as
    part of the startpoints' application, and the loss is in the job's lineage."""
    from sparkpoint.checkpoint.layout import Checkpoint
    from sparkpoint.errors import SourceDataLostError

    topic = kafka_broker.new_topic("kept", 2)
    records = _produce(kafka_broker, topic, 0, 8, partitions=2)
    _kafka_run(spark, home, tmp_path, kafka_broker, topic, "kafka")
    checkpoint = Checkpoint(home.checkpoint_dir("k"))
    batch = checkpoint.require_latest_committed_batch()
    committed = checkpoint.offsets(batch).to_bytes()
    done = sparkpoint(home, "startpoint", "set", "k", "events", "--partition", "0",
                      "--offset", "2")
    assert done.code == 0, done.err
    later = _produce(kafka_broker, topic, 8, 8, partitions=2)
    kafka_broker.delete_records(topic, {1: 6})
    lost = 6 - 4  # partition 1's committed offset is 4: its four records were read

    params = {"source": "kafka", "bootstrap": kafka_broker.bootstrap, "topic": topic,
              "output": str(tmp_path / "out"), "kafka_format": "kafka"}
    with pytest.raises(SourceDataLostError) as refused:
        api.run(home, JOB, "k", params=params, until_caught_up=True,
                spark=spark)  # type: ignore[arg-type]
    line = refused.value.message
    assert refused.value.exit_code == 4 and "\n" not in line, line
    assert (f"job 'k' not started, nothing was changed: source 'events' resumes at Kafka "
            "offsets the broker no longer holds (deleted, e.g. by the topic's retention): "
            f"{lost} record(s) of {topic}-1 (offsets 4..5;") in line, line
    assert f"{topic}-0" not in line, line
    assert checkpoint.require_latest_committed_batch() == batch
    assert checkpoint.offsets(batch).to_bytes() == committed
    assert [s["kind"] for s in sparkpoint(home, "startpoint", "list", "k",
                                          "--json").json()] == ["offset"]

    api.run(home, JOB, "k", params=params, until_caught_up=True, accept_data_loss=True,
            spark=spark)  # type: ignore[arg-type]
    everything = records + later
    again = [r for r in everything if r[1] == 0 and r[2] >= 2]
    held_in_1 = [r for r in later if r[1] == 1 and r[2] >= 6]
    assert _out(spark, tmp_path) == _kafka_rows(records) + _kafka_rows(again + held_in_1)
    shown = sparkpoint(home, "jobs", "show", "k", "--json").json()
    assert [(a["topic"], a["partition"], a["records"]) for a in
            shown["lineage"]["accepted_loss"]] == [(topic, 1, lost)]
    [applied] = shown["startpoints_applied"]
    assert f"{topic}-1: 4 -> 6 ({lost} record(s) deleted from the broker, accepted with " \
           "--accept-data-loss)" in applied["positions"], applied


def test_a_startpoint_from_a_consumer_groups_commits_moves_a_job_off_its_application(
    spark: object, home: Home, tmp_path: Path, kafka_broker: KafkaBroker
) -> None:
    """A job taking over from a Kafka consumer application starts each partition where the
    application's consumer group committed (read from the broker when the startpoint is
    applied); a partition the group never committed keeps the job's own position; a group
    that committed nothing, or a position the topic's retention deleted, is refused with
    nothing stored."""
    from confluent_kafka import Consumer, TopicPartition

    topic = kafka_broker.new_topic("legacy", 3)
    records = _produce(kafka_broker, topic, 0, 12)
    _kafka_run(spark, home, tmp_path, kafka_broker, topic, "sparkpoint-kafka")
    assert _out(spark, tmp_path) == _kafka_rows(records)
    later = _produce(kafka_broker, topic, 12, 6)

    def commit(group: str, offsets: dict[int, int]) -> None:
        consumer = Consumer({"bootstrap.servers": kafka_broker.bootstrap, "group.id": group,
                             "enable.auto.commit": False})
        try:
            consumer.commit(offsets=[TopicPartition(topic, part, offset)
                                     for part, offset in offsets.items()], asynchronous=False)
        finally:
            consumer.close()

    # The application read partition 0 up to offset 1 and partition 1 up to 3; it never
    # committed partition 2.
    commit("billing-app", {0: 1, 1: 3})
    nothing = sparkpoint(home, "startpoint", "set", "k", "events", "--group", "no-such-app")
    assert nothing.code == 3, nothing.err
    assert "group no-such-app: the consumer group has committed no offset" in nothing.err
    assert sparkpoint(home, "startpoint", "list", "k", "--json").json() == []

    shown = sparkpoint(home, "startpoint", "set", "k", "events", "--group", "billing-app",
                       "--json")
    assert shown.code == 0, shown.err
    assert shown.json()["resolves_to"]["offset_after"] == {topic: {"0": 1, "1": 3, "2": 4}}
    assert f"{topic}-2: 4 (no offset committed by group 'billing-app': unchanged)" in \
        shown.json()["resolves_to"]["positions"]
    _kafka_run(spark, home, tmp_path, kafka_broker, topic, "sparkpoint-kafka")
    everything = records + later
    again = [r for r in everything if (r[1] == 0 and r[2] >= 1) or (r[1] == 1 and r[2] >= 3)]
    new_in_2 = [r for r in later if r[1] == 2]
    assert _out(spark, tmp_path) == _kafka_rows(records) + _kafka_rows(again + new_in_2)

    # The application's position in partition 0 deleted since (as by the topic's
    # retention): refused, naming what is gone and how to go on; nothing stored.
    kafka_broker.delete_records(topic, {0: 3})
    gone = sparkpoint(home, "startpoint", "set", "k", "events", "--group", "billing-app")
    assert gone.code == 3, gone.err
    end = kafka_broker.watermarks(topic, 0)[1]
    assert gone.err.strip() == (
        f"error: [VALIDATION_FAILED] startpoint events: group billing-app: the group "
        f"committed offset 1 of {topic}-0, outside what the broker holds (3..{end})"
        f"; the records from 1 to 2 were deleted (the topic's retention): set this partition "
        f"with --partition {topic}:0 --earliest to read what is left"), gone.err
    assert sparkpoint(home, "startpoint", "list", "k", "--json").json() == []
