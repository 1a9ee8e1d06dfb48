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
from sparkpoint.upgrade.output_ownership import nearest_name, writes_to


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


@pytest.mark.parametrize(("default", "latest_compact", "expected"), [
    (5, 4, 5),  # Spark's own cases (CompactibleFileStreamLogSuite): latest + 1 <= default
    (4, 9, 5),  # the first divisor of 10 at or above 4
    (10, 4, 5),  # latest + 1 below the default
    (5, 9, 10),  # default == 10 / 2: not below half, so latest + 1
    (3, 4, 5),  # default above half of 5: latest + 1
    (1, 2, 3),  # 1 < 3 / 2 in Scala's integer division is 1 < 1: false, so 3 (not 1)
    (2, 6, 7),  # 7 is prime: no divisor from 2 to 3, so 7
    (3, 11, 3),  # 3 divides 12
    (5, 11, 6),  # the first divisor of 12 at or above 5
])
def test_the_interval_derived_from_one_compaction_is_sparks(
    default: int, latest_compact: int, expected: int
) -> None:
    """``CompactibleFileStreamLog.deriveCompactInterval``, computed by hand from Spark's
    definition; the result always makes ``latest_compact`` a compaction batch."""
    assert derive_compact_interval(default, latest_compact) == expected
    assert (latest_compact + 1) % expected == 0


def test_a_fill_after_a_derived_interval_compacts_where_spark_would(tmp_path: Path) -> None:
    """One compaction seen, at 9, with a default of 5: Spark's interval is 10 (5 is not below
    10 / 2), so the fill's next compaction is 19, not 14."""
    out = _sink(tmp_path, {"9.compact": ["a"]})
    gap = find_gap(out, 20, 5)
    assert (gap.through, gap.interval, gap.batches) == (20, 10, tuple(range(10, 21)))
    assert [name for name in gap.names if name.endswith(".compact")] == ["19.compact"]


def test_a_compaction_written_by_a_fill_repeats_each_file_of_its_window_once(
    tmp_path: Path,
) -> None:
    """Entries before the newest compaction are still there (Spark's cleanup delay has not
    passed): the fill's compaction repeats the files of its own window, in which the
    previous compaction already names theirs, and nothing twice."""
    out = _sink(tmp_path, {"0": ["a"], "1": ["b"], "2.compact": ["a", "b", "c"], "3": ["d"],
                           "4": ["e"]})
    fill_gap(find_gap(out, 5, 3))
    lines = (out / "_spark_metadata" / "5.compact").read_text().split("\n")[1:]
    paths = [json.loads(line)["path"] for line in lines]
    assert sorted(paths) == [f"file:///o/{f}" for f in "abcde"]


def test_taking_back_a_fill_past_ten_goes_by_batch_number_and_keeps_the_log_whole(
    tmp_path: Path,
) -> None:
    """Names compared as numbers ("10" after "9"): entry 10, rewritten with files of its own
    by another job, stops the take-back with everything below it kept."""
    out = _sink(tmp_path, {"7": ["a"]})
    gap = find_gap(out, 11, 100)
    fill_gap(gap)
    _entry(out / "_spark_metadata", "10", ["b"])
    assert remove_filled(out, gap.names, 11) == ["11"]
    assert sorted(int(p.name) for p in (out / "_spark_metadata").iterdir()) == \
        [7, 8, 9, 10]


def test_a_take_back_repeated_after_a_cut_off_one_removes_the_rest(tmp_path: Path) -> None:
    out = _sink(tmp_path, {"0": ["a"]})
    gap = find_gap(out, 3, 10)
    fill_gap(gap)
    (out / "_spark_metadata" / "3").unlink()  # the first take-back got this far
    assert remove_filled(out, gap.names, 3) == ["2", "1"]
    assert [p.name for p in (out / "_spark_metadata").iterdir()] == ["0"]


def test_a_fill_meeting_another_writer_says_what_to_do(tmp_path: Path) -> None:
    out = _sink(tmp_path, {"0": ["a"]})
    gap = find_gap(out, 2, 10)
    _entry(out / "_spark_metadata", "1", ["b"])
    with pytest.raises(OutputHasHistoryError) as refused:
        fill_gap(gap)
    assert refused.value.message == (
        f"{out}/_spark_metadata/1: a job wrote batch 1 into the output {out} while its sink "
        "log was being brought up to the new checkpoint's batch; the output has another "
        "writer: stop it, or give this job a new, empty output directory")
