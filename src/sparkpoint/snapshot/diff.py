"""``snapshot diff A B``: what differs between two snapshots' state, operator by operator.

Operators are matched by name (the names sparkpoint gives them, ``snapshot show``); for each
one in both snapshots, Spark's state reader compares the two (``spark/state_diff.py``): keys
only in A, only in B, in both with other values, with up to ``rows`` examples of each. So a
user sees what a migration, a prune or a period of running changed before trusting it. Both
snapshots are only read.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sparkpoint.errors import UnknownOperatorError
from sparkpoint.snapshot.manifest import Manifest, OperatorEntry
from sparkpoint.snapshot.store import SnapshotStore
from sparkpoint.spark.state_diff import PartDiff, StateSide, diff_join_side, diff_keys

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

Echo = Callable[[str], None]
# transformWithState keeps each state variable in a column family of its own, which Spark's
# reader reads one at a time by name (stateVarName): not compared here.
_NOT_COMPARED = {"transform_with_state": (
    "not compared: transformWithState keeps each state variable apart; compare them with "
    "spark.read.format('statestore').option('stateVarName', NAME)")}


@dataclass
class OperatorDiff:
    name: str
    kind: str
    in_a: bool
    in_b: bool
    rows_a: int | None = None  # from the manifests, for an operator only one side has
    rows_b: int | None = None
    parts: list[PartDiff] = field(default_factory=list)
    note: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"operator": self.name, "kind": self.kind, "in_a": self.in_a,
                "in_b": self.in_b, "rows_a": self.rows_a, "rows_b": self.rows_b,
                "parts": [part.to_dict() for part in self.parts], "note": self.note}


@dataclass
class SnapshotDiff:
    a: Manifest
    b: Manifest
    operators: list[OperatorDiff] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"a": {"snapshot": self.a.name, "job": self.a.job, "batch": self.a.batch_id},
                "b": {"snapshot": self.b.name, "job": self.b.job, "batch": self.b.batch_id},
                "operators": [op.to_dict() for op in self.operators]}


def _side(store: SnapshotStore, manifest: Manifest, entry: OperatorEntry) -> StateSide:
    return StateSide(store.checkpoint_path(manifest.name), manifest.batch_id, entry.operator_id)


def _names(manifest: Manifest) -> str:
    return ", ".join(op.name for op in manifest.operators) or "none"


def check_operator(first: Manifest, second: Manifest, operator: str | None) -> None:
    """Refuse an operator neither snapshot has, naming those they have."""
    if operator is not None and first.operator(operator) is None \
            and second.operator(operator) is None:
        raise UnknownOperatorError(
            f"neither snapshot '{first.name}' nor '{second.name}' has an operator "
            f"'{operator}' (operators of '{first.name}': {_names(first)}; of "
            f"'{second.name}': {_names(second)})")


def diff_snapshots(store: SnapshotStore, spark: SparkSession, a: str, b: str,
                   operator: str | None, rows: int, echo: Echo) -> SnapshotDiff:
    """The comparison of snapshots ``a`` and ``b`` (the one ``operator``, or every one)."""
    first, second = store.get(a), store.get(b)
    check_operator(first, second, operator)
    names = [op.name for op in first.operators]
    names += [op.name for op in second.operators if op.name not in names]
    result = SnapshotDiff(first, second)
    for name in names:
        if operator is not None and name != operator:
            continue
        in_a, in_b = first.operator(name), second.operator(name)
        entry = in_a or in_b
        assert entry is not None
        found = OperatorDiff(name, entry.kind, in_a is not None, in_b is not None,
                             in_a.rows if in_a else None, in_b.rows if in_b else None)
        result.operators.append(found)
        if in_a is None or in_b is None:
            continue
        if in_a.kind != in_b.kind:
            found.note = (f"not compared: a {in_a.kind} operator in '{a}', a {in_b.kind} "
                          f"operator in '{b}'")
            continue
        if entry.kind in _NOT_COMPARED:
            found.note = _NOT_COMPARED[entry.kind]
            continue
        echo(f"comparing operator '{name}' ({entry.kind})")
        side_a, side_b = _side(store, first, in_a), _side(store, second, in_b)
        if entry.kind == "stream_stream_join":
            found.parts = [diff_join_side(spark, side_a, side_b, join_side, rows)
                           for join_side in ("left", "right")]
        else:
            found.parts = [diff_keys(spark, side_a, side_b, rows)]
    return result
