"""The window bounds a stateful operator's keys hold (``checkpoint/state_windows.py``),
read by Spark's state reader in its tasks: for a checkpoint in a store whose state files
are not read in this process (``snapshot import`` of an ``s3a://`` checkpoint), the driver
gets the count, the distinct lengths and the distinct starts of the stored windows, never
the state.

Bounds are taken as microseconds since the epoch (``unix_micros``); a ``timestamp_ntz``
window is cast to a timestamp in the session's time zone first, which leaves lengths and
slides exact and moves the starts' offset by the zone's offset.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sparkpoint.checkpoint.layout import OperatorDir
from sparkpoint.checkpoint.state_windows import StoredWindows, summarised, window_column
from sparkpoint.errors import CheckpointFormatError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def stored_windows_in_spark(spark: SparkSession, checkpoint_url: str, batch: int,
                            operator: OperatorDir) -> StoredWindows | None:
    """The windows of ``operator``'s state as of committed ``batch``, at ``checkpoint_url``
    as Spark reads it; None when its keys and values hold no window."""
    from pyspark.sql import functions as F

    stores = operator.stores()
    if len(stores) != 1:
        raise CheckpointFormatError(
            f"{operator.path}: the windows of an operator with {len(stores)} state stores "
            "are read from its files only")
    schema = operator.schema(stores[0])
    if schema is None:
        return None
    # The bounds are in the key (window()), else in the value (session_window()).
    in_value = window_column(schema.key_schema) is None
    row_schema = schema.value_schema if in_value else schema.key_schema
    column = window_column(row_schema)
    if column is None or row_schema is None:
        return None
    name = row_schema["fields"][column]["name"]
    bounds = F.col("value" if in_value else "key")[name]
    start = F.unix_micros(bounds["start"].cast("timestamp"))
    end = F.unix_micros(bounds["end"].cast("timestamp"))
    frame = (spark.read.format("statestore").option("batchId", batch)
             .option("operatorId", operator.operator_id).load(checkpoint_url))
    row = (frame.where(bounds["start"].isNotNull() & bounds["end"].isNotNull())
           .agg(F.count(F.lit(1)).alias("rows"),
                F.collect_set(end - start).alias("lengths"),
                F.collect_set(start).alias("starts"))
           .first())
    assert row is not None  # a global aggregate has one row
    return summarised(int(row["rows"]), {int(n) for n in row["lengths"]},
                      {int(n) for n in row["starts"]})
