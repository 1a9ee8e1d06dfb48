"""Comparing two outputs as multisets of rows, with examples grouped by key columns.

Pure Python: rows arrive as tuples in their frame's column order (Spark's ``Row`` objects are
tuples; nested structs are Rows too). Rows pair one to one with floats compared within a
relative tolerance (``match``); values are made JSON-friendly (times, decimals, bytes,
structs, NaN) for the examples. Columns pair by name; the k-th of several columns of one
name pairs with the k-th of that name on the other side and is shown as ``name#k``.
"""

from __future__ import annotations

import datetime as dt
import decimal
import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sparkpoint.rehearse.match import DEFAULT_FLOAT_TOLERANCE, Row, exact, pair_rows

if TYPE_CHECKING:
    from sparkpoint.rehearse.in_spark import ExactlyMatched

EXAMPLES_PER_KIND = 5


def json_value(value: Any) -> Any:
    """A value as --json shows it: structs as objects, times as ISO 8601."""
    fields = getattr(value, "__fields__", None)
    if fields:
        return {name: json_value(v) for name, v in zip(fields, value, strict=True)}
    if isinstance(value, list | tuple):
        return [json_value(v) for v in value]
    if isinstance(value, dict):
        return {str(k): json_value(v) for k, v in value.items()}
    if isinstance(value, dt.datetime | dt.date):
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, bytes | bytearray):
        return value.hex()
    if isinstance(value, float) and not math.isfinite(value):
        return str(value).replace("inf", "Infinity").replace("nan", "NaN")  # strict JSON
    return value


@dataclass(frozen=True)
class Output:
    """One side's rows; ``numeric`` names the columns that hold numbers (never keys)."""

    columns: list[str]
    rows: list[Row]
    numeric: frozenset[str] = frozenset()


@dataclass(frozen=True)
class Comparison:
    compared_columns: list[str]
    key_columns: list[str]
    old_rows: int
    new_rows: int
    only_old: int
    only_new: int
    columns_only_old: list[str]
    columns_only_new: list[str]
    examples: dict[str, Any] = field(default_factory=dict)

    @property
    def equal(self) -> bool:
        return (self.only_old == 0 and self.only_new == 0
                and not self.columns_only_old and not self.columns_only_new)

    @property
    def in_both(self) -> int:
        return self.old_rows - self.only_old


def key_columns(common: Sequence[str], operator_keys: Sequence[Sequence[str]],
                numeric: frozenset[str]) -> list[str]:
    """The columns rows are grouped by: the key of a stateful operator of the new job when
    both outputs carry all of it (the last such operator, nearest the sink), else the
    common columns that hold no numbers (times, names, ids as text)."""
    for keys in reversed(operator_keys):
        if keys and all(k in common for k in keys):
            return list(keys)
    return [c for c in common if c not in numeric]


def labels(columns: Sequence[str]) -> list[str]:
    """Each column's name, the k-th (k > 1) of several of one name as ``name#k``."""
    seen: Counter[str] = Counter()
    labels = []
    for name in columns:
        seen[name] += 1
        labels.append(name if seen[name] == 1 else f"{name}#{seen[name]}")
    return labels


def compare(old: Output, new: Output, operator_keys: Sequence[Sequence[str]] = (),
            float_tolerance: float = DEFAULT_FLOAT_TOLERANCE) -> Comparison:
    """Rows only in the old output, only in the new, and in both (as multisets, floats within
    ``float_tolerance`` relative, NaN equal to NaN) over the columns both have, with a few
    examples of each grouped by key columns."""
    old_labels, new_labels = labels(old.columns), labels(new.columns)
    common = [c for c in old_labels if c in new_labels]
    old_at = [old_labels.index(c) for c in common]
    new_at = [new_labels.index(c) for c in common]
    old_rows = [tuple(r[i] for i in old_at) for r in old.rows]
    new_rows = [tuple(r[i] for i in new_at) for r in new.rows]
    old_paired, new_paired = pair_rows(old_rows, new_rows, float_tolerance)
    numeric = frozenset(label for side, labels in ((old, old_labels), (new, new_labels))
                        for label, name in zip(labels, side.columns, strict=True)
                        if name in side.numeric)
    keys = key_columns(common, operator_keys, numeric)
    examples = _examples(common, keys, old_rows, new_rows, old_paired, new_paired)
    return Comparison(
        compared_columns=common, key_columns=keys, old_rows=len(old.rows),
        new_rows=len(new.rows), only_old=old_paired.count(False),
        only_new=new_paired.count(False),
        columns_only_old=[c for c in old_labels if c not in new_labels],
        columns_only_new=[c for c in new_labels if c not in old_labels],
        examples=examples)


def compare_rest(matched: ExactlyMatched, operator_keys: Sequence[Sequence[str]] = (),
                 float_tolerance: float = DEFAULT_FLOAT_TOLERANCE) -> Comparison:
    """As :func:`compare`, for outputs whose exactly equal rows Spark already took out
    (``in_spark.py``): the rest is paired within ``float_tolerance`` here."""
    columns = matched.columns
    old_paired, new_paired = pair_rows(matched.old_rest, matched.new_rest, float_tolerance)
    keys = key_columns(columns, operator_keys, matched.numeric)
    examples = _examples(columns, keys, matched.old_rest, matched.new_rest, old_paired,
                         new_paired)
    examples["both"] = ([_as_dict(columns, r) for r in matched.in_both]
                        + examples["both"])[:EXAMPLES_PER_KIND]
    return Comparison(
        compared_columns=columns, key_columns=keys, old_rows=matched.old_total,
        new_rows=matched.new_total, only_old=old_paired.count(False),
        only_new=new_paired.count(False), columns_only_old=matched.columns_only_old,
        columns_only_new=matched.columns_only_new, examples=examples)


def _as_dict(columns: Sequence[str], row: Row) -> dict[str, Any]:
    return {c: json_value(v) for c, v in zip(columns, row, strict=True)}


def _examples(common: list[str], keys: list[str], old_rows: list[Row], new_rows: list[Row],
              old_paired: list[bool], new_paired: list[bool]) -> dict[str, Any]:
    key_at = [common.index(k) for k in keys]

    def key_of(row: Row) -> Any:
        return exact(tuple(row[i] for i in key_at))

    gone = [r for r, paired in zip(old_rows, old_paired, strict=True) if not paired]
    came = [r for r, paired in zip(new_rows, new_paired, strict=True) if not paired]
    both = [r for r, paired in zip(old_rows, old_paired, strict=True) if paired]
    came_keys = {key_of(r) for r in came}
    changed_keys: dict[Any, dict[str, Any]] = {}
    if keys:
        for row in gone:
            if key_of(row) in came_keys:
                group = changed_keys.setdefault(key_of(row), {
                    "key": {k: json_value(row[i]) for k, i in zip(keys, key_at, strict=True)},
                    "old": [], "new": []})
                group["old"].append(_as_dict(common, row))
        for row in came:
            if key_of(row) in changed_keys:
                changed_keys[key_of(row)]["new"].append(_as_dict(common, row))
    return {
        "key_columns": keys,
        "changed": list(changed_keys.values())[:EXAMPLES_PER_KIND],
        "only_old": [_as_dict(common, r) for r in gone
                     if key_of(r) not in changed_keys][:EXAMPLES_PER_KIND],
        "only_new": [_as_dict(common, r) for r in came
                     if key_of(r) not in changed_keys][:EXAMPLES_PER_KIND],
        "both": [_as_dict(common, r) for r in both][:EXAMPLES_PER_KIND],
    }
