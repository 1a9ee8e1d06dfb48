"""The session a managed job runs in when its caller hands sparkpoint a SparkSession.

sparkpoint sets SQL confs for its jobs (``session.QUERY_DEFAULTS``: the RocksDB state store
provider, source evolution; and the job's own ``conf``). Set on the caller's session, they
would hold for every other query the caller runs while the job runs. Putting them back right
after ``writer.start()`` is not safe: ``StreamExecution.start`` returns once its thread
posted ``QueryStartedEvent`` (``startLatch``), but that thread creates the sources
(``logicalPlan``) only afterwards, and the sources, ``ProgressReporter`` and
``minBatchesToRetain`` read the conf of the session the query was started from
(``sql/core/.../streaming/runtime/StreamExecution.scala``, ``runStream``); only what the
batches plan with is isolated, in ``sparkSessionForStream = sparkSession.cloneSession()``.

So the job runs in its own copy of the caller's session, made the way Spark makes that copy
for every query: ``SparkSession.cloneSession`` (``sql/core/.../classic/SparkSession.scala``)
shares the SparkContext and cached data and copies the SQL confs, temporary views
and registered functions of the moment; changes to either afterwards
stay in that one. ``newSession`` would also isolate the confs but start from none of the
caller's settings (its time zone, its shuffle partitions) and none of its temporary views.
A query started in the copy belongs to the copy's ``spark.streams``, not the caller's; the
caller gets the ``StreamingQuery`` itself.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sparkpoint.errors import JobFileError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming.readwriter import DataStreamWriter


def session_for_job(spark: SparkSession) -> SparkSession:
    """A copy of the caller's session (its confs, temporary views, functions) for one job."""
    from pyspark.sql import SparkSession

    # private[sql] in Scala, public in the bytecode py4j calls.
    return SparkSession(spark.sparkContext, spark._jsparkSession.cloneSession())


def require_writer_of(session: SparkSession, writer: DataStreamWriter, where: str) -> None:
    """Refuse a writer built on another session than the job's: its query would run without
    the job's settings (the query runs in the session of its DataFrame)."""
    if not writer._df.sparkSession._jsparkSession.equals(session._jsparkSession):
        raise JobFileError(
            f"{where}: build() returned a writer of another SparkSession than the one it "
            "was given; build the query from build's `spark` argument (the job runs in a "
            "copy of your session, so that sparkpoint's settings stay out of yours)")
