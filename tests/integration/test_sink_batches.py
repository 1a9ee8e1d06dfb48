"""A job started from an older snapshot into an output its old version went on writing: the
file sink would skip the new job's batches (their ids are in its log), so the start is refused,
and --renumber-batches numbers the new batches past the log so every new row is written.
Sinks sparkpoint cannot read get a warning and --first-batch."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from sparkpoint import api
from sparkpoint.checkpoint.sink_log import committed_files
from sparkpoint.errors import UsageError
from sparkpoint.storage.home import Home
from sparkpoint.testing import expected_hourly_counts, output_rows, sink_files_up_to, write_clicks
from tests.conftest import EXAMPLES
from tests.support.cli import sparkpoint

JOB = EXAMPLES / "clicks_job.py"
FOREACH_JOB = Path(__file__).resolve().parent.parent / "data" / "jobs" / "clicks_foreach_batch.py"
pytestmark = pytest.mark.spark


def _snapshot_then_go_on(
    spark: Any, home: Home, inp: Path, out: Path, job_file: Path
) -> tuple[list[Any], int, int]:
    """v1 runs over 3 input files, is snapshotted as 'old' at its batch N, then goes on over
    3 more into ``out`` up to batch L; returns the events, N and L."""
    params = {"input": str(inp), "output": str(out), "files_per_batch": "1"}
    events = write_clicks(inp, range(0, 3))
    first = api.run(home, job_file, "v1", params=params, until_caught_up=True, spark=spark)
    manifest = api.snapshot_create(home, "v1", "old")
    assert first.last_batch is not None and manifest.batch_id == first.last_batch >= 2
    events += write_clicks(inp, range(3, 6))
    second = api.run(home, job_file, "v1", params=params, until_caught_up=True, spark=spark)
    assert second.last_batch is not None and second.last_batch >= manifest.batch_id + 3
    return events, manifest.batch_id, second.last_batch


def test_output_ahead_of_snapshot_is_refused_then_renumbered(
    spark: Any, home: Home, tmp_path: Path
) -> None:
    inp, out = tmp_path / "in", tmp_path / "out"
    events, n, latest = _snapshot_then_go_on(spark, home, inp, out, JOB)
    before = sorted(p.name for p in (out / "_spark_metadata").iterdir())
    old_files = set(committed_files(out))
    up_to_snapshot = sink_files_up_to(out, n)
    args = [str(JOB), "--from-snapshot", "old", "--param", f"input={inp}",
            "--param", f"output={out}", "--param", "files_per_batch=1"]

    refused = sparkpoint(home, "run", *args[:1], "--job", "v2", *args[1:], "--until-caught-up")
    assert refused.code == 4, refused.err
    assert "[SINK_AHEAD]" in refused.err
    for named in (str(out), f"snapshot's batch {n}", f"batches up to {latest}",
                  "--renumber-batches",
                  "new output directory"):
        assert named in refused.err, named
    assert not home.job_dir("v2").exists()  # no job dir, record or checkpoint
    assert sorted(p.name for p in (out / "_spark_metadata").iterdir()) == before

    planned = sparkpoint(home, "plan", *args, "--json")
    assert planned.code == 3, planned.err
    doc = planned.json()
    assert doc["ok"] is False
    assert any(str(out) in p and "--renumber-batches" in p for p in doc["problems"])
    assert doc["batches"] == {"snapshot_batch": n, "first_batch": n + 1, "renumbered": False,
                              "sink_latest_batch": latest, "rewind_to_batch": None}

    renumbered_plan = api.plan(home, JOB, params={"input": str(inp), "output": str(out),
                                                  "files_per_batch": "1"},
                               from_snapshot="old", spark=spark, renumber_batches=True)
    assert renumbered_plan.ok, renumbered_plan.problems
    assert renumbered_plan.batches is not None
    assert renumbered_plan.batches.to_dict() == {
        "snapshot_batch": n, "first_batch": latest + 1, "renumbered": True,
        "sink_latest_batch": latest, "rewind_to_batch": None}

    ran = sparkpoint(home, "run", *args[:1], "--job", "v2", *args[1:], "--until-caught-up",
                     "--renumber-batches")
    assert ran.code == 0, ran.err
    assert f"starting at batch {latest + 1}" in ran.err

    # The new job's batches cross the sink log's compaction (every 10): read what it lists.
    new_rows = output_rows(spark, out, sorted(set(committed_files(out)) - old_files))
    assert new_rows, "the run after the snapshot emitted nothing: the input is too small"
    # v1's rows up to the snapshot plus the new rows are every window, computed here: the
    # renumbered run emitted what the snapshot had still to emit, once.
    assert output_rows(spark, out, up_to_snapshot) + new_rows == \
        expected_hourly_counts(events)


def _foreach_rows(spark: Any, out: Path) -> Counter[Any]:
    frame = spark.read.parquet(str(out))
    return Counter(tuple(row) for row in frame.collect())


def test_sink_it_cannot_read_warns_and_first_batch_sets_the_ids(
    spark: Any, home: Home, tmp_path: Path
) -> None:
    inp, out = tmp_path / "in", tmp_path / "out"
    _events, n, latest = _snapshot_then_go_on(spark, home, inp, out, FOREACH_JOB)
    params = {"input": str(inp), "output": str(out), "files_per_batch": "1"}

    warned = api.plan(home, FOREACH_JOB, params=params, from_snapshot="old", spark=spark)
    assert warned.ok, warned.problems
    warning = next(w for w in warned.warnings if "foreachBatch" in w)
    assert f"{n + 1}.." in warning and "--first-batch" in warning
    assert warned.batches is not None and warned.batches.first_batch == n + 1

    for too_early in (0, n):
        with pytest.raises(UsageError, match=f"--first-batch {too_early}: .* at least {n + 1}"):
            api.plan(home, FOREACH_JOB, params=params, from_snapshot="old", spark=spark,
                     first_batch=too_early)
    with pytest.raises(UsageError, match="reads the batches a file sink"):
        api.plan(home, FOREACH_JOB, params=params, from_snapshot="old", spark=spark,
                 renumber_batches=True)

    first = latest + 5
    chosen = api.plan(home, FOREACH_JOB, params=params, from_snapshot="old", spark=spark,
                      first_batch=first)
    assert chosen.ok, chosen.problems
    assert not any("foreachBatch" in w for w in chosen.warnings)
    assert chosen.batches is not None and chosen.batches.to_dict() == {
        "snapshot_batch": n, "first_batch": first, "renumbered": True,
        "sink_latest_batch": None, "rewind_to_batch": None}

    # The old job's batches n+1..latest are in the output; the new job's run from `first`.
    old_rows = _foreach_rows(spark, out)
    result = api.run(home, FOREACH_JOB, "v2", params=params, from_snapshot="old",
                     until_caught_up=True, spark=spark, first_batch=first)
    shift = first - (n + 1)
    assert (result.first_batch, result.last_batch) == (first - 1, latest + shift)
    batches = sorted(int(p.name.split("=")[1]) for p in out.iterdir()
                     if p.name.startswith("batch="))
    assert batches == list(range(0, latest + 1)) + list(range(first, latest + shift + 1))
    new_rows = _foreach_rows(spark, out) - old_rows
    after_snapshot = Counter({row: k for row, k in old_rows.items() if row[-1] > n})
    # The new job's rows are the old job's rows after the snapshot, batch ids shifted.
    assert new_rows == Counter({(*row[:-1], row[-1] + shift): k
                                for row, k in after_snapshot.items()})
    assert new_rows


def test_options_need_a_start_from_a_snapshot(home: Home, tmp_path: Path) -> None:
    both = sparkpoint(home, "plan", str(JOB), "--from-snapshot", "old", "--renumber-batches",
                      "--first-batch", "5")
    assert both.code == 2 and "not both" in both.err, both.err
    plain = sparkpoint(home, "run", str(JOB), "--job", "j", "--first-batch", "5")
    assert plain.code == 2 and "--from-snapshot" in plain.err, plain.err
    assert not home.job_dir("j").exists()


TIMERS = FOREACH_JOB.parent / "timers.py"


def test_transform_with_state_resumes_under_renumbered_batches(
    spark: Any, home: Home, tmp_path: Path
) -> None:
    """transformWithState keeps operator metadata per batch (_metadata/v2/<batch>): it moves
    with the renumbered batches, and the state and its timers carry over (a drain fires
    them: every user's count of all clicks)."""
    clicks = write_clicks(tmp_path / "in", range(0, 3))
    params = {"mode": "EventTime", "input": str(tmp_path / "in"),
              "output": str(tmp_path / "out1")}
    api.run(home, TIMERS, "v1", params=params, until_caught_up=True, spark=spark)
    n = api.snapshot_create(home, "v1", "s1").batch_id
    clicks += write_clicks(tmp_path / "in", range(3, 5))
    v2 = {**params, "output": str(tmp_path / "out2")}
    result = api.run(home, TIMERS, "v2", params=v2, from_snapshot="s1", until_caught_up=True,
                     spark=spark, first_batch=n + 20)
    assert result.first_batch == n + 19
    metadata = home.checkpoint_dir("v2") / "state" / "0" / "_metadata" / "v2"
    assert min(int(p.name) for p in metadata.iterdir() if p.name.isdigit()) >= 19
    api.drain(home, "v2", spark=spark)
    expected = Counter((user, k) for user, k in Counter(c.user for c in clicks).items())
    assert output_rows(spark, tmp_path / "out2") == expected
