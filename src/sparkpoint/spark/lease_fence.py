"""Spark's own checkpoint writes fenced by a job's lease (a home on S3 or HDFS).

Spark writes a job's offsets, commits, state and sink log itself, through its checkpoint
file manager. For a job run under a lease, sparkpoint hands Spark its own manager
(``sparkpoint.spark.FencedCheckpointFileManager``, spark/own_jar.py), which delegates to the
one Spark would have used and refuses every create, delete and publish under the job's
checkpoint and output once the lease's holder passed its deadline. The deadline is told to
the JVM after every renewal (``LeaseFences.hold``), on the monotonic clock both processes
read, so a driver frozen past it refuses its next write when it wakes, before sparkpoint's
Python side has noticed anything (storage/lease.py argues why no two holders overlap).

In a session without sparkpoint's jar (a caller's own) nothing is fenced in the JVM; the
running query is still stopped the moment the lease is found lost.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

from sparkpoint.spark import own_jar
from sparkpoint.spark.local_fs import FILE_MANAGER_CONF
from sparkpoint.storage.lease import Lease

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

FENCED_MANAGER = "sparkpoint.spark.FencedCheckpointFileManager"
FENCES = "sparkpoint.spark.LeaseFences"
# A manager the user had chosen: the fenced one delegates to it.
DELEGATE_CONF = "spark.sql.streaming.sparkpoint.delegateFileManagerClass"


def fenced_conf(conf: Mapping[str, str]) -> dict[str, str]:
    """The settings that put Spark's checkpoint writes behind the fence (a user's own
    manager kept as the delegate)."""
    own = conf.get(FILE_MANAGER_CONF)
    settings = {FILE_MANAGER_CONF: FENCED_MANAGER}
    if own and own != FENCED_MANAGER:
        settings[DELEGATE_CONF] = own
    return settings


def can_fence(spark: SparkSession | None) -> bool:
    """Whether a job's session can carry the fence: one sparkpoint starts (its jar is in
    it), or a caller's whose JVM loads sparkpoint's classes (spark-submit without the jar:
    not; Spark would refuse the unknown manager and fail the query)."""
    return spark is None or own_jar.loadable(spark, FENCED_MANAGER)


def fence_spark_writes(spark: SparkSession, lease: Lease,
                       locations: Sequence[str]) -> Callable[[], None]:
    """Tell the session's JVM the lease's deadline for ``locations`` now and after every
    renewal; returns the function that ends it (the locations are no longer fenced). Does
    nothing in a session whose JVM lacks sparkpoint's classes."""
    if not own_jar.loadable(spark, FENCES) or \
            spark.conf.get(FILE_MANAGER_CONF, None) != FENCED_MANAGER:
        return lambda: None
    jvm = spark._jvm
    assert jvm is not None
    fences = jvm.sparkpoint.spark.LeaseFences

    def tell(deadline: float | None) -> None:
        for location in locations:
            if deadline is None:
                fences.revoke(location)
            else:
                fences.hold(location, int((deadline - time.monotonic()) * 1e9))

    stop_telling = lease.on_deadline(tell)

    def end() -> None:
        stop_telling()
        for location in locations:
            fences.forget(location)

    return end
