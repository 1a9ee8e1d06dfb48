"""`sparkpoint rehearse` on real Spark: a new version started from a snapshot replays exactly
the input the old job read after it, and its output is compared with the old job's.

Spark fact pinned here (4.3): a query restarted on a checkpoint whose latest offsets entry
has no commit runs that batch with exactly the entry's offsets, watermark and batch time.
The rehearsal writes the old job's offsets entries one by one as such pending batches, so an
identical version must reproduce the old job's rows batch for batch.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from sparkpoint import api
from sparkpoint.crash_points import CRASH_ENV, CRASH_EXIT_CODE
from sparkpoint.storage.home import Home
from sparkpoint.testing import Click, expected_hourly_counts, sink_files_up_to, write_clicks
from tests.conftest import EXAMPLES, SHUFFLE_PARTITIONS
from tests.support.cli import sparkpoint

pytestmark = pytest.mark.spark
JOB = EXAMPLES / "clicks_job.py"
JOBS = Path(__file__).resolve().parent.parent / "data" / "jobs"
FEWER_URLS_JOB = JOBS / "clicks_fewer_urls.py"
FOREACH_JOB = JOBS / "clicks_foreach_batch.py"
TOTALS_JOB = JOBS / "amount_totals.py"
DROPPED_URLS = ("/p/1", "/p/2", "/p/3", "/p/4")


def _old_job(spark: Any, home: Home, tmp_path: Path) -> tuple[list[Click], list[Click], int, int]:
    """v1 reads two 20-minute slices, is snapshotted as 'old' (mid-hour: hour 0 is still
    open), then reads four more; returns the events before and after, N and L."""
    inp, out = tmp_path / "in", tmp_path / "out"
    params = {"input": str(inp), "output": str(out), "files_per_batch": "1"}
    conf = {"spark.sql.shuffle.partitions": SHUFFLE_PARTITIONS}
    before = write_clicks(inp, range(0, 2))
    api.run(home, JOB, "v1", params=params, conf=conf, until_caught_up=True, spark=spark)
    snapshot_batch = api.snapshot_create(home, "v1", "old").batch_id
    after = write_clicks(inp, range(2, 6))
    latest = api.run(home, JOB, "v1", until_caught_up=True, spark=spark).last_batch
    assert latest is not None and latest >= snapshot_batch + 4
    return before, after, snapshot_batch, latest


def _digests(*roots: Path) -> dict[str, str]:
    return {str(path): hashlib.sha256(path.read_bytes()).hexdigest()
            for root in roots for path in sorted(root.rglob("*")) if path.is_file()}


def _rows_after_snapshot(before: list[Click], after: list[Click]) -> Counter[Any]:
    """What the old job emitted after the snapshot: rows of all input minus those of the
    input read up to the snapshot (windows are emitted once, in append mode)."""
    return expected_hourly_counts(before + after) - expected_hourly_counts(before)


def _as_json_rows(rows: Counter[Any]) -> Counter[Any]:
    return Counter((ws.isoformat(), we.isoformat(), user, n)
                   for (ws, we, user, n), times in rows.items() for _ in range(times))


def _example_rows(rows: list[dict[str, Any]]) -> Counter[Any]:
    return Counter((r["window_start"], r["window_end"], r["user"], r["clicks"]) for r in rows)


def test_identical_version_rehearses_equal_and_changes_nothing(
    spark: Any, home: Home, tmp_path: Path
) -> None:
    before, after, n, latest = _old_job(spark, home, tmp_path)
    emitted = _rows_after_snapshot(before, after)
    assert emitted  # hour 0 closes after the snapshot: there is something to compare
    watched = (home.checkpoint_dir("v1"), tmp_path / "out", home.snapshot_dir("old"),
               tmp_path / "in")
    digests = _digests(*watched)

    # Killed after its first batch: its scratch is left behind, the old job untouched.
    crashed = sparkpoint(home, "rehearse", str(JOB), "--from-snapshot", "old", "--against",
                         "v1", env={CRASH_ENV: "rehearse.batch_replayed"})
    assert crashed.code == CRASH_EXIT_CODE, crashed.err
    left = [p.name for p in home.scratch_dir.iterdir()]
    assert len(left) == 1 and left[0].startswith("rehearse-")
    assert _digests(*watched) == digests

    done = sparkpoint(home, "rehearse", str(JOB), "--from-snapshot", "old", "--against", "v1",
                      "--json", "--fail-on-diff")
    assert done.code == 0, done.err
    assert "left by an interrupted rehearsal" in done.err and left[0] in done.err
    doc = done.json()
    assert doc["equal"] is True
    assert doc["batches"] == [n + 1, latest]
    assert doc["old_rows"] == doc["new_rows"] == sum(emitted.values())
    assert doc["only_old"] == doc["only_new"] == 0
    assert _example_rows(doc["examples"]["both"]) <= _as_json_rows(emitted)
    assert set(doc) == {"equal", "batches", "old_rows", "new_rows", "only_old", "only_new",
                        "examples"}

    assert _digests(*watched) == digests  # old checkpoint, output, snapshot, input untouched
    assert [p.name for p in home.scratch_dir.iterdir()] == []  # scratch removed
    listed = sparkpoint(home, "jobs", "list", "--json")
    assert [j["name"] for j in listed.json()] == ["v1"]  # the rehearsal is no user job

    # Bad input: one typed line each, exit 4, nothing created.
    for args, code in (
        (["--from-snapshot", "old", "--against", "nope"], "[UNKNOWN_JOB]"),
        (["--from-snapshot", "nope", "--against", "v1"], "[UNKNOWN_SNAPSHOT]"),
    ):
        refused = sparkpoint(home, "rehearse", str(JOB), *args)
        assert refused.code == 4 and code in refused.err, refused.err
    api.snapshot_create(home, "v1", "latest")
    refused = sparkpoint(home, "rehearse", str(JOB), "--from-snapshot", "latest",
                         "--against", "v1", "--json")
    assert refused.code == 4, refused.out
    error = refused.json()["error"]
    assert error["code"] == "NOTHING_TO_REHEARSE"
    assert f"no committed batch after batch {latest}" in error["message"]
    assert _digests(*watched) == digests


def test_refusals_the_files_decide_come_before_spark_starts(
    spark: Any, home: Home, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every refusal rehearse can make from the home's files comes before any Spark session
    (the factory fails here if asked), each one typed line with its exit code: an unknown
    job or snapshot, no batch after the snapshot's, and a batch to replay whose file-source
    log entry Spark removed (as it does after a later compaction), which was found only
    once Spark had started and the snapshot was restored."""
    from sparkpoint.checkpoint.layout import Checkpoint
    from sparkpoint.checkpoint.source_log import file_source_log_offset
    from sparkpoint.errors import (
        NothingToRehearseError,
        PreconditionError,
        UnknownJobError,
        UnknownSnapshotError,
    )
    from tests.support.jvm import forbid_spark_sessions

    _before, _after, _n, latest = _old_job(spark, home, tmp_path)
    api.snapshot_create(home, "v1", "latest")
    old = Checkpoint(home.checkpoint_dir("v1"))
    offset = file_source_log_offset(old.offsets(latest).source_offsets()["clicks"])
    assert offset is not None
    removed = home.checkpoint_dir("v1") / "sources" / "clicks" / str(offset)
    removed.unlink()
    forbid_spark_sessions(monkeypatch)
    for args, error in (
        ({"from_snapshot": "old", "against": "nope"}, UnknownJobError),
        ({"from_snapshot": "nope", "against": "v1"}, UnknownSnapshotError),
        ({"from_snapshot": "latest", "against": "v1"}, NothingToRehearseError),
        ({"from_snapshot": "old", "against": "v1"}, PreconditionError),
    ):
        with pytest.raises(error) as refused:
            api.rehearse(home, JOB, **args)  # type: ignore[arg-type]
        assert refused.value.exit_code == 4 and "\n" not in refused.value.message
    assert refused.value.message == (
        f"{removed.parent}: expected file-source log entry {offset} (read by a batch to "
        "replay), found nothing; Spark removed it after a later compaction: rehearse from a "
        "newer snapshot")
    assert not home.scratch_dir.exists() or not any(home.scratch_dir.iterdir())


