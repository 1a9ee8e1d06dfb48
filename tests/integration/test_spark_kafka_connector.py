"""Jobs reading Kafka with Spark's own connector (``format("kafka")``, spark-sql-kafka-0-10
4.2.0 on pyspark 4.3.0; scripts/test-deps.sh fetches it) on the real broker: what Kafka's own
tools show of the job (a consumer group, opt-in), the lag read from the broker, a new Kafka
source in a resume point, and the connector's behaviour that sparkpoint builds on, each pinned
by a test that names it. Startpoints and import with the connector: test_startpoints.py and
test_adopt_plain_spark.py run their Kafka scenarios with it."""

from __future__ import annotations

import datetime as dt
import subprocess
import time
from collections import Counter
from pathlib import Path

import pytest

from sparkpoint import api
from sparkpoint.storage.home import Home
from sparkpoint.testing import (
    output_rows,
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
             timestamp_ms: int | None = None) -> list[Record]:
    """Value i to partition i % partitions; the rows the passthrough job makes of them."""
    from confluent_kafka import Producer

    rows: list[Record] = []
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for i, value in enumerate(values):
        extra = {} if timestamp_ms is None else {"timestamp": timestamp_ms}
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
    # The broker's own tool: every partition at its end, nothing behind.
    assert _group_offsets(kafka_broker, "watchers") == {(topic, p): (5, 0) for p in range(3)}

    later = _produce(kafka_broker, topic, [f"w{i}" for i in range(6)], 3)
    shown = sparkpoint(home, "jobs", "show", "k", "--json")
    assert shown.code == 0, shown.err
    assert shown.json()["records_behind"] == {"events": {f"{topic}-{p}": 2 for p in range(3)}}
    listed = sparkpoint(home, "jobs", "list")
    assert "6 records" in listed.out, listed.out
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


def _connector_jars() -> str:
    from tests.conftest import kafka_connector_jars

    return kafka_connector_jars()
