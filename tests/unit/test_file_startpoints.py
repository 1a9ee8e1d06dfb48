"""File-source startpoint resolution on a hand-made checkpoint: which files are read again,
which are skipped, and log entries written the way Spark writes them (compactions included).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from sparkpoint.checkpoint.layout import Checkpoint
from sparkpoint.checkpoint.source_log import FileSourceLogEntry, read_source_log
from sparkpoint.errors import ValidationError
from sparkpoint.sources.positions import SourceDescription
from sparkpoint.startpoints.apply import apply
from sparkpoint.startpoints.resolve import resolve
from sparkpoint.startpoints.store import Startpoint

T0 = 1_767_225_600_000


def _checkpoint(tmp: Path, read: int, unread: int, interval: int = 10) -> tuple[Path, Path]:
    """A checkpoint whose file source 'clicks' read ``read`` files, one per log entry, and an
    input directory holding ``unread`` more files."""
    inputs, root = tmp / "in", tmp / "ckpt"
    inputs.mkdir()
    for i in range(read + unread):
        path = inputs / f"f{i:02d}.json"
        path.write_text("{}\n")
        os.utime(path, ns=((T0 + i * 1000) * 1_000_000,) * 2)
    log = root / "sources" / "clicks"
    log.mkdir(parents=True)
    every = []
    for i in range(read):
        record = {"path": (inputs / f"f{i:02d}.json").as_uri(), "timestamp": T0 + i * 1000,
                  "batchId": i}
        every.append(record)
        if (i + 1) % interval == 0:
            (log / f"{i}.compact").write_text("v1\n" + "\n".join(json.dumps(r) for r in every))
        else:
            (log / str(i)).write_text("v1\n" + json.dumps(record))
    batch = read - 1
    (root / "offsets").mkdir()
    (root / "commits").mkdir()
    (root / "offsets" / str(batch)).write_text(
        'v2\n{"batchWatermarkMs":0,"batchTimestampMs":0,"conf":{}}\n'
        f'clicks:{{"logOffset":{batch}}}')
    (root / "commits" / str(batch)).write_text('v1\n{"nextBatchWatermarkMs":0}')
    return root, inputs


def _startpoint(kind: str, value: str | None = None) -> Startpoint:
    return Startpoint(source="clicks", kind=kind, value=value, set_at="now")  # type: ignore[arg-type]


def _apply(root: Path, inputs: Path, startpoint: Startpoint) -> list[str]:
    resolved = resolve(SourceDescription("clicks", "file", str(inputs)), [startpoint],
                       Checkpoint(root), 10)
    checkpoint = Checkpoint(root)
    apply(checkpoint, [resolved], checkpoint.require_latest_committed_batch())
    return resolved.lines


def _files(entry: list[dict[str, object]]) -> list[str]:
    return [str(r["path"]).rsplit("/", 1)[-1] for r in entry]


def test_earliest_lists_every_read_file_in_a_compaction_when_the_id_is_one(
    tmp_path: Path
) -> None:
    root, inputs = _checkpoint(tmp_path, read=9, unread=1)
    _apply(root, inputs, _startpoint("earliest"))
    # Entry 9 is a compaction batch ((9 + 1) % 10 == 0): Spark reads it as 9.compact.
    compact = FileSourceLogEntry.parse((root / "sources/clicks/9.compact").read_bytes(), "9")
    assert len(compact.files) == 18  # entries 0-8 again, plus entry 9's nine files
    entries = read_source_log(root / "sources" / "clicks")
    assert _files(entries[9]) == [f"f{i:02d}.json" for i in range(9)]
    assert {r["batchId"] for r in entries[9]} == {9}
    # The committed offset stays: the next batch reads entry 9, then f09 as a new file.
    assert "clicks:{\"logOffset\":8}" in (root / "offsets" / "8").read_text()


def test_latest_marks_unread_files_read_and_commits_past_them(tmp_path: Path) -> None:
    root, inputs = _checkpoint(tmp_path, read=12, unread=3)
    lines = _apply(root, inputs, _startpoint("latest"))
    entries = read_source_log(root / "sources" / "clicks")
    assert _files(entries[12]) == ["f12.json", "f13.json", "f14.json"]
    assert "clicks:{\"logOffset\":12}" in (root / "offsets" / "11").read_text()
    assert lines[0] == "skips 3 unread files"


def test_timestamp_skips_older_unread_and_rereads_newer_read_files(tmp_path: Path) -> None:
    root, inputs = _checkpoint(tmp_path, read=4, unread=2)
    # f02..f05 are at or after the cut: f02 and f03 were read and are read again; the unread
    # f04 and f05 are read as usual, so nothing is skipped and the offset stays.
    _apply(root, inputs, _startpoint("timestamp", "2026-01-01T00:00:02Z"))
    entries = read_source_log(root / "sources" / "clicks")
    assert _files(entries[4]) == ["f02.json", "f03.json"]
    assert 5 not in entries
    assert "clicks:{\"logOffset\":3}" in (root / "offsets" / "3").read_text()


def test_log_offset_past_the_end_is_refused_and_nothing_written(tmp_path: Path) -> None:
    root, inputs = _checkpoint(tmp_path, read=3, unread=0)
    before = sorted(p.name for p in (root / "sources" / "clicks").iterdir())
    with pytest.raises(ValidationError, match="past the end"):
        _apply(root, inputs, _startpoint("offset", '{"logOffset": 5}'))
    assert sorted(p.name for p in (root / "sources" / "clicks").iterdir()) == before
