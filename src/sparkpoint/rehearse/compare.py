"""Comparing two outputs as multisets of rows, with examples grouped by key columns.

Pure Python: rows arrive as tuples in their frame's column order (Spark's ``Row`` objects are
tuples; nested structs are Rows too). Values are made hashable (lists, maps) for counting and
JSON-friendly (times, decimals, bytes, structs) for the examples.
"""

from __future__ import annotations

import datetime as dt
import decimal
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

EXAMPLES_PER_KIND = 5

Row = tuple[Any, ...]


def _hashable(value: Any) -> Any:
    if isinstance(value, dict):
        return tuple(sorted((_hashable(k), _hashable(v)) for k, v in value.items()))
    if isinstance(value, list | tuple):
        # Rows keep their field names, so a struct {a, b} never equals a plain pair.
        fields = getattr(value, "__fields__", None)
        items = tuple(_hashable(v) for v in value)
        return (tuple(fields), items) if fields else items
    return value


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


def compare(old: Output, new: Output, operator_keys: Sequence[Sequence[str]] = ()) -> Comparison:
    """Rows only in the old output, only in the new, and in both (as multisets) over the
    columns both have, with a few examples of each grouped by key columns."""
    common = [c for c in old.columns if c in new.columns]
    old_at = [old.columns.index(c) for c in common]
    new_at = [new.columns.index(c) for c in common]
    old_rows = [tuple(r[i] for i in old_at) for r in old.rows]
    new_rows = [tuple(r[i] for i in new_at) for r in new.rows]
    old_count = Counter(_hashable(r) for r in old_rows)
    new_count = Counter(_hashable(r) for r in new_rows)
    only_old, only_new = old_count - new_count, new_count - old_count
    keys = key_columns(common, operator_keys, old.numeric | new.numeric)
    examples = _examples(common, keys, old_rows, new_rows, only_old, only_new)
    return Comparison(
        compared_columns=common, key_columns=keys, old_rows=len(old.rows),
        new_rows=len(new.rows), only_old=sum(only_old.values()),
        only_new=sum(only_new.values()),
        columns_only_old=[c for c in old.columns if c not in new.columns],
        columns_only_new=[c for c in new.columns if c not in old.columns],
        examples=examples)


def _pick(rows: list[Row], wanted: Counter[Any]) -> list[Row]:
    """The rows of ``rows`` counted in ``wanted``, as many times as counted."""
    left = Counter(wanted)
    picked = []
    for row in rows:
        frozen = _hashable(row)
        if left[frozen] > 0:
            left[frozen] -= 1
            picked.append(row)
    return picked


def _as_dict(columns: Sequence[str], row: Row) -> dict[str, Any]:
    return {c: json_value(v) for c, v in zip(columns, row, strict=True)}


def _examples(common: list[str], keys: list[str], old_rows: list[Row], new_rows: list[Row],
              only_old: Counter[Any], only_new: Counter[Any]) -> dict[str, Any]:
    key_at = [common.index(k) for k in keys]

    def key_of(row: Row) -> Any:
        return _hashable(tuple(row[i] for i in key_at))

    gone = _pick(old_rows, only_old)
    came = _pick(new_rows, only_new)
    both = _pick(old_rows, Counter(_hashable(r) for r in old_rows) - only_old)
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
