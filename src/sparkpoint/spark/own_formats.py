"""sparkpoint's own source format, ``sparkpoint-kafka``, registered in a job's session only
when the job's build names it.

Registering a Python data source is not free: the first registration in a JVM makes Spark
look up the static Python data sources first (``DataSourceManager
.initialStaticDataSourceBuilders``, 4.3.0), which starts a Python worker
(``pyspark.sql.worker.lookup_data_sources``). Measured on this 2-core machine: 1.8 s and 3.5
CPU-seconds, about a quarter of a small job's whole run. Reading files or Spark's own Kafka
connector never triggers that lookup, so a job that does not use sparkpoint's Kafka source
should not pay for it at every start. Pinned by tests/integration/test_own_formats.py.
"""

from __future__ import annotations

from pyspark.sql import SparkSession
from pyspark.sql.streaming.readwriter import DataStreamReader

from sparkpoint.sources.kafka import FORMAT as KAFKA_FORMAT
from sparkpoint.sources.kafka import KafkaDataSource


def register_own_formats(spark: SparkSession) -> None:
    """Register sparkpoint's source formats in ``spark`` (its JVM session) unless they are
    there: registering again would log that the source replaced itself."""
    manager = spark._jsparkSession.sessionState().dataSourceManager()
    if not manager.dataSourceExists(KAFKA_FORMAT):
        spark.dataSource.register(KafkaDataSource)


def formats_on_demand(spark: SparkSession) -> SparkSession:
    """``spark`` (the same JVM session: its confs, views and functions) as handed to a job's
    build: its ``readStream.format`` registers sparkpoint's formats the first time one is
    named, in that session."""
    return _SessionWithOwnFormats(spark.sparkContext, spark._jsparkSession)


class _ReaderWithOwnFormats(DataStreamReader):
    def format(self, source: str) -> DataStreamReader:
        if source.lower() == KAFKA_FORMAT:
            register_own_formats(self._spark)
        return super().format(source)


class _SessionWithOwnFormats(SparkSession):
    @property
    def readStream(self) -> DataStreamReader:
        return _ReaderWithOwnFormats(self)
