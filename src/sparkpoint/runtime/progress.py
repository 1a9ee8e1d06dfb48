"""The last query progress of a running job, kept in the home for ``jobs show`` and ``jobs list``.

The process running a job writes ``jobs/<job>/progress.json`` (atomically) after every batch
that ran; other processes only read it. Spark's progress events are kept as Spark reports
them; ``ProgressSummary`` picks what a user watches: rows, rate, duration, watermark, state
per operator, and what each source read.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sparkpoint.storage.location import Location, write_atomic

PROGRESS_FILE = "progress.json"


def ran_a_batch(progress: Mapping[str, Any]) -> bool:
    """Idle triggers report progress too, under the id of the next (unrun) batch; only a
    trigger that ran a batch has an ``addBatch`` duration."""
    return "addBatch" in (progress.get("durationMs") or {})


STATE_ROWS_FILE = "state_rows.json"
# Batches whose state rows are kept: as many as Spark keeps of a checkpoint by default
# (minBatchesToRetain), so every batch a snapshot can still take has its rows.
STATE_ROWS_KEPT = 100


def state_rows_of(progress: Mapping[str, Any]) -> list[tuple[str, int]] | None:
    """(operator name, rows in its state after the batch) per stateful operator, in the
    order Spark reports them; None when a count is missing."""
    rows = []
    for operator in progress.get("stateOperators") or []:
        total = operator.get("numRowsTotal")
        if not isinstance(total, int) or total < 0:
            return None
        rows.append((str(operator.get("operatorName")), total))
    return rows


def read_state_rows(job_dir: Location) -> dict[int, list[tuple[str, int]]]:
    """Batch -> its state rows per operator, as the running job recorded them from Spark's
    progress (``add_state_rows``, ``write_state_rows``); empty when none were recorded."""
    try:
        data = json.loads((job_dir / STATE_ROWS_FILE).read_text("utf-8"))
        return {int(batch): [(str(name), int(rows)) for name, rows in operators]
                for batch, operators in data.items()}
    except (OSError, ValueError, TypeError, AttributeError):
        return {}


def add_state_rows(known: dict[int, list[tuple[str, int]]],
                   progresses: Sequence[Mapping[str, Any]]) -> bool:
    """Add to ``known`` the state rows of the batches in ``progresses`` that ran; keep the
    newest STATE_ROWS_KEPT batches. Returns whether any batch was new."""
    added = False
    for progress in progresses:
        if not ran_a_batch(progress) or not progress.get("stateOperators"):
            continue
        batch = int(progress.get("batchId", -1))
        rows = state_rows_of(progress)
        if batch < 0 or rows is None or known.get(batch) == rows:
            continue
        known[batch] = rows
        added = True
    for batch in sorted(known)[:-STATE_ROWS_KEPT]:
        del known[batch]
    return added


def write_state_rows(job_dir: Location, known: Mapping[int, list[tuple[str, int]]]) -> None:
    body = {str(batch): [[name, rows] for name, rows in operators]
            for batch, operators in sorted(known.items())}
    write_atomic(job_dir / STATE_ROWS_FILE, (json.dumps(body) + "\n").encode())


def write_progress(job_dir: Location, progress: Mapping[str, Any]) -> None:
    write_atomic(job_dir / PROGRESS_FILE, (json.dumps(progress, indent=2) + "\n").encode())


def read_progress(job_dir: Location) -> dict[str, Any] | None:
    path = job_dir / PROGRESS_FILE
    try:
        data: dict[str, Any] = json.loads(path.read_text("utf-8"))
    except (OSError, ValueError):
        return None
    return data


@dataclass(frozen=True)
class SourceProgress:
    """A source as Spark's progress of the batch reports it. How far behind the job is now
    is measured when asked (``views.py``), not taken from here: the latest offset
    Spark reports is that of this batch's planning."""

    description: str
    input_rows: int
    end_offset: Any
    # The newest offset the source had when the batch was planned, as Spark reports it.
    latest_offset: Any = None
    # The job's name for the source (Spark's progress has only its description).
    name: str | None = None


@dataclass(frozen=True)
class OperatorProgress:
    operator: str
    rows: int
    bytes: int


@dataclass(frozen=True)
class ProgressSummary:
    batch: int
    timestamp: str
    input_rows: int
    rows_per_second: float
    duration_ms: int
    watermark: str | None
    operators: list[OperatorProgress] = field(default_factory=list)
    sources: list[SourceProgress] = field(default_factory=list)

    @classmethod
    def of(cls, progress: Mapping[str, Any]) -> ProgressSummary:
        sources = [
            SourceProgress(
                description=str(s.get("description", "")),
                input_rows=int(s.get("numInputRows") or 0),
                end_offset=s.get("endOffset"),
                latest_offset=s.get("latestOffset"),
            )
            for s in progress.get("sources") or []
        ]
        operators = [
            OperatorProgress(str(op.get("operatorName", "?")), int(op.get("numRowsTotal") or 0),
                             int(op.get("memoryUsedBytes") or 0))
            for op in progress.get("stateOperators") or []
        ]
        return cls(
            batch=int(progress.get("batchId", -1)),
            timestamp=str(progress.get("timestamp", "")),
            input_rows=int(progress.get("numInputRows") or 0),
            rows_per_second=float(progress.get("processedRowsPerSecond") or 0.0),
            duration_ms=int((progress.get("durationMs") or {}).get("triggerExecution") or 0),
            watermark=(progress.get("eventTime") or {}).get("watermark"),
            operators=operators,
            sources=sources,
        )


def clear_progress(job_dir: Location) -> None:
    """A new run starts without the previous run's last progress."""
    (job_dir / PROGRESS_FILE).unlink(missing_ok=True)
