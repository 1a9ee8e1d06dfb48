"""Rows of a checkpoint's state counted by Spark's own state reader, in its tasks.

A snapshot records each operator's rows. For a checkpoint in a store whose state files the
snapshot store copies inside the store (``snapshot import`` of an ``s3a://`` checkpoint),
counting them in this process would fetch every file the copy spares: Spark's state data
source (``format("statestore")``) reads them in the executors instead, and the driver gets
one number per operator.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def count_state_rows(spark: SparkSession, checkpoint_url: str, batch: int,
                     operator_ids: Iterable[int]) -> dict[int, int]:
    """Operator id -> the keys its (single, default) store holds as of committed ``batch``
    (state version batch + 1), read at ``checkpoint_url`` as Spark reads it (``s3a://``,
    ``hdfs://``)."""
    counted = {}
    for operator_id in operator_ids:
        frame = (spark.read.format("statestore").option("batchId", batch)
                 .option("operatorId", operator_id).load(checkpoint_url))
        counted[operator_id] = int(frame.count())
    return counted