def test_changed_filter_reports_exactly_the_differing_rows(
    spark: Any, home: Home, tmp_path: Path
) -> None:
    before, after, n, latest = _old_job(spark, home, tmp_path)
    old_rows = _rows_after_snapshot(before, after)
    # Independently: the new version counts what the snapshot's state holds (every click
    # read before it) plus the clicks after it that its filter keeps, for the windows the
    # old job emitted (the replay uses the old batches' watermarks).
    unique_before = {(c.event_id, c.ts): c for c in before}.values()
    unique_after = {(c.event_id, c.ts): c for c in after
                    if c.url not in DROPPED_URLS}.values()
    new_rows: Counter[Any] = Counter()
    for ws, we, user, _ in old_rows:
        count = sum(1 for c in [*unique_before, *unique_after]
                    if c.user == user and ws <= c.ts.replace(tzinfo=None) < we)
        if count:
            new_rows[(ws, we, user, count)] += 1
    only_old, only_new = old_rows - new_rows, new_rows - old_rows
    assert only_old and only_new  # the filter does change something

    result = api.rehearse(home, FEWER_URLS_JOB, "v1", from_snapshot="old", spark=spark)
    doc = result.to_dict()
    assert doc["equal"] is False
    assert doc["batches"] == [n + 1, latest]
    assert (doc["old_rows"], doc["new_rows"]) == (sum(old_rows.values()),
                                                  sum(new_rows.values()))
    assert (doc["only_old"], doc["only_new"]) == (sum(only_old.values()),
                                                  sum(only_new.values()))
    examples = doc["examples"]
    assert examples["key_columns"] == ["window_start", "window_end", "user"]
    assert len(examples["changed"]) == len(only_old) <= 5  # one group per changed key
    shown_old = [r for g in examples["changed"] for r in g["old"]] + examples["only_old"]
    shown_new = [r for g in examples["changed"] for r in g["new"]] + examples["only_new"]
    assert _example_rows(shown_old) == _as_json_rows(only_old)
    assert _example_rows(shown_new) == _as_json_rows(only_new)

    text = sparkpoint(home, "rehearse", str(FEWER_URLS_JOB), "--from-snapshot", "old",
                      "--against", "v1", "--fail-on-diff")
    assert text.code == 5, text.err
    assert (f"only in old: {sum(only_old.values())}, only in new: "
            f"{sum(only_new.values())}") in text.out
    assert "outputs differ" in text.out


