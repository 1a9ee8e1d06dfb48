"""The new job's first batch id against what its sink already holds, and the roll-back of an
interrupted start from a snapshot."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sparkpoint.checkpoint.sink_log import seed_empty_history
from sparkpoint.errors import UsageError
from sparkpoint.upgrade.batches import BatchChoice, SinkInfo, number_batches
from sparkpoint.upgrade.interrupted import intent_path, is_own_orphan, record_intent, roll_back


def _sink(tmp_path: Path, latest: int | None) -> SinkInfo:
    out = tmp_path / "out"
    if latest is not None:
        seed_empty_history(out, latest, 1000)
    return SinkInfo("parquet", out)


def test_file_sink_at_or_before_the_snapshot_continues_at_the_next_batch(tmp_path: Path) -> None:
    for latest in (None, 2, 5):
        check = number_batches(5, _sink(tmp_path / str(latest), latest), BatchChoice())
        assert check.problem is None and check.warning is None
        assert (check.numbering.first_batch, check.numbering.renumbered) == (6, False)
        assert check.numbering.checkpoint_batch == 5


def test_file_sink_ahead_is_a_problem_unless_renumbered(tmp_path: Path) -> None:
    sink = _sink(tmp_path, 9)
    check = number_batches(5, sink, BatchChoice())
    assert check.problem is not None
    for named in (str(sink.file_path), "snapshot's batch 5", "up to 9", "6..9",
                  "--renumber-batches", "new output directory"):
        assert named in check.problem
    renumbered = number_batches(5, sink, BatchChoice(renumber=True))
    assert renumbered.problem is None
    assert renumbered.numbering.to_dict() == {"snapshot_batch": 5, "first_batch": 10,
                                              "renumbered": True, "sink_latest_batch": 9,
                                              "rewind_to_batch": None}
    # A first batch past the sink's latest is fine; one inside it is still a problem.
    assert number_batches(5, sink, BatchChoice(first_batch=10)).problem is None
    assert number_batches(5, sink, BatchChoice(first_batch=8)).problem is not None


def test_sink_it_cannot_read_warns_and_takes_a_first_batch() -> None:
    sink = SinkInfo("foreachBatch", None)
    check = number_batches(3, sink, BatchChoice())
    assert check.problem is None and check.warning is not None
    assert "foreachBatch" in check.warning and "4.." in check.warning
    chosen = number_batches(3, sink, BatchChoice(first_batch=20))
    assert chosen.warning is None and chosen.numbering.checkpoint_batch == 19
    with pytest.raises(UsageError, match="at least 4"):
        number_batches(3, sink, BatchChoice(first_batch=3))
    with pytest.raises(UsageError, match="--first-batch K instead"):
        number_batches(3, sink, BatchChoice(renumber=True))
    with pytest.raises(UsageError, match="not both"):
        BatchChoice(renumber=True, first_batch=7)


def _checkpoint(path: Path, query_id: str) -> Path:
    (path / "offsets").mkdir(parents=True)
    (path / "metadata").write_text(json.dumps({"id": query_id}))
    return path


def test_roll_back_removes_staging_and_a_proven_orphan_only(tmp_path: Path) -> None:
    target = tmp_path / "job" / "checkpoint"
    staging = _checkpoint(tmp_path / "job" / ".checkpoint.ab12.tmp", "q1")
    record_intent(target, staging)
    staging.rename(target)
    debris = _checkpoint(tmp_path / "job" / ".checkpoint.scratch.x.tmp", "q2")
    assert is_own_orphan(target)
    lines: list[str] = []
    removed = roll_back(target, False, lines.append)
    assert set(removed) == {target, debris, intent_path(target)}
    assert not target.exists() and not debris.exists() and not intent_path(target).exists()
    assert "interrupted" in lines[0]

    # Another checkpoint than the intent names, or one a job record owns, is never touched.
    other = _checkpoint(target, "q3")
    intent_path(target).write_text('{"query_id": "q1"}')
    assert not is_own_orphan(target)
    roll_back(target, False, lines.append)
    assert (other / "metadata").is_file()
    record_intent(target, target)
    assert roll_back(target, True, lines.append) == []
    assert (other / "metadata").is_file()


def test_plan_text_shows_the_renumbering() -> None:
    from sparkpoint.cli.render import plan_text
    from sparkpoint.upgrade.batches import BatchNumbering
    from sparkpoint.upgrade.validate import UpgradePlan

    plan = UpgradePlan(batches=BatchNumbering(3, 8, True, 7))
    assert "batches: snapshot batch 3, first new batch 8 (renumbered: batch ids shifted by 4, " \
           "past the output's sink log at batch 7)" in plan_text(plan)
    assert plan.to_dict()["batches"] == {"snapshot_batch": 3, "first_batch": 8,
                                         "renumbered": True, "sink_latest_batch": 7,
                                         "rewind_to_batch": None}
    assert "batches: snapshot batch 3, first new batch 4\n" in \
        plan_text(UpgradePlan(batches=BatchNumbering(3, 4, False)))
    assert UpgradePlan().to_dict()["batches"] is None
