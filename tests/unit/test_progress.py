"""What ``jobs show`` and snapshots take from Spark's query progress."""

from __future__ import annotations

from pathlib import Path

from sparkpoint.runtime.progress import (
    STATE_ROWS_KEPT,
    ProgressSummary,
    add_state_rows,
    clear_progress,
    ran_a_batch,
    read_progress,
    read_state_rows,
    write_progress,
    write_state_rows,
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


def test_summary_of_a_batch_keeps_the_offsets_spark_reported() -> None:
    summary = ProgressSummary.of(_kafka_progress('{"t":{"0":5,"1":7}}', '{"t":{"0":9,"1":7}}'))
    assert (summary.batch, summary.input_rows, summary.rows_per_second, summary.duration_ms,
            summary.watermark) == (3, 12, 6.0, 2000, "2026-01-01T00:50:00.000Z")
    assert [(op.operator, op.rows, op.bytes) for op in summary.operators] == [
        ("stateStoreSave", 10, 2048)]
    # The batch's own offsets, as Spark reported them; how far behind the job is now is
    # measured when asked (views.py), never taken from a batch's report.
    source = summary.sources[0]
    assert (source.end_offset, source.latest_offset) == ('{"t":{"0":5,"1":7}}',
                                                         '{"t":{"0":9,"1":7}}')
    assert not hasattr(source, "records_behind")


def test_progress_file_round_trip(tmp_path: Path) -> None:
    assert read_progress(tmp_path) is None
    progress = _kafka_progress('{"t":{"0":5}}', None)
    write_progress(tmp_path, progress)
    assert read_progress(tmp_path) == progress
    clear_progress(tmp_path)
    assert read_progress(tmp_path) is None


def _batch(batch: int, *rows: tuple[str, int | None]) -> dict[str, object]:
    return {"batchId": batch, "durationMs": {"addBatch": 5, "triggerExecution": 9},
            "stateOperators": [{"operatorName": name, "numRowsTotal": total}
                               for name, total in rows]}


def test_state_rows_of_every_batch_that_ran_are_kept_across_runs(tmp_path: Path) -> None:
    known: dict[int, list[tuple[str, int]]] = {}
    progresses = [_batch(0, ("stateStoreSave", 3), ("dedupe", 7)), IDLE,
                  _batch(1, ("stateStoreSave", 4), ("dedupe", 9)),
                  _batch(2, ("stateStoreSave", None), ("dedupe", 9))]  # a count missing
    assert add_state_rows(known, progresses)
    assert known == {0: [("stateStoreSave", 3), ("dedupe", 7)],
                     1: [("stateStoreSave", 4), ("dedupe", 9)]}
    assert not add_state_rows(known, progresses)  # nothing new: nothing to write
    write_state_rows(tmp_path, known)
    again = read_state_rows(tmp_path)  # the next run starts from what this one wrote
    assert again == known
    assert add_state_rows(again, [_batch(b, ("dedupe", b)) for b in range(2, 2 + STATE_ROWS_KEPT)])
    assert sorted(again) == list(range(2, 2 + STATE_ROWS_KEPT))


def test_unreadable_state_rows_are_none(tmp_path: Path) -> None:
    assert read_state_rows(tmp_path) == {}
    (tmp_path / "state_rows.json").write_text('{"0": [["dedupe"]]}')
    assert read_state_rows(tmp_path) == {}
