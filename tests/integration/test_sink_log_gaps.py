"""No start leaves a hole in a file sink's log, whoever committed the batch, and a new job
never writes into another job's output.

Spark's readers and its sink read every entry of ``_spark_metadata`` from the newest
compaction to the latest batch (``CompactibleFileStreamLog.allFiles`` / ``compact``). Batches
that never ran through the sink (Spark's offline repartition batch; batch ids skipped by
``--first-batch``) left holes: ``spark.read`` failed with "_spark_metadata/N doesn't exist" and
the job died at its next compaction with BATCH_METADATA_NOT_FOUND. And a new job's batches 0..
into an output holding batches were skipped by the sink (a typo in ``--job`` lost a run).
"""

from __future__ import annotations

import datetime as dt
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest

from sparkpoint import api
from sparkpoint.crash_points import CRASH_ENV, CRASH_EXIT_CODE
from sparkpoint.errors import PreconditionError
from sparkpoint.storage.home import Home
from sparkpoint.testing import Click, output_rows, write_clicks
from tests.support.cli import sparkpoint

JOB = Path(__file__).resolve().parent.parent / "data" / "jobs" / "windowed_counts.py"
# Small, so that the runs below cross compactions of the sink log.
COMPACT = {"spark.sql.streaming.fileSink.log.compactInterval": "3"}
pytestmark = pytest.mark.spark


