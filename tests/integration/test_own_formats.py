"""sparkpoint's own source format (``sparkpoint-kafka``) is registered in a job's session
only when the job's build names it (spark/own_formats.py): registering a Python data source
makes Spark start a Python worker to look up the static ones, which a job reading files or
Spark's Kafka connector should not pay for. Jobs that do name it run end to end in
test_startpoints.py and test_adopt_plain_spark.py (Kafka)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from typing import Any

import pytest

from sparkpoint.sources.kafka import FORMAT
from sparkpoint.spark.job_session import session_for_job
from sparkpoint.spark.own_formats import formats_on_demand

pytestmark = pytest.mark.spark


def _registered(session: Any) -> bool:
    return bool(session._jsparkSession.sessionState().dataSourceManager()
                .dataSourceExists(FORMAT))


def test_registering_a_python_data_source_makes_spark_look_up_the_static_ones() -> None:
    """pyspark 4.3.0: reading files leaves Spark's registry of static Python data sources
    unloaded; the first registration of a Python data source loads it (by a Python worker
    running pyspark.sql.worker.lookup_data_sources)."""
    script = textwrap.dedent(f"""
        from pyspark.sql import SparkSession
        from sparkpoint.sources.kafka import KafkaDataSource
        spark = (SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false")
                 .getOrCreate())
        manager = getattr(spark._jvm.org.apache.spark.sql.execution.datasources,
                          "DataSourceManager$").__getattr__("MODULE$")
        spark.readStream.schema("a STRING").json({str(__file__)!r})
        print("after reading files:", manager.dataSourceBuilders().isDefined())
        spark.dataSource.register(KafkaDataSource)
        print("after registering:", manager.dataSourceBuilders().isDefined())
        spark.stop()
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.splitlines()[-2:] == ["after reading files: False",
                                             "after registering: True"], done.stdout


def test_a_build_gets_sparkpoint_kafka_in_its_session_only_when_it_names_it(
    spark: Any
) -> None:
    files_job = formats_on_demand(session_for_job(spark))
    files_job.readStream.format("json").schema("a STRING")
    assert not _registered(files_job)

    kafka_job = formats_on_demand(session_for_job(spark))
    # Spark's format names are case-insensitive; the source is named before load().
    reader = kafka_job.readStream.format("SparkPoint-Kafka")
    assert _registered(kafka_job)
    assert not _registered(spark), "the caller's own session got the source"
    frame = (reader.option("kafka.bootstrap.servers", "127.0.0.1:1").option("subscribe", "t")
             .load())
    assert frame.isStreaming and "offset" in frame.columns
    # Naming it again in the same session keeps the registered source: registering again
    # would put a new one in its place (and log that it replaced itself).
    registered = _registered_source(kafka_job)
    kafka_job.readStream.format(FORMAT)
    assert _registered_source(kafka_job) == registered


def _registered_source(session: Any) -> int:
    """The JVM identity of the source registered under sparkpoint's format."""
    source = session._jsparkSession.sessionState().dataSourceManager().lookupDataSource(FORMAT)
    return int(session._jvm.java.lang.System.identityHashCode(source))
