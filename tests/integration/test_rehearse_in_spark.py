"""The rehearsal's comparison with the exactly equal rows taken out by Spark (in_spark.py)
gives what the whole comparison in Python gives (compare.py), on outputs with duplicates,
NaN, -0.0, doubles apart by less and more than the tolerance, structs, arrays and repeated
column names; and outputs Spark cannot group (a map column, a column whose type changed)
are left to the comparison in Python."""

from __future__ import annotations

import math
import random
from typing import Any

import pytest
from pyspark.sql import Row

from sparkpoint.rehearse.compare import Output, compare, compare_rest
from sparkpoint.rehearse.in_spark import match_exactly

pytestmark = pytest.mark.spark

SCHEMA = ("hour INT, user STRING, total DOUBLE, "
          "span STRUCT<start: BIGINT, ratio: DOUBLE>, tags ARRAY<STRING>")


def _row(rng: random.Random, n: int) -> tuple[Any, ...]:
    total = rng.choice([float(n), math.nan, -0.0, 0.0, n / 7])
    return (n % 5, f"u{n % 11}", total, Row(start=n, ratio=n / 3), [f"t{n % 2}"])


def _nudged(row: tuple[Any, ...], rng: random.Random) -> tuple[Any, ...]:
    """The same row, or its double moved within (1e-12) or beyond (1e-3) the tolerance, or
    its -0.0 as 0.0."""
    hour, user, total, span, tags = row
    change = rng.random()
    if change < 0.2 and math.isfinite(total) and total != 0.0:
        total = total * (1 + 1e-12)
    elif change < 0.3 and math.isfinite(total):
        total = total + 1e-3
    elif total == 0.0:
        total = 0.0
    return (hour, user, total, span, tags)


def _both_ways(spark: Any, columns: list[str], old_rows: list[tuple[Any, ...]],
               new_rows: list[tuple[Any, ...]], schema: str) -> tuple[Any, Any]:
    old = spark.createDataFrame(old_rows, schema).toDF(*columns)
    new = spark.createDataFrame(new_rows, schema).toDF(*columns)
    matched = match_exactly(old, new)
    assert matched is not None
    in_spark = compare_rest(matched, [["hour", "user"]])
    numeric = frozenset({"hour", "total"})
    in_python = compare(Output(columns, old_rows, numeric), Output(columns, new_rows, numeric),
                        [["hour", "user"]])
    return in_spark, in_python


@pytest.mark.parametrize("seed", [1, 2])
def test_spark_side_matching_agrees_with_the_whole_comparison_in_python(
    spark: Any, seed: int
) -> None:
    rng = random.Random(seed)
    old_rows = [_row(rng, n) for n in range(300)]
    old_rows += old_rows[:40]  # duplicates: multisets
    new_rows = [_nudged(row, rng) for row in old_rows if rng.random() > 0.05]
    new_rows += [_row(rng, n) for n in range(1000, 1010)]
    rng.shuffle(new_rows)
    columns = ["hour", "user", "total", "span", "tags"]
    in_spark, in_python = _both_ways(spark, columns, old_rows, new_rows, SCHEMA)
    assert (in_spark.old_rows, in_spark.new_rows, in_spark.only_old, in_spark.only_new) == \
        (in_python.old_rows, in_python.new_rows, in_python.only_old, in_python.only_new)
    assert in_python.only_old > 0 and in_python.in_both > 0  # the input has both kinds
    assert in_spark.key_columns == in_python.key_columns == ["hour", "user"]
    changed = in_spark.examples["changed"]
    assert changed and all(group["old"] and group["new"] for group in changed)
    assert len(in_spark.examples["both"]) == len(in_python.examples["both"])


def test_repeated_column_names_are_compared_by_position_in_spark(spark: Any) -> None:
    columns = ["user", "n", "n"]
    old_rows = [("a", 1, 2), ("b", 3, 4), ("b", 3, 4)]
    new_rows = [("a", 1, 2), ("b", 4, 3), ("b", 3, 4)]
    in_spark, in_python = _both_ways(spark, columns, old_rows, new_rows,
                                     "user STRING, n1 INT, n2 INT")
    assert in_spark.compared_columns == ["user", "n", "n#2"]
    assert (in_spark.only_old, in_spark.only_new) == (in_python.only_old,
                                                      in_python.only_new) == (1, 1)


def test_outputs_spark_cannot_group_are_left_to_python(spark: Any) -> None:
    with_map = spark.createDataFrame([("a", {"k": 1})], "user STRING, m MAP<STRING, INT>")
    assert match_exactly(with_map, with_map) is None
    as_int = spark.createDataFrame([("a", 1)], "user STRING, n INT")
    as_text = spark.createDataFrame([("a", "1")], "user STRING, n STRING")
    assert match_exactly(as_int, as_text) is None