def test_other_sink_shows_new_output_only_and_is_never_written(
    spark: Any, home: Home, tmp_path: Path
) -> None:
    inp, out = tmp_path / "in", tmp_path / "out"
    params = {"input": str(inp), "output": str(out), "files_per_batch": "1"}
    before = write_clicks(inp, range(0, 2))
    api.run(home, FOREACH_JOB, "v1", params=params, until_caught_up=True, spark=spark,
            conf={"spark.sql.shuffle.partitions": SHUFFLE_PARTITIONS})
    n = api.snapshot_create(home, "v1", "old").batch_id
    after = write_clicks(inp, range(2, 6))
    latest = api.run(home, FOREACH_JOB, "v1", until_caught_up=True, spark=spark).last_batch
    emitted = _rows_after_snapshot(before, after)
    assert emitted and sum(emitted.values()) <= 5  # every new row is among the examples
    # Pointed at an empty output, the job's own foreachBatch would write its batches there.
    elsewhere = tmp_path / "elsewhere"

    result = api.rehearse(home, FOREACH_JOB, "v1", from_snapshot="old", spark=spark,
                          params={"output": str(elsewhere)})
    doc = result.to_dict()
    assert (doc["equal"], doc["old_rows"], doc["only_old"], doc["only_new"]) == (
        None, None, None, None)
    assert doc["batches"] == [n + 1, latest]
    assert doc["new_rows"] == sum(emitted.values())
    assert _example_rows(doc["examples"]["new"]) == _as_json_rows(emitted)
    assert "only the new output is shown" in doc["examples"]["note"]
    assert not elsewhere.exists()


def _write_payments(directory: Path, name: str, events: list[tuple[str, str, float]],
                    width: int) -> None:
    """One JSON line per (user, minute of hour 0 or later, amount), each padded to ``width``
    bytes, written atomically with a modification time after the previous file's."""
    directory.mkdir(parents=True, exist_ok=True)
    lines = []
    for user, at, amount in events:
        line = json.dumps({"user": user, "ts": f"2026-01-01T{at}:00Z", "amount": amount})
        assert len(line) < width
        lines.append(line.ljust(width - 1) + "\n")
    tmp = directory / f".{name}.tmp"
    tmp.write_text("".join(lines))
    later = max([time.time_ns()] + [p.stat().st_mtime_ns + 10_000_000
                                    for p in directory.iterdir()])
    os.utime(tmp, ns=(later, later))
    os.replace(tmp, directory / name)


