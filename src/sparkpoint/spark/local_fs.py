"""Rewriting state into a local directory without starting a process per file.

Without Hadoop's native library (pyspark ships none: ``NativeIO.isAvailable()`` is false),
Hadoop's local file system starts the ``chmod`` command for every file and directory it
creates, and its ``FileContext`` (Spark's default checkpoint file manager on ``file:``)
starts ``readlink`` for every rename. Measured on pyspark 4.3.0: Spark's state rewriter
writing 200 RocksDB partitions started about 4,500 processes, 3-5 ms each from the Spark
JVM, a third of the rewrite (pinned by tests/integration/test_local_fs.py).

sparkpoint's own rewrites (prune, Spark's offline repartition) write into scratch
directories of their own, so for those alone they use ``NIO_LOCAL_FS`` (sparkpoint's jar,
spark/own_jar.py: Hadoop's class with permissions set through java.nio) through Spark's
``FileSystem``-based checkpoint file manager. The user's jobs, and every other file, keep
Hadoop's and Spark's defaults. In a caller's session started without the jar the rewrites
run with the defaults: slower, the same result.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from sparkpoint.spark import own_jar

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

NIO_LOCAL_FS = "sparkpoint.hadoop.NioLocalFileSystem"
# SQLConf.STREAMING_CHECKPOINT_FILE_MANAGER_CLASS, read from the Hadoop configuration.
FILE_MANAGER_CONF = "spark.sql.streaming.checkpointFileManagerClass"
FILE_SYSTEM_MANAGER = ("org.apache.spark.sql.execution.streaming.checkpointing."
                       "FileSystemBasedCheckpointFileManager")


def rewrite_settings(spark: SparkSession) -> dict[str, str]:
    """The Hadoop settings that route a rewrite's ``file:`` writes through the class; none
    when the session's JVM cannot load it (a caller's session started without the jar)."""
    if not own_jar.loadable(spark, NIO_LOCAL_FS):
        return {}
    return {
        "fs.file.impl": NIO_LOCAL_FS,
        # FileSystem.get caches one instance per scheme: a cached default would be reused.
        "fs.file.impl.disable.cache": "true",
        FILE_MANAGER_CONF: FILE_SYSTEM_MANAGER,
    }


@contextmanager
def in_session(spark: SparkSession) -> Iterator[None]:
    """The settings in the session's conf while the block runs (Spark's offline repartition
    takes its Hadoop configuration from the session), restored after."""
    settings = rewrite_settings(spark)
    before = {key: spark.conf.get(key, None) for key in settings}
    for key, value in settings.items():
        spark.conf.set(key, value)
    try:
        yield
    finally:
        for key, earlier in before.items():
            if earlier is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, earlier)
