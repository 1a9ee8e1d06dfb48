"""Rewinding a file sink's output (sinks/rewind.py) on logs in Spark's format, and the batch
choices around it (upgrade/batches.py). Spark reading the rewound table is pinned by
tests/integration/test_rewind_output.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sparkpoint.checkpoint.sink_log import files_up_to, latest_batch
from sparkpoint.errors import SinkRewindError, UsageError
from sparkpoint.sinks import rewind as rewind_module
from sparkpoint.sinks.rewind import (
    ABANDONED_LOG_DIR,
    INTENT_FILE,
    RECORD_FILE,
    finish_pending,
    pending,
    plan_rewind,
    rewind,
)
from sparkpoint.upgrade.batches import BatchChoice, SinkInfo, number_batches

INTERVAL = 3  # compactions at batches 2, 5, 8...


def _status(path: Path) -> str:
    # FileStreamSinkLog's SinkFileStatus, as Spark's json4s writes it.
    return json.dumps({"path": path.as_uri(), "size": 10, "isDir": False,
                       "modificationTime": 1, "blockReplication": 1, "blockSize": 33554432,
                       "action": "add"}, separators=(",", ":"))


def _sink(out: Path, batches: int, partitioned: bool = False) -> dict[int, list[Path]]:
    """A sink log of batches 0..batches-1 with two data files each (compacted every 3)."""
    log = out / "_spark_metadata"
    log.mkdir(parents=True)
    files: dict[int, list[Path]] = {}
    for batch in range(batches):
        where = out / f"day={batch % 2}" if partitioned else out
        where.mkdir(exist_ok=True)
        files[batch] = [where / f"part-{batch}-{n}.parquet" for n in range(2)]
        for path in files[batch]:
            path.write_bytes(b"data")
            (path.parent / f".{path.name}.crc").write_bytes(b"crc")
        if (batch + 1) % INTERVAL == 0:
            listed = [p for b in range(batch + 1) for p in files[b]]
            name = f"{batch}.compact"
        else:
            listed = files[batch]
            name = str(batch)
        (log / name).write_text("v1\n" + "\n".join(_status(p) for p in listed))
        (log / f".{name}.crc").write_bytes(b"crc")
    return files


def _uris(files: dict[int, list[Path]], batches: range) -> set[str]:
    return {p.as_uri() for b in batches for p in files[b]}


@pytest.mark.parametrize(("to_batch", "moved_entries"), [
    (1, ["7", "6", "5.compact", "4", "3", "2.compact"]),  # back past two compactions
    (2, ["7", "6", "5.compact", "4", "3"]),  # to a compaction batch
    (6, ["7"]),  # within the newest compaction's span
])
def test_rewind_moves_later_entries_and_their_files_aside(
    tmp_path: Path, to_batch: int, moved_entries: list[str]
) -> None:
    out = tmp_path / "out"
    files = _sink(out, 8, partitioned=True)
    plan = plan_rewind(out, to_batch, "test")
    assert plan is not None
    assert plan.log_entries == moved_entries
    assert plan.latest_batch == 7
    rewind(plan)
    assert latest_batch(out) == to_batch
    assert files_up_to(out, to_batch) == _uris(files, range(to_batch + 1))
    for batch, paths in files.items():
        for path in paths:
            relative = path.relative_to(out)
            assert path.exists() == (batch <= to_batch)
            assert (Path(plan.directory) / relative).exists() == (batch > to_batch)
            assert (Path(plan.directory) / relative.parent / f".{path.name}.crc").exists() == \
                (batch > to_batch)
    for name in moved_entries:
        assert (Path(plan.directory) / ABANDONED_LOG_DIR / name).is_file()
        assert (Path(plan.directory) / ABANDONED_LOG_DIR / f".{name}.crc").is_file()
        assert not (out / "_spark_metadata" / f".{name}.crc").exists()
    assert not (Path(plan.directory) / INTENT_FILE).exists()
    record = json.loads((Path(plan.directory) / RECORD_FILE).read_text())
    assert record["to_batch"] == to_batch and record["log_entries"] == moved_entries
    assert pending(out) == []


def test_nothing_to_rewind_at_or_past_the_latest_batch(tmp_path: Path) -> None:
    out = tmp_path / "out"
    _sink(out, 4)
    assert plan_rewind(out, 3, "test") is None
    assert plan_rewind(out, 9, "test") is None
    assert plan_rewind(tmp_path / "absent", 0, "test") is None


def test_a_log_that_no_longer_tells_the_batch_is_refused(tmp_path: Path) -> None:
    """Spark deletes entries before an old compaction: batch 1's files are then unknown."""
    out = tmp_path / "out"
    _sink(out, 8)
    for name in ("0", "1", "2.compact"):
        (out / "_spark_metadata" / name).unlink()
    before = sorted(p.name for p in out.rglob("*"))
    with pytest.raises(SinkRewindError, match="no longer holds the entries"):
        plan_rewind(out, 1, "test")
    assert sorted(p.name for p in out.rglob("*")) == before
    assert plan_rewind(out, 5, "test") is not None  # from 5.compact on it still can


