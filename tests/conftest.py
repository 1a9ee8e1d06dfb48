from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import spark_session
from tests.support.jvm import use_fast_start_jvms
from tests.support.spark_session import KAFKA_CONNECTOR_JARS, S3A_JARS

# Spark and Python must agree on the wall clock zone for timestamps to compare.
os.environ["TZ"] = "UTC"
time.tzset()
# Before any JVM starts: the session fixture's and every CLI process's driver inherit them.
use_fast_start_jvms()

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = REPO / "examples"
SHUFFLE_PARTITIONS = spark_session.SHUFFLE_PARTITIONS
# Delta Lake (scripts/test-deps.sh), for the plain job of test_delta_sink.py only.
DELTA_JARS = REPO / ".cache" / "delta" / "lib"


def _jars_in_place(lib: Path) -> str:
    """The jars of ``lib`` as spark.jars takes them, as ``local:`` URIs: jars already where
    every executor finds them (here the driver's own JVM, local[2]), used in place. A plain
    path is copied by each executor into its work directory when the session starts: the
    AWS SDK bundle s3a needs is 686 MB, which cost every CLI run on an S3 home about 5 s of
    CPU and left a copy in /tmp. Nothing else changes: the driver loads them from its class
    path either way (SparkSubmit adds both kinds to it in client mode)."""
    jars = sorted(str(jar) for jar in lib.glob("*.jar"))
    if not jars:
        pytest.fail(f"no jars in {lib}: run scripts/test-deps.sh")
    return ",".join(f"local:{jar}" for jar in jars)


def kafka_connector_jars() -> str:
    """The connector's jars as spark.jars takes them, for jobs run by the CLI."""
    return _jars_in_place(KAFKA_CONNECTOR_JARS)


def delta_jars() -> str:
    """Delta Lake's jars as spark.jars takes them."""
    return _jars_in_place(DELTA_JARS)


def s3a_jars() -> str:
    """hadoop-aws and the AWS SDK as spark.jars takes them, for jobs on an S3 home run by the
    CLI."""
    return _jars_in_place(S3A_JARS)


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    """One SparkSession for the whole test session, created the way sparkpoint creates one;
    the CLI commands a test runs in this process share its JVM (tests/support/cli.py)."""
    yield spark_session.shared_session()
    spark_session.stop()


@pytest.fixture
def home(tmp_path: Path) -> object:
    from sparkpoint.storage.home import Home

    return Home(tmp_path / "home")


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    """moto's S3 server on loopback, once per test session; AWS_* variables point at it."""
    from tests.support.s3 import start_s3_server

    yield from start_s3_server(tmp_path_factory.mktemp("s3"))


@pytest.fixture(scope="session")
def hdfs_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    """A MiniDFSCluster on loopback (jars from scripts/test-deps.sh), once per test session;
    SPARKPOINT_WEBHDFS_URL points sparkpoint's WebHDFS store at its NameNode."""
    from tests.support.hdfs import start_hdfs_server

    yield from start_hdfs_server(tmp_path_factory.mktemp("hdfs"))


@pytest.fixture(scope="session")
def kafka_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    """An Apache Kafka broker in KRaft mode on loopback (jars from scripts/test-deps.sh), once
    per test session; every test creates its own topics."""
    from tests.support.kafka import start_kafka_broker

    yield from start_kafka_broker(tmp_path_factory.mktemp("kafka"))


@pytest.fixture(params=["s3", "hdfs"])
def remote_store(request: pytest.FixtureRequest) -> str:
    """A fresh place for snapshots on S3 (moto) or HDFS (MiniDFSCluster, over WebHDFS)."""
    if request.param == "hdfs":
        return f"{request.getfixturevalue('hdfs_server').new_dir()}/snaps"
    return f"s3://{request.getfixturevalue('s3_server').new_bucket()}/snaps"
