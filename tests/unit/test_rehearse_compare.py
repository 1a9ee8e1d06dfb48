"""The rehearsal's pure-Python parts: multiset comparison with key grouping, and which files
a file sink's log lists for a range of batches."""

from __future__ import annotations

import json
from pathlib import Path

from sparkpoint.checkpoint.sink_log import files_up_to
from sparkpoint.rehearse.compare import Output, compare

COLUMNS = ["hour", "user", "clicks"]


def test_multisets_keep_duplicates_and_group_changes_by_key() -> None:
    old = Output(COLUMNS, [(0, "ana", 3), (0, "ana", 3), (0, "bo", 1), (1, "cy", 2)],
                 frozenset({"hour", "clicks"}))
    new = Output(["user", "clicks", "hour"], [("ana", 3, 0), ("bo", 2, 0), ("dee", 1, 1)],
                 frozenset({"hour", "clicks"}))
    result = compare(old, new, operator_keys=[["hour", "user"]])
    assert (result.old_rows, result.new_rows, result.only_old, result.only_new) == (4, 3, 3, 2)
    assert not result.equal and result.in_both == 1
    assert result.key_columns == ["hour", "user"]
    examples = result.examples
    assert examples["changed"] == [{"key": {"hour": 0, "user": "bo"},
                                    "old": [{"hour": 0, "user": "bo", "clicks": 1}],
                                    "new": [{"hour": 0, "user": "bo", "clicks": 2}]}]
    assert examples["only_old"] == [{"hour": 0, "user": "ana", "clicks": 3},
                                    {"hour": 1, "user": "cy", "clicks": 2}]
    assert examples["only_new"] == [{"hour": 1, "user": "dee", "clicks": 1}]


def test_without_operator_keys_non_numeric_common_columns_group_and_new_columns_differ() -> None:
    old = Output(COLUMNS, [(0, "ana", 3)], frozenset({"hour", "clicks"}))
    new = Output([*COLUMNS, "urls"], [(0, "ana", 3, 2)], frozenset({"hour", "clicks", "urls"}))
    result = compare(old, new, operator_keys=[["event_id"]])
    assert result.key_columns == ["user"]
    assert (result.only_old, result.only_new) == (0, 0)
    assert result.columns_only_new == ["urls"] and not result.equal


def _entry(log: Path, name: str, paths: list[str]) -> None:
    lines = ["v1", *(json.dumps({"path": p, "action": "add"}) for p in paths)]
    (log / name).write_text("\n".join(lines))


def test_files_up_to_reads_through_compactions_and_says_when_entries_are_gone(
    tmp_path: Path
) -> None:
    log = tmp_path / "_spark_metadata"
    log.mkdir()
    _entry(log, "0", ["a"])
    _entry(log, "1", ["b"])
    _entry(log, "2.compact", ["a", "b", "c"])
    _entry(log, "3", ["d"])
    assert files_up_to(tmp_path, 1) == {"a", "b"}
    assert files_up_to(tmp_path, 3) == {"a", "b", "c", "d"}
    assert files_up_to(tmp_path, -1) == set()
    (log / "1").unlink()  # Spark deletes entries a compaction covers
    assert files_up_to(tmp_path, 1) is None
    assert files_up_to(tmp_path, 3) == {"a", "b", "c", "d"}
