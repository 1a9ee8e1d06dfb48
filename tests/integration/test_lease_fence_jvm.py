"""Spark's own checkpoint writes fenced by a lease's deadline in the driver's JVM
(spark/lease_fence.py, sparkpoint.spark.FencedCheckpointFileManager).

Pins two facts of Spark 4.3: ``CheckpointFileManager.create`` builds the class named by
``spark.sql.streaming.checkpointFileManagerClass`` (read from the query's Hadoop
configuration, which holds the session's SQL confs) for the offsets and commit logs, the
state store and the file sink's log; and a query whose write that class refuses fails
without committing the batch.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from sparkpoint.checkpoint.layout import Checkpoint
from sparkpoint.spark.lease_fence import FENCED_MANAGER, fence_spark_writes
from sparkpoint.spark.local_fs import FILE_MANAGER_CONF
from sparkpoint.storage.lease import LeaseStore
from sparkpoint.storage.stores import file_io
from sparkpoint.testing import write_clicks

pytestmark = pytest.mark.spark


def _query(spark: Any, inp: Path, checkpoint: Path, out: Path) -> Any:
    clicks = (spark.readStream.schema("event_id STRING, user STRING, url STRING, ts TIMESTAMP")
              .option("maxFilesPerTrigger", 1).json(str(inp)))
    counts = clicks.groupBy("user").count()
    return (counts.writeStream.format("memory").queryName(f"q{time.monotonic_ns()}")
            .outputMode("complete").option("checkpointLocation", str(checkpoint))
            .trigger(availableNow=True).start())


def test_spark_commits_nothing_once_the_lease_is_past_its_deadline(
    spark: Any, tmp_path: Path
) -> None:
    inp, checkpoint = tmp_path / "in", tmp_path / "ckpt"
    write_clicks(inp, range(0, 2))
    lease = LeaseStore(file_io(str(tmp_path)), str(tmp_path / "lease"), "j").acquire(
        print, length=60)
    spark.conf.set(FILE_MANAGER_CONF, FENCED_MANAGER)
    end = fence_spark_writes(spark, lease, [str(checkpoint)])
    try:
        query = _query(spark, inp, checkpoint, tmp_path / "out")
        query.awaitTermination()
        assert query.exception() is None
        committed = Checkpoint(checkpoint).latest_committed_batch()
        assert committed == 1

        # The lease is lost (its holder past its deadline): the JVM is told at once.
        with pytest.raises(Exception, match="lost its lease"):
            lease._lose("a test")
            lease.fence()
        write_clicks(inp, range(2, 4))
        refused = _query(spark, inp, checkpoint, tmp_path / "out")
        with pytest.raises(Exception, match="LEASE_LOST"):
            refused.awaitTermination()
        assert Checkpoint(checkpoint).latest_committed_batch() == committed
        assert Checkpoint(checkpoint).uncommitted_batch() is None  # not even planned
    finally:
        end()
        spark.conf.unset(FILE_MANAGER_CONF)

    # Not fenced any more (the holder let go): the same checkpoint goes on.
    query = _query(spark, inp, checkpoint, tmp_path / "out")
    query.awaitTermination()
    assert query.exception() is None
    assert Checkpoint(checkpoint).latest_committed_batch() == 3
