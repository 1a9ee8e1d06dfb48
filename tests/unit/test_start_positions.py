"""Start positions of a new source: which files a file source skips, what other sources
accept, and how bad positions are refused."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from sparkpoint.checkpoint.source_log import FileSourceLogEntry
from sparkpoint.errors import ValidationError
from sparkpoint.sources.file_input import input_files
from sparkpoint.sources.positions import SourceDescription, parse_timestamp, resolve_start

T0 = 1_767_225_600_000  # 2026-01-01T00:00:00Z in ms


def _file(path: Path, mtime_ms: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("{}\n")
    os.utime(path, ns=(mtime_ms * 1_000_000, mtime_ms * 1_000_000))


@pytest.fixture
def inputs(tmp_path: Path) -> Path:
    _file(tmp_path / "b.json", T0 + 2000)
    _file(tmp_path / "a.json", T0)
    _file(tmp_path / "day=2" / "c.json", T0 + 4000)
    _file(tmp_path / ".hidden.json", T0)
    _file(tmp_path / "_SUCCESS", T0)
    _file(tmp_path / "d.json._COPYING_", T0)
    return tmp_path


def test_listing_is_recursive_oldest_first_and_skips_what_spark_skips(inputs: Path) -> None:
    names = [f.uri.rsplit("/", 1)[-1] for f in input_files(inputs)]
    assert names == ["a.json", "b.json", "c.json"]


def _skipped(position: object) -> list[str]:
    assert position is not None
    entry = FileSourceLogEntry.parse(position.log_files["0"], "0")  # type: ignore[attr-defined]
    return [f["path"].rsplit("/", 1)[-1] for f in entry.files]


def test_latest_marks_every_file_read(inputs: Path) -> None:
    position = resolve_start(SourceDescription("s", "file", str(inputs)), "latest", "sources.s")
    assert position is not None and position.offset_json == '{"logOffset":0}'
    assert _skipped(position) == ["a.json", "b.json", "c.json"]


def test_timestamp_skips_files_modified_before_it(inputs: Path) -> None:
    source = SourceDescription("s", "file", inputs.as_uri())
    position = resolve_start(source, {"timestamp": "2026-01-01T00:00:02Z"}, "sources.s")
    assert _skipped(position) == ["a.json"]
    # Before every file: nothing to skip, the source starts at its beginning.
    assert resolve_start(source, {"timestamp": "2025-12-31T23:00:00+00:00"}, "x") is None


def test_refusals_name_the_entry(inputs: Path) -> None:
    file_source = SourceDescription("s", "file", str(inputs))
    with pytest.raises(ValidationError, match=r"sources\.s: .*own log"):
        resolve_start(file_source, {"offset": {"logOffset": 3}}, "sources.s")
    with pytest.raises(ValidationError, match=r"sources\.s: .*no zone"):
        resolve_start(file_source, {"timestamp": "2026-01-01T00:00:00"}, "sources.s")
    with pytest.raises(ValidationError, match=r"sources\.r: start latest .*'rate' source"):
        resolve_start(SourceDescription("r", "rate"), "latest", "sources.r")
    with pytest.raises(ValidationError, match="not on the local file system"):
        resolve_start(SourceDescription("s", "file", "s3a://bucket/in"), "latest", "sources.s")


def test_other_sources_take_an_explicit_offset_verbatim() -> None:
    position = resolve_start(SourceDescription("k", "kafka"), {"offset": {"t": {"0": 42}}}, "x")
    assert position is not None and position.offset_json == '{"t":{"0":42}}'


def test_timestamps_need_a_zone_and_count_milliseconds() -> None:
    assert parse_timestamp("2026-01-01T00:00:00.250Z", "x") == T0 + 250
    with pytest.raises(ValidationError, match="ISO 8601"):
        parse_timestamp("yesterday", "x")
