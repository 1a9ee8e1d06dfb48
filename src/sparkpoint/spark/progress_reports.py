"""The progress reports of a running query that its reader has not seen yet.

pyspark's ``StreamingQuery.recentProgress`` converts every report Spark keeps (one fewer
than ``spark.sql.streaming.numRecentProgressUpdates``: 99 by default) on every call: each
is fetched as JSON over py4j, parsed and made into a ``StreamingQueryProgress``. A job's
driver polls once a second for months; past its hundredth trigger each poll converted all
99 again: 48 ms per poll, against 0.19 ms for a read here with nothing new (pyspark 4.3.0,
local[2], median of 30 polls), about 5% of one of the driver's cores spent re-reading
progress. Spark keeps the reports oldest first and drops them from the front (pinned by
tests/integration/test_progress_reports.py), so only the ones not yet seen are read here,
walking back from the end of the buffer until a report already seen.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql.streaming.query import StreamingQuery


class NewProgress:
    """Reads one query's progress reports, each once, oldest first."""

    def __init__(self, query: StreamingQuery) -> None:
        self.query = query
        # (timestamp, batch id) of the newest report read. Spark's timestamps are ISO-8601
        # UTC with milliseconds, one width: as strings they sort as times do.
        self.seen: tuple[str, int] | None = None

    def _is_new(self, timestamp: str, batch: int) -> bool:
        return self.seen is None or (timestamp, batch) > self.seen

    def read(self) -> list[dict[str, Any]]:
        """The reports Spark made since the last read (all it keeps, the first time)."""
        buffered = getattr(self.query, "_jsq", None)
        fresh: list[dict[str, Any]] = []
        if buffered is None:  # not a JVM query (Spark Connect): pyspark converts them all
            for progress in self.query.recentProgress:
                report = json.loads(progress.json)
                if self._is_new(str(report.get("timestamp")), int(report.get("batchId", -1))):
                    fresh.append(report)
        else:
            reports = buffered.recentProgress()
            for index in range(len(reports) - 1, -1, -1):
                report = reports[index]
                if not self._is_new(str(report.timestamp()), int(report.batchId())):
                    break
                fresh.append(json.loads(report.json()))
            fresh.reverse()
        if fresh:
            self.seen = (str(fresh[-1].get("timestamp")), int(fresh[-1].get("batchId", -1)))
        return fresh
