"""What ``jobs show`` takes from Spark's query progress."""

from __future__ import annotations

from pathlib import Path

from sparkpoint.runtime.progress import (
    ProgressSummary,
    clear_progress,
    ran_a_batch,
    read_progress,
    write_progress,
)

IDLE = {"batchId": 4, "numInputRows": 0, "durationMs": {"latestOffset": 1, "triggerExecution": 1},
        "sources": [], "stateOperators": []}


def _kafka_progress(end: str, latest: str | None) -> dict[str, object]:
    return {
        "batchId": 3, "timestamp": "2026-01-01T00:00:00.000Z", "numInputRows": 12,
        "processedRowsPerSecond": 6.0,
        "durationMs": {"addBatch": 1500, "triggerExecution": 2000},
        "eventTime": {"watermark": "2026-01-01T00:50:00.000Z"},
        "stateOperators": [{"operatorName": "stateStoreSave", "numRowsTotal": 10,
                            "memoryUsedBytes": 2048}],
        "sources": [{"description": "kafka", "numInputRows": 12, "endOffset": end,
                     "latestOffset": latest}],
    }


def test_idle_triggers_are_not_batches() -> None:
    assert not ran_a_batch(IDLE)
    assert ran_a_batch(_kafka_progress('{"t":{"0":5}}', None))


def test_summary_and_records_behind_from_latest_offsets() -> None:
    summary = ProgressSummary.of(_kafka_progress('{"t":{"0":5,"1":7}}', '{"t":{"0":9,"1":7}}'))
    assert (summary.batch, summary.input_rows, summary.rows_per_second, summary.duration_ms,
            summary.watermark) == (3, 12, 6.0, 2000, "2026-01-01T00:50:00.000Z")
    assert [(op.operator, op.rows, op.bytes) for op in summary.operators] == [
        ("stateStoreSave", 10, 2048)]
    assert summary.sources[0].records_behind == 4


def test_records_behind_unknown_when_the_source_does_not_say() -> None:
    for latest in (None, "null", '{"logOffset": 3}', '{"t":{"0":"x"}}'):
        summary = ProgressSummary.of(_kafka_progress('{"t":{"0":5}}', latest))
        assert summary.sources[0].records_behind is None, latest


def test_progress_file_round_trip(tmp_path: Path) -> None:
    assert read_progress(tmp_path) is None
    progress = _kafka_progress('{"t":{"0":5}}', None)
    write_progress(tmp_path, progress)
    assert read_progress(tmp_path) == progress
    clear_progress(tmp_path)
    assert read_progress(tmp_path) is None
