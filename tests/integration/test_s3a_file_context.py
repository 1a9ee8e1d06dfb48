"""Hadoop's FileContext binding of s3a closes its S3A client when it is finalized.

``org.apache.hadoop.fs.s3a.S3A`` (hadoop-aws 3.5.0; HADOOP-18476) wraps a new
``S3AFileSystem`` of its own and closes it in ``finalize()``. Spark's default checkpoint file
manager (``FileContextBasedCheckpointFileManager``) reads through such a FileContext, and
Spark makes short-lived managers (a metadata log read once by the state data source): once
a garbage collection finds the manager unreachable, a stream it opened reads through a
closed client, and the AWS SDK refuses the request ("rejected from
ScheduledThreadPoolExecutor ... Shutting down"). This happened in a CI run, inside Spark's
state reader. Spark's ``FileSystem``-based manager reads through Hadoop's cached
``FileSystem`` instead, which nothing closes while the JVM runs: sparkpoint gives it to every
session of a home on S3 (spark/s3a.py).
"""

from __future__ import annotations

from typing import Any

import pytest

from sparkpoint.spark.local_fs import FILE_MANAGER_CONF, FILE_SYSTEM_MANAGER
from sparkpoint.spark.s3a import s3a_conf

pytestmark = pytest.mark.spark

_FILE_CONTEXT_MANAGER = "FileContextBasedCheckpointFileManager"


def _read_after_the_manager_is_collected(spark: Any, url: str, manager: str) -> bytes:
    """Open ``url`` through a new checkpoint file manager of class ``manager`` (Spark's),
    let the JVM collect the manager and read the stream afterwards."""
    jvm = spark._jvm
    conf = spark.sparkContext._jsc.hadoopConfiguration()
    path = jvm.org.apache.hadoop.fs.Path(url)
    made = getattr(jvm.org.apache.spark.sql.execution.streaming.checkpointing, manager)(
        path.getParent(), conf)
    stream = made.open(path)
    # py4j's own release of its reference goes through a queue on another thread: told
    # here at once, so that nothing in the JVM references the manager before the collection.
    spark.sparkContext._gateway._gateway_client.garbage_collect_object(
        made._target_id, enqueue=False)
    jvm.System.gc()
    jvm.System.runFinalization()
    try:
        return bytes(jvm.org.apache.commons.io.IOUtils.toByteArray(stream))
    finally:
        stream.close()


def _write(spark: Any, url: str, data: bytes) -> None:
    """``data`` at ``url``, through Hadoop's cached s3a client (the session given the s3a
    settings of a home in the bucket)."""
    jvm = spark._jvm
    conf = spark.sparkContext._jsc.hadoopConfiguration()
    for key, value in s3a_conf(url, {}).items():
        if key.startswith("spark.hadoop."):
            conf.set(key.removeprefix("spark.hadoop."), value)
    path = jvm.org.apache.hadoop.fs.Path(url)
    out = path.getFileSystem(conf).create(path, True)
    out.write(bytearray(data))
    out.close()


def test_a_collected_file_context_manager_closes_its_s3a_client_and_the_file_system_one_does_not(
    spark: Any, s3_server: Any,
) -> None:
    from py4j.protocol import Py4JJavaError

    url = f"s3a://{s3_server.new_bucket()}/dir/file"
    data = bytes(range(256)) * 40
    _write(spark, url, data)
    with pytest.raises(Py4JJavaError, match="Client manager is closed"):
        _read_after_the_manager_is_collected(spark, url, _FILE_CONTEXT_MANAGER)
    assert _read_after_the_manager_is_collected(
        spark, url, FILE_SYSTEM_MANAGER.rsplit(".", 1)[1]) == data


def test_a_home_on_s3_gets_the_file_system_manager_unless_the_user_chose_one() -> None:
    url = "s3://bucket/home"
    assert s3a_conf(url, {})[FILE_MANAGER_CONF] == FILE_SYSTEM_MANAGER
    assert FILE_MANAGER_CONF not in s3a_conf(url, {FILE_MANAGER_CONF: "their.Manager"})
    assert FILE_MANAGER_CONF not in s3a_conf("hdfs://nn/home", {})
