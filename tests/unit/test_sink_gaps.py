"""Entries a file sink's log lacks, written as Spark's sink would have (no JVM)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sparkpoint.errors import OutputHasHistoryError
from sparkpoint.runtime.registry import JobRecord
from sparkpoint.sinks.gaps import (
    compact_interval,
    derive_compact_interval,
    fill_gap,
    find_gap,
    remove_filled,
)
from sparkpoint.sinks.ownership import nearest_name, writes_to


def _entry(log: Path, name: str, files: list[str]) -> None:
    lines = ["v1"] + [json.dumps({"path": f"file:///o/{f}", "size": 1, "isDir": False,
                                  "modificationTime": 1, "blockReplication": 1,
                                  "blockSize": 1, "action": "add"}) for f in files]
    (log / name).write_text("\n".join(lines))


def _sink(tmp_path: Path, entries: dict[str, list[str]]) -> Path:
    log = tmp_path / "out" / "_spark_metadata"
    log.mkdir(parents=True)
    for name, files in entries.items():
        _entry(log, name, files)
    return tmp_path / "out"


def test_gap_across_a_compaction_repeats_the_files_it_folds_in(tmp_path: Path) -> None:
    out = _sink(tmp_path, {"0": ["a"], "1": ["b"]})
    gap = find_gap(out, 4, 3)
    assert gap.batches == (2, 3, 4) and gap.names == ["2.compact", "3", "4"]
    fill_gap(gap)
    log = out / "_spark_metadata"
    compact = (log / "2.compact").read_text().split("\n")
    assert compact[0] == "v1"
    assert [json.loads(line)["path"] for line in compact[1:]] == ["file:///o/a", "file:///o/b"]
    assert (log / "3").read_text() == "v1" and (log / "4").read_text() == "v1"
    assert find_gap(out, 4, 3).batches == ()


def test_fresh_output_gets_the_window_spark_reads(tmp_path: Path) -> None:
    out = tmp_path / "out"
    gap = find_gap(out, 12, 10)
    assert gap.names == ["9.compact", "10", "11", "12"]
    fill_gap(gap)
    assert (out / "_spark_metadata" / "9.compact").read_text() == "v1"


def test_interval_follows_the_existing_compactions_as_spark_does(tmp_path: Path) -> None:
    assert compact_interval(_sink(tmp_path / "a", {"4.compact": [], "9.compact": []}), 3) == 5
    assert compact_interval(_sink(tmp_path / "b", {"11.compact": []}), 5) == 6
    assert compact_interval(_sink(tmp_path / "c", {"0": []}), 7) == 7
    assert derive_compact_interval(10, 2) == 3


def test_taking_back_a_fill_goes_newest_first_and_not_past_a_later_run(tmp_path: Path) -> None:
    out = _sink(tmp_path, {"0": ["a"]})
    gap = find_gap(out, 3, 10)
    fill_gap(gap)
    removed = remove_filled(out, gap.names, 3)
    assert removed == ["3", "2", "1"]
    fill_gap(gap)
    _entry(out / "_spark_metadata", "4", ["c"])  # a job ran into the output since
    assert remove_filled(out, gap.names, 3) == []


def test_taking_back_a_fill_keeps_a_batch_another_job_wrote_in_its_place(
    tmp_path: Path,
) -> None:
    """A start cut off after naming its fill (before writing it); meanwhile the output's own
    job ran batch 1 with files: the retry's roll-back must not delete that batch."""
    out = _sink(tmp_path, {"0": ["a"]})
    gap = find_gap(out, 2, 10)
    _entry(out / "_spark_metadata", "1", ["b"])
    removed = remove_filled(out, gap.names, 2)
    assert removed == []
    assert (out / "_spark_metadata" / "1").is_file()


def test_a_fill_stops_at_a_batch_another_job_wrote_meanwhile(tmp_path: Path) -> None:
    out = _sink(tmp_path, {"0": ["a"]})
    gap = find_gap(out, 2, 10)
    _entry(out / "_spark_metadata", "1", ["b"])
    with pytest.raises(OutputHasHistoryError, match="another writer"):
        fill_gap(gap)
    assert not (out / "_spark_metadata" / "2").exists()


def test_nearest_job_name() -> None:
    assert nearest_name("wc22", ["wc2", "clicks", "wc10"]) == "wc2"
    assert nearest_name("zzz", ["wc2"]) is None


def test_a_job_recorded_without_a_file_sink_does_not_own_a_directory_it_reads(
    tmp_path: Path,
) -> None:
    """A record names its file sink's output, or None for any other sink; only records
    written before outputs were recorded are matched by a parameter naming the directory."""
    out = _sink(tmp_path, {"0": ["a"]})
    base = {"name": "reader", "job_file": "job.py", "params": {"input": str(out)}}
    to_kafka = JobRecord.model_validate({**base, "output": None})
    older = JobRecord.model_validate(base)
    assert not writes_to(to_kafka, out)
    assert writes_to(older, out)