def test_reordered_double_sums_and_nan_rehearse_equal_within_the_tolerance(
    spark: Any, home: Home, tmp_path: Path
) -> None:
    """Before: a rehearsal of the same job reported a NaN total and a total summed in another
    order (its input split differently) as differences."""
    inp, out, width = tmp_path / "in", tmp_path / "out", 64
    amounts = [0.1, 0.7, 0.2, 0.3]
    sequential = ((amounts[0] + amounts[1]) + amounts[2]) + amounts[3]
    halves = (amounts[0] + amounts[1]) + (amounts[2] + amounts[3])
    assert sequential != halves and math.isclose(sequential, halves, rel_tol=1e-15)
    params = {"input": str(inp), "output": str(out), "files_per_batch": "1"}
    conf = {"spark.sql.shuffle.partitions": SHUFFLE_PARTITIONS}
    _write_payments(inp, "0.json", [("b", "00:05", 5.0)], width)
    api.run(home, TOTALS_JOB, "v1", params=params, conf=conf, until_caught_up=True,
            spark=spark)
    snapshot_batch = api.snapshot_create(home, "v1", "old").batch_id
    # Four lines of one width. Spark fact pinned here (4.3, FilePartition.maxSplitBytes and
    # getFilePartitions): a file is cut into splits of min(maxPartitionBytes,
    # max(openCostInBytes = 4 MiB, bytes / cores)) and a split larger than what is left of
    # a partition opens the next one; so by default this file is one partition, summed in
    # line order. At 2 lines less a byte, each split reads the lines that start in it
    # (Hadoop's LineRecordReader): lines 1-2 and 3-4 apart, two partial sums then added.
    _write_payments(inp, "1.json", [("a", f"00:{10 + i}", x) for i, x in enumerate(amounts)],
                    width)
    _write_payments(inp, "2.json", [("n", "00:35", math.nan), ("z", "02:00", 1.0)], width)
    latest = api.run(home, TOTALS_JOB, "v1", until_caught_up=True, spark=spark).last_batch
    assert latest is not None and latest > snapshot_batch
    emitted = [row for file in sorted(set(sink_files_up_to(out, latest))
                                      - set(sink_files_up_to(out, snapshot_batch)))
               for row in spark.read.parquet(file).collect()]
    totals = {row["user"]: row["total"] for row in emitted}
    assert sorted(totals) == ["a", "b", "n"] and len(emitted) == 3  # hour 0 closed after it
    assert totals["a"] == sequential and totals["b"] == 5.0 and math.isnan(totals["n"])

    split = ["--conf", f"spark.sql.files.maxPartitionBytes={2 * width - 1}"]
    args = [str(TOTALS_JOB), "--from-snapshot", "old", "--against", "v1", *split, "--json"]
    done = sparkpoint(home, "rehearse", *args, "--fail-on-diff")
    assert done.code == 0, done.out + done.err
    doc = done.json()
    assert (doc["equal"], doc["old_rows"], doc["new_rows"], doc["only_old"],
            doc["only_new"]) == (True, 3, 3, 0, 0)
    assert sorted(r["user"] for r in doc["examples"]["both"]) == ["a", "b", "n"]
    assert [r["total"] for r in doc["examples"]["both"] if r["user"] == "n"] == ["NaN"]

    # Bit for bit, the rehearsal's total of 'a' is the other order's; NaN still equals NaN.
    exact = sparkpoint(home, "rehearse", *args, "--float-tolerance", "0")
    assert exact.code == 0, exact.out + exact.err
    doc = exact.json()
    assert (doc["equal"], doc["only_old"], doc["only_new"]) == (False, 1, 1)
    [changed] = doc["examples"]["changed"]
    assert changed["key"]["user"] == "a"
    assert [r["total"] for r in changed["old"]] == [sequential]
    assert [r["total"] for r in changed["new"]] == [halves]
    assert sorted(r["user"] for r in doc["examples"]["both"]) == ["b", "n"]
