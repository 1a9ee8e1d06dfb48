"""Closing the state stores a finished run left loaded in a JVM that goes on running.

Spark keeps a query's state store providers loaded after the query stopped, until its next
maintenance pass (``StateStore``'s ``loadedProviders``, every
``spark.sql.streaming.stateStore.maintenanceInterval``, 60 s by default), and that pass
first runs the provider's own maintenance: the HDFS-backed provider writes a
``<version>.snapshot`` from its in-memory map, RocksDB uploads a queued snapshot and deletes
old files, into the job's checkpoint. In a CLI process the process exits first. In a process
that goes on (a notebook, spark-submit, the in-driver API) that write would come after the
run let go of the job's lease and its fence: another holder may own the checkpoint by then,
or the job may have been deleted and started again under its name from a snapshot, and a
snapshot file of the old run's map would then take precedence over the new state.

``StateStore.stop()`` closes every loaded provider without its maintenance (as a process exit
does) and stops the maintenance task; the next stateful query loads and starts them again
from the files. It is JVM-wide, so it is done only while no streaming query runs there: a
caller's own query keeps its providers (and the stale ones stay until the pass, as in plain
Spark)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

STATE_STORE = "org.apache.spark.sql.execution.streaming.state.StateStore"


def close_idle_state_stores(spark: SparkSession) -> bool:
    """Close every loaded state store provider if no streaming query runs in this JVM;
    whether it did."""
    if not spark._jsparkSession.sharedState().activeStreamingQueries().isEmpty():
        return False
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    getattr(jvm, STATE_STORE).stop()
    return True


def maintenance_running(spark: SparkSession) -> bool:
    """Whether Spark's state store maintenance task runs in this JVM."""
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    return bool(getattr(jvm, STATE_STORE).isMaintenanceRunning())
