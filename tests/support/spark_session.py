"""The test process's one Spark session: the ``spark`` fixture's, and the JVM the CLI runs
in when a test drives it in this process (``tests/support/cli.py``)."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from sparkpoint.spark.session import create_session as _create_session

REPO = Path(__file__).resolve().parents[2]
SHUFFLE_PARTITIONS = "2"
# hadoop-aws and the AWS SDK (scripts/test-deps.sh), so that the session reaches s3a://.
S3A_JARS = REPO / ".cache" / "s3a" / "lib"
# Spark's Kafka connector and its dependencies (scripts/test-deps.sh), for format("kafka").
KAFKA_CONNECTOR_JARS = REPO / ".cache" / "kafka-connector" / "lib"
# Jars on the session's class path: a CLI command given them as spark.jars finds them there.
CLASS_PATH_JAR_DIRS = (S3A_JARS, KAFKA_CONNECTOR_JARS)

_session: Any = None


def shared_session() -> Any:
    """The session, started once per test process the way sparkpoint starts one (its own
    jar, its defaults); ``create_session`` is the one imported here, so a test that forbids
    sparkpoint's sessions (``tests/support/jvm.py``) still gets it."""
    global _session
    if _session is None:
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        conf = {
            "spark.sql.shuffle.partitions": SHUFFLE_PARTITIONS,
            # The state store maintenance thread keeps the interval of the first stateful
            # query in the JVM; a short one lets HDFS-provider tests see Spark write snapshot
            # files.
            "spark.sql.streaming.stateStore.maintenanceInterval": "500ms",
        }
        jars = sorted(str(jar) for lib in CLASS_PATH_JAR_DIRS for jar in lib.glob("*.jar"))
        if jars:
            # On the driver's class path (the executors of local[2] are in the same JVM):
            # read from there when s3a:// or format("kafka") is first used, nothing copied at
            # startup as spark.jars is.
            conf["spark.driver.extraClassPath"] = os.pathsep.join(jars)
        _session = _create_session("local[2]", conf, "sparkpoint-tests")
    return _session


def running() -> bool:
    return _session is not None


def stop() -> None:
    global _session
    if _session is not None:
        _session.stop()
        _session = None
