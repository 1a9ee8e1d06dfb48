"""The exact part of a rehearsal's comparison done by Spark, so that outputs of any size can be
compared without holding them in this process.

Both outputs are put together and grouped by every compared column, counting each row on
each side: a row the two sides hold the same number of times is matched exactly and stays
in Spark. Only the rest (rows one side holds more often than the other, usually none or a
few) comes here, where ``compare.py`` pairs it within the float tolerance and groups it by
key for the examples. Spark's grouping treats NaN as equal to NaN and -0.0 as equal to 0.0,
also inside structs and arrays, as ``match.exact`` does.

Outputs Spark cannot group this way (a map column, whose values Spark does not compare) or
whose compared columns differ in type are compared whole in this process instead.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from sparkpoint.rehearse.compare import EXAMPLES_PER_KIND, labels
from sparkpoint.rehearse.match import Row
from sparkpoint.spark.output import NUMERIC_TYPES

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

# Names of the counting columns (no output column of a real job is called this).
_OLD, _NEW = "__sparkpoint_old_count", "__sparkpoint_new_count"


@dataclass(frozen=True)
class ExactlyMatched:
    """Two outputs with the rows they hold alike taken out (columns: those both have)."""

    columns: list[str]
    numeric: frozenset[str]
    old_rest: list[Row]
    new_rest: list[Row]
    old_total: int
    new_total: int
    in_both: list[Row]  # a few rows both hold, for the examples
    columns_only_old: list[str]
    columns_only_new: list[str]


def _groupable(type_string: str) -> bool:
    return "map<" not in type_string


def match_exactly(old: DataFrame, new: DataFrame) -> ExactlyMatched | None:
    """Counts and the rows not matched exactly, or None when Spark cannot compare these
    outputs by grouping (then compare them whole)."""
    from pyspark.sql import functions as F

    old_labels, new_labels = labels(old.columns), labels(new.columns)
    common = [c for c in old_labels if c in new_labels]
    old_types = [f.dataType.simpleString() for f in old.schema.fields]
    new_types = [f.dataType.simpleString() for f in new.schema.fields]
    old_at = [old_labels.index(c) for c in common]
    new_at = [new_labels.index(c) for c in common]
    if not common or any(old_types[i] != new_types[j] or not _groupable(old_types[i])
                         for i, j in zip(old_at, new_at, strict=True)):
        return None
    # Columns by position under names of their own: outputs may repeat a column's name.
    names = [f"c{n}" for n in range(len(common))]

    def side(frame: DataFrame, at: list[int], is_old: bool) -> DataFrame:
        renamed = frame.toDF(*[f"s{n}" for n in range(len(frame.columns))])
        return renamed.select(*[F.col(f"s{i}").alias(name) for i, name in zip(at, names,
                                                                              strict=True)],
                              F.lit(1 if is_old else 0).alias(_OLD),
                              F.lit(0 if is_old else 1).alias(_NEW))

    # Read three times below (totals, the rest, a few rows in both): grouped once, kept.
    counted = (side(old, old_at, True).unionAll(side(new, new_at, False))
               .groupBy(*names).agg(F.sum(_OLD).alias(_OLD), F.sum(_NEW).alias(_NEW))
               .persist())
    try:
        totals = counted.agg(F.sum(_OLD), F.sum(_NEW)).collect()[0]
        old_rest: list[Row] = []
        new_rest: list[Row] = []
        for row in counted.filter(F.col(_OLD) != F.col(_NEW)).toLocalIterator():
            values = tuple(row[:len(names)])
            surplus = int(row[_OLD]) - int(row[_NEW])
            (old_rest if surplus > 0 else new_rest).extend([values] * abs(surplus))
        both = [tuple(row[:len(names)]) for row in
                counted.filter((F.col(_OLD) > 0) & (F.col(_NEW) > 0))
                .limit(EXAMPLES_PER_KIND).collect()]
    finally:
        counted.unpersist()
    numeric = frozenset(label for label, i in zip(common, old_at, strict=True)
                        if old.schema.fields[i].dataType.typeName() in NUMERIC_TYPES)
    return ExactlyMatched(
        columns=common, numeric=numeric, old_rest=old_rest, new_rest=new_rest,
        old_total=int(totals[0] or 0), new_total=int(totals[1] or 0), in_both=both,
        columns_only_old=[c for c in old_labels if c not in new_labels],
        columns_only_new=[c for c in new_labels if c not in old_labels])
