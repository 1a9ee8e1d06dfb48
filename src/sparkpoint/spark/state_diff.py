"""Comparing one operator's state in two checkpoints with Spark's own state reader.

Spark's state data source (``format("statestore")``) decodes each side's rows at its committed
batch, whatever the provider, the partition count or the checkpoint format; Spark then pairs
the two sides' keys (a full outer join) and counts, so the driver receives counts and at most
``rows`` examples per kind, never the state. Keys and values are compared as Spark's JSON of
them (``to_json``): an int key widened to bigint is still the same key, and values of any type
(maps included, which Spark cannot compare with ``=``) compare. When the value columns differ
(a migration added or removed one), the values are compared on the columns both have, by
name, and the columns each side alone has are named.

The state of a stream-stream join holds several buffered input rows per key: each side
(``joinSide`` left and right) is compared as a multiset of (key, value) rows instead.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

_KEY, _VALUE, _SIDE = "__sparkpoint_key", "__sparkpoint_value", "__sparkpoint_side"


@dataclass(frozen=True)
class StateSide:
    """One checkpoint's operator to read: Spark's state reader options for it."""

    checkpoint: Path
    batch: int
    operator_id: int


@dataclass
class PartDiff:
    """The comparison of one part of an operator's state (its keys; a join side's rows)."""

    part: str  # "keys", or "left rows" / "right rows" of a join
    only_in_a: int = 0
    only_in_b: int = 0
    changed: int = 0  # keys only: in both, with other values
    same: int = 0
    value_columns_only_in_a: list[str] = field(default_factory=list)
    value_columns_only_in_b: list[str] = field(default_factory=list)
    examples: dict[str, list[dict[str, Any]]] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"part": self.part, "only_in_a": self.only_in_a, "only_in_b": self.only_in_b,
                "changed": self.changed, "same": self.same,
                "value_columns_only_in_a": self.value_columns_only_in_a,
                "value_columns_only_in_b": self.value_columns_only_in_b,
                "examples": self.examples}


def _read(spark: SparkSession, side: StateSide, join_side: str | None) -> DataFrame:
    reader = (spark.read.format("statestore").option("batchId", side.batch)
              .option("operatorId", side.operator_id))
    if join_side is not None:
        reader = reader.option("joinSide", join_side)
    return reader.load(str(side.checkpoint))


def _value_fields(frame: DataFrame) -> list[str]:
    value_type = frame.schema["value"].dataType
    return [f.name for f in getattr(value_type, "fields", [])]


def _as_json(frame: DataFrame, columns: list[str]) -> DataFrame:
    """Key and value as Spark's JSON; the value restricted to ``columns`` (in that order)."""
    from pyspark.sql import functions as F

    value = F.to_json(F.struct(*[F.col("value").getField(c).alias(c) for c in columns])) \
        if columns else F.lit(None).cast("string")
    return frame.select(F.to_json(F.col("key")).alias(_KEY), value.alias(_VALUE))


def _shown(text: str | None) -> Any:
    return None if text is None else json.loads(text)


def diff_keys(spark: SparkSession, a: StateSide, b: StateSide, rows: int) -> PartDiff:
    """Keys only in A, only in B, in both with other values, in both alike."""
    from pyspark.sql import functions as F

    left, right = _read(spark, a, None), _read(spark, b, None)
    a_fields, b_fields = _value_fields(left), _value_fields(right)
    common = [c for c in a_fields if c in b_fields]
    diff = PartDiff("keys", value_columns_only_in_a=[c for c in a_fields if c not in b_fields],
                    value_columns_only_in_b=[c for c in b_fields if c not in a_fields])
    sides = _as_json(left, common).alias("a").join(
        _as_json(right, common).alias("b"), F.col(f"a.{_KEY}") == F.col(f"b.{_KEY}"),
        "full_outer")
    kind = (F.when(F.col(f"b.{_KEY}").isNull(), "only_in_a")
            .when(F.col(f"a.{_KEY}").isNull(), "only_in_b")
            .when(F.col(f"a.{_VALUE}").eqNullSafe(F.col(f"b.{_VALUE}")), "same")
            .otherwise("changed"))
    labelled = sides.select(kind.alias(_SIDE), F.coalesce(F.col(f"a.{_KEY}"),
                                                          F.col(f"b.{_KEY}")).alias(_KEY),
                            F.col(f"a.{_VALUE}").alias("a"), F.col(f"b.{_VALUE}").alias("b"))
    labelled = labelled.cache()
    try:
        for row in labelled.groupBy(_SIDE).count().collect():
            setattr(diff, row[_SIDE], row["count"])
        if rows > 0:
            for name in ("only_in_a", "only_in_b", "changed"):
                if getattr(diff, name):
                    found = labelled.filter(F.col(_SIDE) == name).orderBy(_KEY).limit(rows)
                    diff.examples[name] = [
                        {"key": _shown(r[_KEY]),
                         **({} if name == "only_in_b" else {"a": _shown(r["a"])}),
                         **({} if name == "only_in_a" else {"b": _shown(r["b"])})}
                        for r in found.collect()]
    finally:
        labelled.unpersist()
    return diff


def diff_join_side(spark: SparkSession, a: StateSide, b: StateSide, join_side: str,
                   rows: int) -> PartDiff:
    """A join side's buffered (key, value) rows as multisets: only in A, only in B, in
    both."""
    left, right = _read(spark, a, join_side), _read(spark, b, join_side)
    a_fields, b_fields = _value_fields(left), _value_fields(right)
    common = [c for c in a_fields if c in b_fields]
    diff = PartDiff(f"{join_side} rows",
                    value_columns_only_in_a=[c for c in a_fields if c not in b_fields],
                    value_columns_only_in_b=[c for c in b_fields if c not in a_fields])
    a_rows, b_rows = _as_json(left, common).cache(), _as_json(right, common).cache()
    try:
        only_a, only_b = a_rows.exceptAll(b_rows), b_rows.exceptAll(a_rows)
        diff.only_in_a, diff.only_in_b = only_a.count(), only_b.count()
        diff.same = a_rows.count() - diff.only_in_a
        if rows > 0:
            for name, frame, label in (("only_in_a", only_a, "a"), ("only_in_b", only_b, "b")):
                if getattr(diff, name):
                    diff.examples[name] = [
                        {"key": _shown(r[_KEY]), label: _shown(r[_VALUE])}
                        for r in frame.orderBy(_KEY, _VALUE).limit(rows).collect()]
    finally:
        a_rows.unpersist()
        b_rows.unpersist()
    return diff
