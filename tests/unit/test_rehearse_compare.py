"""The rehearsal's pure-Python parts: multiset comparison with key grouping (floats within a
relative tolerance, NaN equal to NaN, duplicate column names by position), and which files
a file sink's log lists for a range of batches."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import Row

from sparkpoint.checkpoint.sink_log import files_up_to
from sparkpoint.errors import UsageError
from sparkpoint.rehearse.compare import Comparison, Output, compare
from sparkpoint.rehearse.match import check_float_tolerance
from sparkpoint.storage.home import Home
from tests.support.cli import sparkpoint

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


# Floats: NaN equals NaN, -0.0 equals 0.0, doubles within a relative tolerance pair one to
# one; everything else compares exactly.

NAN = float("nan")
SEQUENTIAL = ((0.1 + 0.7) + 0.2) + 0.3  # the same sum in two orders: 1.3, 1.2999999999999998
SPLIT = (0.1 + 0.7) + (0.2 + 0.3)


def _compare(old_rows: list[tuple[Any, ...]], new_rows: list[tuple[Any, ...]],
             columns: tuple[str, ...] = ("user", "total"), tolerance: float = 1e-9
             ) -> Comparison:
    numeric = frozenset(columns[1:])
    return compare(Output(list(columns), old_rows, numeric),
                   Output(list(columns), new_rows, numeric), float_tolerance=tolerance)


def _counts(result: Comparison) -> tuple[int, int, int]:
    return result.in_both, result.only_old, result.only_new


def test_nan_equals_nan_at_any_depth_and_never_a_number() -> None:
    rows = [("a", NAN), ("b", Row(mean=NAN, n=2)), ("c", [1.0, NAN]), ("d", {"x": NAN}),
            ("e", {NAN: 1.0})]
    # Fresh NaN objects on the other side: equal by value, not by identity.
    again = [("a", float("nan")), ("b", Row(mean=float("nan"), n=2)),
             ("c", [1.0, float("nan")]), ("d", {"x": float("nan")}), ("e", {float("nan"): 1.0})]
    for tolerance in (1e-9, 0.0):
        result = _compare(rows, again, tolerance=tolerance)
        assert result.equal and _counts(result) == (5, 0, 0)
    result = _compare([("a", NAN), ("b", NAN)], [("a", 0.0), ("b", None)])
    assert _counts(result) == (0, 2, 2)
    assert result.examples["changed"][0] == {"key": {"user": "a"}, "old": [
        {"user": "a", "total": "NaN"}], "new": [{"user": "a", "total": 0.0}]}
    inf = _compare([("a", float("inf")), ("b", float("-inf"))],
                   [("a", float("inf")), ("b", 1e308)])
    assert _counts(inf) == (1, 1, 1)
    assert inf.examples["only_old"] == [] and inf.examples["changed"][0]["old"] == [
        {"user": "b", "total": "-Infinity"}]


def test_negative_zero_equals_zero_even_exactly() -> None:
    for tolerance in (1e-9, 0.0):
        result = _compare([("a", -0.0), ("b", Row(x=-0.0))], [("a", 0.0), ("b", Row(x=0.0))],
                          tolerance=tolerance)
        assert result.equal


def test_a_reordered_sum_pairs_within_the_tolerance_one_to_one() -> None:
    assert SEQUENTIAL != SPLIT  # the premise: the order changes the last bit
    old = [("a", SEQUENTIAL), ("a", SEQUENTIAL), ("a", 2.0), ("b", SEQUENTIAL)]
    new = [("a", SPLIT), ("b", SPLIT), ("a", SEQUENTIAL), ("a", 2.0 * (1 + 1e-15))]
    result = _compare(old, new)
    assert result.equal and _counts(result) == (4, 0, 0)
    assert Counter(r["user"] for r in result.examples["both"]) == Counter(
        {"a": 3, "b": 1})
    # Counts still matter: a third near-equal row has no partner, nor does a row of
    # another user within the tolerance.
    result = _compare(old, [*new, ("a", SPLIT), ("c", SPLIT)])
    assert _counts(result) == (4, 0, 2)
    assert Counter(r["user"] for r in result.examples["only_new"]) == Counter({"a": 1, "c": 1})
    # 0: bit for bit, as before.
    exact = _compare(old, new, tolerance=0.0)
    assert _counts(exact) == (1, 3, 3)


def test_a_difference_beyond_the_tolerance_is_still_reported() -> None:
    old = [("a", 1.3), ("b", 100.0), ("c", 0.0)]
    new = [("a", 1.3 * (1 + 1e-7)), ("b", 100.0 * (1 + 5e-10)), ("c", 1e-300)]
    result = _compare(old, new)
    assert _counts(result) == (1, 2, 2)  # b within 1e-9; a is 1e-7 off; c relative to 0
    changed = {g["key"]["user"]: (g["old"], g["new"]) for g in result.examples["changed"]}
    assert changed["a"] == ([{"user": "a", "total": 1.3}],
                            [{"user": "a", "total": 1.3 * (1 + 1e-7)}])
    assert _counts(_compare(old, new, tolerance=1e-6)) == (2, 1, 1)


def test_floats_in_structs_arrays_and_maps_pair_within_the_tolerance() -> None:
    old = [("a", Row(total=SEQUENTIAL, n=4), [SEQUENTIAL, 1.0], {"p": SEQUENTIAL})]
    new = [("a", Row(total=SPLIT, n=4), [SPLIT, 1.0], {"p": SPLIT})]
    columns = ("user", "stats", "parts", "by_page")
    assert _compare(old, new, columns).equal
    assert not _compare(old, new, columns, tolerance=0.0).equal
    # Everything that is not a float still compares exactly.
    for changed in ((Row(total=SPLIT, n=5), [SPLIT, 1.0], {"p": SPLIT}),
                    (Row(total=SPLIT, n=4), [SPLIT, 1.0, 1.0], {"p": SPLIT}),
                    (Row(total=SPLIT, n=4), [SPLIT, 1.0], {"q": SPLIT}),
                    (Row(sum=SPLIT, n=4), [SPLIT, 1.0], {"p": SPLIT})):
        assert _counts(_compare(old, [("a", *changed)], columns)) == (0, 1, 1)


def test_rows_with_several_floats_pair_whatever_order_noise_sorts_them_in() -> None:
    # Sorted by floats, old and new list these rows in opposite orders (the first floats
    # differ by noise only): pairing must still find both pairs.
    up = 1.0 * (1 + 2e-16)
    old = [("a", 1.0, 5.0), ("a", up, 3.0)]
    new = [("a", up, 5.0), ("a", 1.0, 3.0)]
    result = _compare(old, new, ("user", "x", "y"))
    assert result.equal
    # One float per row: each old row takes the smallest new row within the tolerance, so
    # a row near two others leaves the farther one to the row that needs it.
    old = [("a", 1.0), ("a", 1.0 + 1.5e-9)]
    new = [("a", 1.0 + 0.8e-9), ("a", 1.0 + 2.2e-9)]
    assert _compare(old, new).equal


def test_duplicate_column_names_compare_by_position_among_their_name() -> None:
    columns = ["k", "v", "v"]
    old = Output(columns, [("a", 1, 2), ("b", 3, 4)], frozenset({"v"}))
    # The other side's columns in another order: k-th "v" still pairs with k-th "v".
    same = Output(["v", "k", "v"], [(1, "a", 2), (3, "b", 4)], frozenset({"v"}))
    result = compare(old, same)
    assert result.equal and result.compared_columns == ["k", "v", "v#2"]
    assert result.key_columns == ["k"]
    second_differs = Output(["v", "k", "v"], [(1, "a", 2), (3, "b", 5)], frozenset({"v"}))
    result = compare(old, second_differs)
    assert _counts(result) == (1, 1, 1)
    assert result.examples["changed"] == [{"key": {"k": "b"},
                                           "old": [{"k": "b", "v": 3, "v#2": 4}],
                                           "new": [{"k": "b", "v": 3, "v#2": 5}]}]
    one_v = Output(["k", "v"], [("a", 1), ("b", 3)], frozenset({"v"}))
    result = compare(old, one_v)
    assert result.columns_only_old == ["v#2"] and result.columns_only_new == []
    assert _counts(result) == (2, 0, 0) and not result.equal


@pytest.mark.parametrize("value", ["-1", "abc", "nan", "inf", "1", ""])
def test_a_bad_float_tolerance_is_one_usage_line_and_changes_nothing(
    tmp_path: Path, value: str
) -> None:
    home = Home(tmp_path / "home")
    done = sparkpoint(home, "rehearse", str(tmp_path / "job.py"), "--from-snapshot", "s",
                      "--against", "j", "--float-tolerance", value)
    assert done.code == 2, done.err
    assert done.out == "" and len(done.err.strip().splitlines()) == 1, done.err
    assert "--float-tolerance: expected a relative tolerance, a number >= 0 and < 1" in done.err
    assert value in done.err and "Traceback" not in done.err
    assert not (tmp_path / "home").exists()


@pytest.mark.parametrize("value", [-1e-9, float("nan"), float("inf"), 1.0, True])
def test_the_api_refuses_a_bad_float_tolerance_alike(value: float) -> None:
    with pytest.raises(UsageError, match="float_tolerance: expected a relative tolerance"):
        check_float_tolerance(value, "float_tolerance")
    assert check_float_tolerance(0, "float_tolerance") == 0.0