def expected_windows(clicks: Iterable[Click], flush_all: bool = False) -> Counter[Any]:
    """Rows (start, end, user, count) of windowed_counts.py: 10-minute windows per user,
    every event counted, emitted once the final watermark (latest event - 10 minutes) passes
    the window's end; ``flush_all``: every window (a drain)."""
    events = list(clicks)
    watermark = max(c.ts for c in events) - dt.timedelta(minutes=10)
    counts: Counter[tuple[Any, ...]] = Counter()
    for click in events:
        start = click.ts.replace(minute=click.ts.minute // 10 * 10, second=0, microsecond=0)
        counts[(start.replace(tzinfo=None), click.user)] += 1
    width = dt.timedelta(minutes=10)
    return Counter((start, start + width, user, n) for (start, user), n in counts.items()
                   if flush_all or start.replace(tzinfo=dt.UTC) + width <= watermark)


def expected_sessions(clicks: Iterable[Click]) -> Counter[Any]:
    """Rows (start, end, user, count) of windowed_counts.py with session=yes: per user, events
    less than 10 minutes apart form one session [first, last + 10 minutes), emitted once the
    final watermark (latest event - 10 minutes) passes its end."""
    events = sorted(clicks, key=lambda c: (c.user, c.ts))
    gap = dt.timedelta(minutes=10)
    watermark = max(c.ts for c in events) - gap
    sessions: list[list[Any]] = []  # [user, start, end, count]
    for click in events:
        last = sessions[-1] if sessions else None
        if last is not None and last[0] == click.user and click.ts < last[2]:
            last[2], last[3] = max(last[2], click.ts + gap), last[3] + 1
        else:
            sessions.append([click.user, click.ts, click.ts + gap, 1])
    return Counter((start.replace(tzinfo=None), end.replace(tzinfo=None), user, n)
                   for user, start, end, n in sessions if end <= watermark)


def log_ids(out: Path) -> list[int]:
    return sorted(int(p.name.removesuffix(".compact")) for p in (out / "_spark_metadata").iterdir()
                  if p.name.removesuffix(".compact").isdigit())


def assert_no_hole(out: Path) -> None:
    ids = log_ids(out)
    assert ids == list(range(ids[0], ids[-1] + 1)), ids


@pytest.mark.parametrize("session", [False, True], ids=["window", "session"])
def test_upgrade_with_partition_change_into_same_output_keeps_the_table_readable(
    spark: Any, home: Home, tmp_path: Path, session: bool
) -> None:
    """RocksDB (sparkpoint's default) 4 -> 3 partitions. Session windows (prefix-scan keys)
    are moved by Spark's offline repartition, whose batch writes nothing to the sink: its
    entry is there before the next batch runs. Windowed counts are moved by sparkpoint in
    place (upgrade/rocksdb_repartition.py): the next batch is the job's own."""
    inp, out = tmp_path / "in", tmp_path / "out"
    params = {"input": str(inp), "output": str(out), "session": "yes" if session else "no"}
    expected = expected_sessions if session else expected_windows
    events = write_clicks(inp, range(0, 2))
    api.run(home, JOB, "v1", params=params, until_caught_up=True, spark=spark,
            conf={**COMPACT, "spark.sql.shuffle.partitions": "4"})
    snap = api.snapshot_create(home, "v1", "s")
    assert snap.shuffle_partitions == 4

    events += write_clicks(inp, range(2, 4))
    started = api.run(home, JOB, "v2", params=params, from_snapshot="s", until_caught_up=True,
                      spark=spark, conf={**COMPACT, "spark.sql.shuffle.partitions": "3"})
    repartition_batch = snap.batch_id + 1
    # The run starts after Spark's repartition batch (sessions), or right after the
    # snapshot's batch (windows, moved in place): either way batch N+1 is in the sink's log.
    assert started.first_batch == (repartition_batch if session else snap.batch_id)
    assert repartition_batch in log_ids(out)
    assert_no_hole(out)
    assert output_rows(spark, out) == expected(events)

    events += write_clicks(inp, range(4, 6))
    api.run(home, JOB, "v2", params=params, until_caught_up=True, spark=spark)
    assert any(b > repartition_batch for b in log_ids(out)
               if (out / "_spark_metadata" / f"{b}.compact").exists())
    assert_no_hole(out)
    assert output_rows(spark, out) == expected(events)


def test_drained_job_continued_past_the_sink_with_first_batch(
    spark: Any, home: Home, tmp_path: Path
) -> None:
    """Drain (its batch runs through the sink) then a new version numbered with --first-batch
    past the output's latest batch: the skipped ids get entries, a compaction among them."""
    inp, out = tmp_path / "in", tmp_path / "out"
    params = {"input": str(inp), "output": str(out)}
    before = write_clicks(inp, range(0, 2))
    api.run(home, JOB, "v1", params=params, until_caught_up=True, spark=spark, conf=COMPACT)
    api.drain(home, "v1", snapshot="drained", spark=spark)
    drained = api.snapshot_show(home, "drained").batch_id
    assert max(log_ids(out)) == drained
    assert output_rows(spark, out) == expected_windows(before, flush_all=True)

    after = write_clicks(inp, range(2, 4))
    first = drained + 5
    result = api.run(home, JOB, "v2", params=params, from_snapshot="drained",
                     first_batch=first, until_caught_up=True, spark=spark, conf=COMPACT)
    assert result.first_batch == first - 1
    assert_no_hole(out)
    assert output_rows(spark, out) == \
        expected_windows(before, flush_all=True) + expected_windows(after)

    after += write_clicks(inp, range(4, 6))
    api.run(home, JOB, "v2", params=params, until_caught_up=True, spark=spark)
    assert_no_hole(out)
    assert output_rows(spark, out) == \
        expected_windows(before, flush_all=True) + expected_windows(after)


@pytest.mark.parametrize("point", ["sink_gap.recorded", "sink_gap.entry_written",
                                   "restore.sink_seeded"])
def test_start_cut_off_while_closing_the_gap_leaves_the_table_readable(
    spark: Any, home: Home, tmp_path: Path, point: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    inp, out = tmp_path / "in", tmp_path / "out"
    params = {"input": str(inp), "output": str(out)}
    events = write_clicks(inp, range(0, 2))
    api.run(home, JOB, "v1", params=params, until_caught_up=True, spark=spark, conf=COMPACT)
    snap = api.snapshot_create(home, "v1", "s")
    rows_before = output_rows(spark, out)
    events += write_clicks(inp, range(2, 4))
    command = ["run", str(JOB), "--job", "v2", "--from-snapshot", "s",
               "--first-batch", str(snap.batch_id + 4), "--param", f"input={inp}",
               "--param", f"output={out}", "--until-caught-up",
               "--conf", "spark.sql.streaming.fileSink.log.compactInterval=3"]

    monkeypatch.setenv(CRASH_ENV, point)
    crashed = sparkpoint(home, *command)
    monkeypatch.delenv(CRASH_ENV)
    assert crashed.code == CRASH_EXIT_CODE, crashed.err
    assert_no_hole(out)
    assert output_rows(spark, out) == rows_before  # readable, and nothing new in it
    if point != "sink_gap.recorded":
        # The entries the cut-off start wrote are not the output's own job's: run into them,
        # its next batch would be skipped by Spark's sink and its rows lost.
        with pytest.raises(PreconditionError, match="another run"):
            api.run(home, JOB, "v1", params=params, until_caught_up=True, spark=spark,
                    conf=COMPACT)
        assert output_rows(spark, out) == rows_before

    again = sparkpoint(home, *command)
    assert again.code == 0, again.err
    assert "interrupted" in again.err, again.err
    assert_no_hole(out)
    assert output_rows(spark, out) == expected_windows(events)


def test_new_job_name_into_an_output_with_history_is_refused(
    spark: Any, home: Home, tmp_path: Path
) -> None:
    inp, out = tmp_path / "in", tmp_path / "out"
    params = {"input": str(inp), "output": str(out)}
    events = write_clicks(inp, range(0, 2))
    api.run(home, JOB, "wc2", params=params, until_caught_up=True, spark=spark)
    api.snapshot_create(home, "wc2", "s")
    events += write_clicks(inp, range(2, 4))
    state_of = {p: p.stat().st_mtime_ns for p in [*out.rglob("*"), *inp.rglob("*")]}

    typo = sparkpoint(home, "run", str(JOB), "--job", "wc22", "--param", f"input={inp}",
                      "--param", f"output={out}", "--until-caught-up")
    assert typo.code == 4, typo.err
    line = typo.err.strip().splitlines()[-1]
    assert "[OUTPUT_HAS_HISTORY]" in line and "Traceback" not in typo.err
    for named in (str(out), "job 'wc2'", "did you mean 'wc2'?"):
        assert named in line, named
    assert {p: p.stat().st_mtime_ns for p in [*out.rglob("*"), *inp.rglob("*")]} == state_of
    assert "wc22" not in [view.record.name for view in api.jobs_list(home)]
    assert not home.job_dir("wc22").exists()  # no record, checkpoint or job directory

    # The job under its own name, and an upgrade from a snapshot of it, still write there.
    api.run(home, JOB, "wc3", params=params, from_snapshot="s", until_caught_up=True,
            spark=spark)
    assert output_rows(spark, out) == expected_windows(events)
    brand_new = api.run(home, JOB, "fresh", params={**params, "output": str(tmp_path / "new")},
                        until_caught_up=True, spark=spark)
    assert brand_new.last_batch is not None


def test_existing_job_after_sparks_own_offline_repartition(
    spark: Any, home: Home, tmp_path: Path
) -> None:
    """A job's checkpoint repartitioned by Spark's own API (StreamingCheckpointManager) ends
    in a batch its output never saw: the next run gives it its entry instead of refusing the
    output as another run's."""
    from sparkpoint.spark.inspect import repartition

    inp, out = tmp_path / "in", tmp_path / "out"
    params = {"input": str(inp), "output": str(out)}
    events = write_clicks(inp, range(0, 2))
    first = api.run(home, JOB, "v1", params=params, until_caught_up=True, spark=spark,
                    conf={**COMPACT, "spark.sql.shuffle.partitions": "4"})
    assert first.last_batch is not None
    repartition(spark, home.checkpoint_dir("v1"), 3)
    events += write_clicks(inp, range(2, 4))
    again = api.run(home, JOB, "v1", params=params, until_caught_up=True, spark=spark)
    assert again.first_batch == first.last_batch + 1  # Spark's repartition batch
    assert_no_hole(out)
    assert output_rows(spark, out) == expected_windows(events)