def test_files_outside_the_output_are_refused(tmp_path: Path) -> None:
    out = tmp_path / "out"
    _sink(out, 3)
    elsewhere = tmp_path / "elsewhere" / "part-x.parquet"
    (out / "_spark_metadata" / "3").write_text("v1\n" + _status(elsewhere))
    with pytest.raises(SinkRewindError, match="outside the output"):
        plan_rewind(out, 2, "test")


def test_an_interrupted_rewind_is_finished(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "out"
    files = _sink(out, 8)

    class Crash(Exception):
        pass

    def crash_at(name: str) -> None:
        if name == "rewind.file_moved":
            raise Crash(name)

    monkeypatch.setattr(rewind_module, "crash_point", crash_at)
    plan = plan_rewind(out, 3, "test")
    assert plan is not None
    with pytest.raises(Crash):
        rewind(plan)
    assert latest_batch(out) == 3  # the log is rewound; one file moved, the rest not
    assert [p.rewind_id for p in pending(out)] == [plan.rewind_id]
    monkeypatch.undo()
    lines: list[str] = []
    assert [p.rewind_id for p in finish_pending(out, lines.append)] == [plan.rewind_id]
    assert "finished an interrupted rewind" in lines[0]
    assert pending(out) == []
    for batch, paths in files.items():
        for path in paths:
            assert path.exists() == (batch <= 3)
            assert (Path(plan.directory) / path.name).exists() == (batch > 3)


def test_sink_ahead_names_the_three_ways_out(tmp_path: Path) -> None:
    out = tmp_path / "out"
    _sink(out, 10)
    sink = SinkInfo("parquet", out)
    check = number_batches(4, sink, BatchChoice())
    assert check.problem is not None
    for named in ("new output directory", "--rewind-output", "--renumber-batches",
                  "keeps the old run's rows of batches 5..9 in the table"):
        assert named in check.problem

    rewound = number_batches(4, sink, BatchChoice(rewind=True))
    assert rewound.problem is None and rewound.warning is None
    assert rewound.numbering.to_dict() == {"snapshot_batch": 4, "first_batch": 5,
                                           "renumbered": False, "sink_latest_batch": 9,
                                           "rewind_to_batch": 4}
    assert number_batches(9, sink, BatchChoice(rewind=True)).numbering.rewind_to_batch is None

    renumbered = number_batches(4, sink, BatchChoice(renumber=True))
    assert renumbered.problem is None and renumbered.warning is not None
    assert "keeps the old run's batches 5..9" in renumbered.warning
    assert "--rewind-output" in renumbered.warning


def test_rewind_needs_a_local_file_sink_and_excludes_the_other_choices() -> None:
    with pytest.raises(UsageError, match="not one"):
        number_batches(3, SinkInfo("foreachBatch", None), BatchChoice(rewind=True))
    with pytest.raises(UsageError, match="use only one of --renumber-batches, --rewind-output"):
        BatchChoice(renumber=True, rewind=True)
    with pytest.raises(UsageError, match="--first-batch, --rewind-output"):
        BatchChoice(first_batch=7, rewind=True)


def test_plan_text_shows_the_rewind() -> None:
    from sparkpoint.cli.render import plan_text
    from sparkpoint.upgrade.batches import BatchNumbering
    from sparkpoint.upgrade.validate import UpgradePlan

    text = plan_text(UpgradePlan(batches=BatchNumbering(1, 2, False, 5, rewind_to_batch=1)))
    assert "batches: snapshot batch 1, first new batch 2; the output is rewound to batch 1 " \
           "first (its batches 2..5 move aside)" in text
