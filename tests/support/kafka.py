"""A real Apache Kafka broker on loopback for the Kafka tests: one JVM in KRaft mode (broker
and controller combined), from the jars scripts/test-deps.sh fetched, started once per test
session; each test creates its own topics."""

from __future__ import annotations

import base64
import shutil
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from tests.support.s3 import free_port
from tests.support.servers import stop_process_group

REPO = Path(__file__).resolve().parents[2]
BROKER_LIB = REPO / ".cache" / "kafka-broker" / "lib"
# Generous: on a busy two-core machine a JVM has taken 90 s to start.
START_TIMEOUT_SECONDS = 300
TIMEOUT_S = 30.0


@dataclass(frozen=True)
class KafkaBroker:
    # host:port of the PLAINTEXT listener, what clients and the sources are given.
    bootstrap: str
    # Seconds from launching the broker's JVM to its first metadata answer.
    start_seconds: float

    def create_topic(self, name: str, partitions: int,
                     config: Mapping[str, str] | None = None) -> str:
        from confluent_kafka.admin import AdminClient, NewTopic

        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        topic = NewTopic(name, num_partitions=partitions, replication_factor=1,
                         config=dict(config or {}))
        for future in admin.create_topics([topic], operation_timeout=TIMEOUT_S).values():
            future.result(TIMEOUT_S)
        return name

    def new_topic(self, prefix: str, partitions: int,
                  config: Mapping[str, str] | None = None) -> str:
        """A topic no other test uses."""
        return self.create_topic(f"{prefix}-{uuid.uuid4().hex[:8]}", partitions, config)

    def add_partitions(self, topic: str, total: int) -> None:
        from confluent_kafka.admin import AdminClient, NewPartitions

        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        for future in admin.create_partitions([NewPartitions(topic, total)],
                                              operation_timeout=TIMEOUT_S).values():
            future.result(TIMEOUT_S)

    def set_topic_config(self, topic: str, config: Mapping[str, str]) -> None:
        from confluent_kafka.admin import (
            AdminClient,
            AlterConfigOpType,
            ConfigEntry,
            ConfigResource,
            ResourceType,
        )

        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        resource = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[
            ConfigEntry(key, value, incremental_operation=AlterConfigOpType.SET)
            for key, value in config.items()])
        for future in admin.incremental_alter_configs([resource]).values():
            future.result(TIMEOUT_S)

    def delete_records(self, topic: str, before: Mapping[int, int]) -> None:
        """Delete each partition's records below an offset (Kafka's DeleteRecords, what
        retention does a segment at a time): the log start offset moves there at once."""
        from confluent_kafka import TopicPartition
        from confluent_kafka.admin import AdminClient

        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        wanted = [TopicPartition(topic, partition, offset) for partition, offset in before.items()]
        for future in admin.delete_records(wanted, operation_timeout=TIMEOUT_S).values():
            future.result(TIMEOUT_S)

    def watermarks(self, topic: str, partition: int) -> tuple[int, int]:
        """(log start offset, next offset) of a partition, as the broker reports them now."""
        from confluent_kafka import Consumer, TopicPartition

        consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": "tests"})
        try:
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition),
                                                       timeout=TIMEOUT_S, cached=False)
            return int(low), int(high)
        finally:
            consumer.close()


def _properties(data_dir: Path, port: int, controller_port: int) -> str:
    settings = {
        "process.roles": "broker,controller",
        "node.id": "1",
        "controller.quorum.voters": f"1@127.0.0.1:{controller_port}",
        "listeners": f"PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port}",
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{port}",
        "controller.listener.names": "CONTROLLER",
        "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
        "inter.broker.listener.name": "PLAINTEXT",
        "log.dirs": str(data_dir),
        "num.partitions": "1",
        "offsets.topic.replication.factor": "1",
        "offsets.topic.num.partitions": "1",
        "transaction.state.log.replication.factor": "1",
        "transaction.state.log.min.isr": "1",
        "group.initial.rebalance.delay.ms": "0",
        # A topic's retention.ms takes effect within a second (the default checks every 5
        # minutes), for the test of a startpoint older than what the broker holds.
        "log.retention.check.interval.ms": "500",
        "log.initial.task.delay.ms": "0",  # (else the first check waits 30 s after start)
        # Kafka's default, spelled out: retention goes by record time and the tests stamp
        # records an hour back; a test shortens one topic's retention.ms when it needs to.
        "log.retention.hours": "168",
    }
    return "".join(f"{key}={value}\n" for key, value in settings.items())


def _cluster_id() -> str:
    """A random cluster id in Kafka's form: a UUID as URL-safe base64 without padding. Not
    one starting with '-': kafka-storage's argument parser takes that for an option (one id
    in 64 did, and the broker's start failed)."""
    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        if not cluster_id.startswith("-"):
            return cluster_id


def _answers(bootstrap: str) -> bool:
    host, port = bootstrap.rsplit(":", 1)
    with socket.socket() as probe:
        if probe.connect_ex((host, int(port))) != 0:
            return False
    from confluent_kafka.admin import AdminClient

    try:
        metadata = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0}).list_topics(
            timeout=5)
    except Exception:  # any failure means: not ready yet
        return False
    return bool(metadata.brokers)


def start_kafka_broker(work_dir: Path) -> Iterator[KafkaBroker]:
    """Format a KRaft log directory under ``work_dir``, start the broker, yield it once it
    answers metadata requests, and stop its process group afterwards."""
    if not BROKER_LIB.is_dir():
        raise RuntimeError(f"the Kafka broker jars are missing from {BROKER_LIB}; run bash "
                           "scripts/test-deps.sh (scripts/test.sh runs it)")
    java = shutil.which("java")
    if java is None:
        raise RuntimeError("java is not on PATH; the Kafka broker needs Java 17")
    port, controller_port = free_port(), free_port()
    data_dir = work_dir / "data"
    config = work_dir / "server.properties"
    config.write_text(_properties(data_dir, port, controller_port))
    log_path = work_dir / "broker.log"
    # The client JIT alone and the serial collector: far less CPU to start on a busy two-core
    # machine; the load of the tests is tiny.
    jvm = [java, "-Xmx512m", "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC",
           f"-Djava.io.tmpdir={work_dir}", "-cp", f"{BROKER_LIB}/*"]
    started = time.monotonic()
    with open(log_path, "wb") as out:
        formatted = subprocess.run(
            [*jvm, "kafka.tools.StorageTool", "format", "-t", _cluster_id(), "-c", str(config)],
            stdout=out, stderr=subprocess.STDOUT, timeout=START_TIMEOUT_SECONDS)
    if formatted.returncode != 0:
        raise RuntimeError(f"formatting the Kafka log directory failed; see {log_path}")
    log = open(log_path, "ab")  # noqa: SIM115 - open while the broker runs
    # Its own process group, so that stopping it cannot leave a JVM behind.
    process = subprocess.Popen([*jvm, "kafka.Kafka", str(config)], stdout=log,
                               stderr=subprocess.STDOUT, start_new_session=True)
    bootstrap = f"127.0.0.1:{port}"
    try:
        deadline = started + START_TIMEOUT_SECONDS
        while not _answers(bootstrap):
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the Kafka broker did not start; see {log_path}")
            time.sleep(0.5)  # polling for readiness, not synchronising test steps
        broker = KafkaBroker(bootstrap, round(time.monotonic() - started, 1))
        (work_dir / "start_seconds").write_text(f"{broker.start_seconds}\n")
        yield broker
    finally:
        stop_process_group(process)
        log.close()

