"""A running job reads each of Spark's progress reports once (spark/progress_reports.py).

Facts of pyspark 4.3.0 pinned here: ``StreamingQuery.recentProgress`` lists the reports
oldest first; Spark keeps one fewer than ``spark.sql.streaming.numRecentProgressUpdates``
(ProgressReporter.updateProgress drops from the front while the buffer holds at least that
many, after adding the new one: 99 by default), the newest.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from sparkpoint.spark.progress_reports import NewProgress

pytestmark = pytest.mark.spark


def _batches(reports: list[dict[str, Any]]) -> list[int]:
    """The batch ids of the reports of triggers that ran a batch."""
    return [int(report["batchId"]) for report in reports
            if "addBatch" in (report.get("durationMs") or {})]


def test_each_report_is_read_once_oldest_first_and_the_dropped_ones_never(
    spark: Any, tmp_path: Path
) -> None:
    session = spark.newSession()
    session.conf.set("spark.sql.streaming.numRecentProgressUpdates", "3")
    # No idle trigger's report between the batches: only the batches' own are kept.
    session.conf.set("spark.sql.streaming.noDataProgressEventInterval", "1h")
    inbox = tmp_path / "in"
    inbox.mkdir()
    query = (session.readStream.schema("user STRING").option("maxFilesPerTrigger", 1)
             .json(str(inbox)).groupBy("user").count()
             .writeStream.format("noop").outputMode("update")
             .option("checkpointLocation", str(tmp_path / "checkpoint")).start())
    written = 0

    def run_batches(count: int) -> None:
        nonlocal written
        for _ in range(count):
            (inbox / f"{written:03d}.json").write_text(json.dumps({"user": f"u{written}"}))
            written += 1
            query.processAllAvailable()

    try:
        reader = NewProgress(query)
        run_batches(1)
        first = reader.read()
        assert _batches(first) == [0]
        assert reader.read() == []  # nothing new: nothing read again
        run_batches(2)
        assert _batches(reader.read()) == [1, 2]
        # Five batches between two reads, numRecentProgressUpdates=3: Spark keeps the two
        # newest reports, and only those are read, in order.
        run_batches(5)
        kept = [json.loads(progress.json) for progress in query.recentProgress]
        assert _batches(kept) == [6, 7]
        fresh = reader.read()
        assert _batches(fresh) == [6, 7]
        assert fresh == kept
        assert reader.read() == []
        # The state rows a snapshot takes from these reports are Spark's own count.
        assert fresh[-1]["stateOperators"][0]["numRowsTotal"] == written
    finally:
        query.stop()
