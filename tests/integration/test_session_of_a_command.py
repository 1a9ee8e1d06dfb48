"""A sparkpoint command in a process that already runs Spark (a notebook, spark-submit, a
test) gets a session of its own: PySpark's ``Builder.getOrCreate`` would return the process's
default session and set the command's confs on it (``applyModifiableSettings``)."""

from __future__ import annotations

from typing import Any

import pytest

pytestmark = pytest.mark.spark


def test_a_command_over_a_running_jvm_sets_its_confs_on_a_session_of_its_own(spark: Any) -> None:
    from sparkpoint.spark.session import apply_query_conf, create_session

    partitions = spark.conf.get("spark.sql.shuffle.partitions")
    own = create_session("local[2]", {"spark.sql.shuffle.partitions": "7"}, "a command")
    apply_query_conf(own, {"spark.hadoop.fs.s3a.endpoint": "http://elsewhere:9000"})

    assert not own._jsparkSession.equals(spark._jsparkSession)
    assert own.sparkContext is spark.sparkContext
    assert own.conf.get("spark.sql.shuffle.partitions") == "7"
    assert own.conf.get("fs.s3a.endpoint") == "http://elsewhere:9000"
    # The process's session keeps what it had: none of the command's settings.
    assert spark.conf.get("spark.sql.shuffle.partitions") == partitions
    assert spark.conf.get("fs.s3a.endpoint", None) is None
    assert spark.conf.get("spark.sql.streaming.stateStore.providerClass", None) != \
        own.conf.get("spark.sql.streaming.stateStore.providerClass")
    # A static SQL conf cannot change in a running JVM: left as it started, no error.
    again = create_session("local[2]", {"spark.sql.warehouse.dir": "/elsewhere"}, "another")
    assert again.conf.get("spark.sql.warehouse.dir") == spark.conf.get("spark.sql.warehouse.dir")
