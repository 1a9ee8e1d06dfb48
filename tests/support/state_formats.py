"""The three ways Spark 4.3 writes a state version that tests of state readers cover: a
RocksDB zip (with or after changelogs), RocksDB changelogs, and the HDFS provider's files."""

from __future__ import annotations

import pytest

from sparkpoint.checkpoint.rocksdb_state import HDFS_PROVIDER, ROCKSDB_PROVIDER

CHANGELOG = "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled"

every_state_format = pytest.mark.parametrize(
    "provider,changelog",
    [(ROCKSDB_PROVIDER, "false"), (ROCKSDB_PROVIDER, "true"), (HDFS_PROVIDER, "false")],
    ids=["rocksdb", "rocksdb-changelog", "hdfs"],
)
