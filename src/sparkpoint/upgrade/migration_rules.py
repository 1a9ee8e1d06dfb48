"""Which changes of a stateful operator's state schema are migrated with no user input, and
how `plan` names them.

A store's key and value are compared column by column, by position and name. A column whose
type is widened (byte, short, int to a longer integer; float to double; a decimal with room
for at least as many digits on each side of the point) is migrated by Spark's own cast; any
other difference is left to the checks that call it incompatible. Stateful operators with
more than one store (stream-stream joins) are not migrated here.

An aggregation whose functions are recorded (sparkpoint.aggregates) for both the snapshot
and the new job is migrated when it adds, removes or reorders aggregate functions: each new
buffer column comes from the old value's column of the same function (widened where its
type is) or starts at the function's own initial value, Spark's SQL of it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from sparkpoint.aggregates import AggregateState

_INTEGERS = ("byte", "short", "integer", "long")
_DECIMAL = re.compile(r"^decimal\((\d+),\s*(\d+)\)$")


def stripped(spark_type: Any) -> Any:
    """A Spark JSON type with nullability and metadata removed: what must stay equal."""
    if isinstance(spark_type, dict):
        kind = spark_type.get("type")
        if kind == "struct":
            return ("struct", tuple((f["name"], stripped(f["type"]))
                                    for f in spark_type["fields"]))
        if kind == "array":
            return ("array", stripped(spark_type["elementType"]))
        if kind == "map":
            return ("map", stripped(spark_type["keyType"]), stripped(spark_type["valueType"]))
        return kind
    return spark_type


def widens(old: Any, new: Any) -> bool:
    """Whether every value of type ``old`` is a value of type ``new``, unchanged by Spark's
    cast (a widening)."""
    if not isinstance(old, str) or not isinstance(new, str):
        return False
    if old in _INTEGERS and new in _INTEGERS:
        return _INTEGERS.index(new) > _INTEGERS.index(old)
    if (old, new) == ("float", "double"):
        return True
    was, now = _DECIMAL.match(old), _DECIMAL.match(new)
    if was and now:
        (precision, scale), (new_precision, new_scale) = (
            (int(m.group(1)), int(m.group(2))) for m in (was, now))
        return new_scale >= scale and new_precision - new_scale >= precision - scale \
            and (new_precision, new_scale) != (precision, scale)
    return False


def widened_columns(old: dict[str, Any], new: dict[str, Any]) -> list[tuple[str, Any, Any]] | None:
    """The columns of struct schema ``old`` widened in ``new`` as (name, old type, new type);
    None when the two differ otherwise (names, order, count, or another change of type)."""
    old_fields, new_fields = old.get("fields", []), new.get("fields", [])
    if [f["name"] for f in old_fields] != [f["name"] for f in new_fields]:
        return None
    found = []
    for was, now in zip(old_fields, new_fields, strict=True):
        if stripped(was["type"]) == stripped(now["type"]):
            continue
        if not widens(was["type"], now["type"]):
            return None
        found.append((was["name"], was["type"], now["type"]))
    return found


def store_widenings(old_key: dict[str, Any] | None, old_value: dict[str, Any] | None,
                    new_key: dict[str, Any] | None, new_value: dict[str, Any] | None,
                    ) -> list[str] | None:
    """What `plan` says is migrated in one store whose key or value columns are widened
    (empty: nothing differs); None when the store differs in a way this does not migrate."""
    changes: list[str] = []
    for part, old, new in (("key", old_key, new_key), ("value", old_value, new_value)):
        if old is None or new is None or stripped(old) == stripped(new):
            continue
        widened = widened_columns(old, new)
        if widened is None:
            return None
        changes.extend(f"{part} column {name}: {was} -> {now} (widened by Spark's cast"
                       + ("; keys placed in the partitions Spark's hash gives them)"
                          if part == "key" else ")")
                       for name, was, now in widened)
    return changes


@dataclass(frozen=True)
class AggregateMove:
    """How an aggregation's new state value is made from its old one: per new buffer
    column, the old value's column it takes (by position) or the SQL of its initial value."""

    old_column: tuple[int | None, ...]
    initial: tuple[str | None, ...]
    changes: tuple[str, ...]


def _buffer_types(aggregates: tuple[AggregateState, ...]) -> list[Any]:
    return [stripped(column.type) for state in aggregates for column in state.buffer]


def aggregate_move(old: tuple[AggregateState, ...] | None,
                   new: tuple[AggregateState, ...] | None,
                   old_value: dict[str, Any] | None, new_value: dict[str, Any] | None,
                   keys: int | None) -> AggregateMove | str | None:
    """The move of an aggregation's state value to the new job's aggregates (added ones
    start from their initial buffer values, removed ones are dropped, kept ones move to
    their new position and may be widened); a reason when the functions differ in a way
    that cannot be migrated; None when the functions are not both known or are the same.
    ``keys``: the state's keys, for `plan` to say how many an added aggregate starts in."""
    if old is None or new is None or old_value is None or new_value is None:
        return None
    if [a.function for a in old] == [a.function for a in new]:
        return None
    old_fields, new_fields = old_value.get("fields", []), new_value.get("fields", [])
    # The value ends with the buffers; before them, the whole row's other columns where the
    # state keeps the row (session windows: the keys and the session), kept by position.
    lead = len(old_fields) - len(_buffer_types(old))
    if lead < 0 or len(new_fields) - len(_buffer_types(new)) != lead or \
            _buffer_types(old) != [stripped(f["type"]) for f in old_fields[lead:]] or \
            _buffer_types(new) != [stripped(f["type"]) for f in new_fields[lead:]]:
        return "the state value does not end with the aggregates' buffers one after the other"
    columns: list[int | None] = []
    initial: list[str | None] = []
    # Kept columns whose type widens, said as for a store whose aggregates did not change.
    widened: list[str] = []
    for index, (before, now) in enumerate(zip(old_fields[:lead], new_fields[:lead],
                                              strict=True)):
        if stripped(before["type"]) != stripped(now["type"]) and \
                not widens(before["type"], now["type"]):
            return (f"the state value's column {now['name']} changed type from "
                    f"{before['type']} to {now['type']}")
        columns.append(index)
        initial.append(None)
        if stripped(before["type"]) != stripped(now["type"]):
            widened.append(f"value column {now['name']}: {before['type']} -> {now['type']} "
                           "(widened by Spark's cast)")
    starts = {}
    position = lead
    for state in old:
        starts[state.function] = position
        position += len(state.buffer)
    by_function = {state.function: state for state in old}
    changes = []
    count = "?" if keys is None else str(keys)
    for state in new:
        was = by_function.get(state.function)
        if was is not None:
            for index, (before, now) in enumerate(zip(was.buffer, state.buffer, strict=True)):
                if stripped(before.type) != stripped(now.type) and \
                        not widens(before.type, now.type):
                    return (f"aggregate {state.function}: its buffer column {now.name} changed "
                            f"type from {before.type} to {now.type}")
                columns.append(starts[state.function] + index)
                initial.append(None)
                if stripped(before.type) != stripped(now.type):
                    widened.append(f"value column {now.name}: {before.type} -> {now.type} "
                                   "(widened by Spark's cast)")
            continue
        if state.initial is None:
            return (f"aggregate {state.function} added: its buffer is an object Spark "
                    "serializes, with no initial value to start it from")
        columns.extend([None] * len(state.buffer))
        initial.extend(state.initial)
        changes.append(f"aggregate {state.function} added: starts as if it had seen no row "
                       f"before the switch ({', '.join(state.initial)}) in each of the "
                       f"{count} keys")
    kept = [state.function for state in new if state.function in by_function]
    changes.extend(f"aggregate {state.function} removed: its state is dropped"
                   for state in old if state.function not in kept)
    if kept != [state.function for state in old if state.function in kept]:
        changes.append(f"aggregates reordered: {', '.join(kept)}")
    return AggregateMove(tuple(columns), tuple(initial), tuple(widened + changes))


_DEDUPES = ("dedupe", "dedupeWithinWatermark")


def dedupe_projection(operator_name: str, old_key: dict[str, Any] | None,
                      new_key: dict[str, Any] | None) -> list[str] | None:
    """What `plan` says of a dedupe whose new key is the old key with columns removed (the
    rest in the same order, maybe widened): each old key is projected onto the new columns
    and keys that become equal are collapsed into one (an event id seen under any removed
    column's value counts as seen). None: not such a change."""
    if operator_name not in _DEDUPES or old_key is None or new_key is None:
        return None
    old_fields = old_key.get("fields", [])
    new_names = [f["name"] for f in new_key.get("fields", [])]
    kept = [f for f in old_fields if f["name"] in new_names]
    if [f["name"] for f in kept] != new_names or len(kept) == len(old_fields):
        return None
    widened = widened_columns({"fields": kept}, new_key)
    if widened is None:
        return None
    removed = [f["name"] for f in old_fields if f["name"] not in new_names]
    return [f"key columns {', '.join(removed)} removed: keys projected onto "
            f"({', '.join(new_names)}), keys that become equal collapsed into one "
            "(the latest expiry kept)"] + [
        f"key column {name}: {was} -> {now} (widened by Spark's cast; keys placed in the "
        "partitions Spark's hash gives them)" for name, was, now in widened]


# The state reader's own columns: a state column of one of these names is read as NAME_2.
STATE_COLUMNS = ("key", "value")


def column_labels(schema: dict[str, Any] | None, taken: tuple[str, ...] = ()) -> list[str]:
    """The names by which `plan` lists a state's columns and ``set:`` reads and writes them:
    each column's own name, a repeated one (two aggregates' ``count``) suffixed ``_2``,
    ``_3`` ... in order; ``taken``: names already used (the key's, for the value)."""
    labels: list[str] = []
    used = set(taken)
    for field in (schema or {}).get("fields", []):
        label, n = field["name"], 1
        while label in used:
            n += 1
            label = f"{field['name']}_{n}"
        used.add(label)
        labels.append(label)
    return labels


@dataclass(frozen=True)
class DeclaredValue:
    """A new state value whose columns are each Spark SQL over the old state's columns by
    label (:func:`column_labels`), with what `plan` says and what it finds wrong."""

    columns: tuple[str, ...]
    changes: tuple[str, ...]
    problems: tuple[str, ...]


def declared_value(old_key: dict[str, Any] | None, old_value: dict[str, Any] | None,
                   new_value: dict[str, Any] | None, declared: dict[str, str],
                   move: AggregateMove | None, where: str) -> DeclaredValue:
    """The new value of a resumed store with ``set:`` columns (``where``: the entry's path,
    ``state.NAME.set``): a declared column is its SQL; another one is the old column the
    aggregates' move gives it, its function's initial value, or the old column of its label;
    one that none of these defines is a problem naming what to add."""
    key_labels = column_labels(old_key, STATE_COLUMNS)
    old_labels = column_labels(old_value, (*STATE_COLUMNS, *key_labels))
    old_types = dict(zip(old_labels, [f["type"] for f in (old_value or {}).get("fields", [])],
                         strict=True))
    new_fields = (new_value or {}).get("fields", [])
    new_labels = column_labels(new_value)
    readable = ", ".join(key_labels + old_labels) or "none"
    problems = [f"{where}.{name}: the new state has no column {name!r} (its columns: "
                f"{', '.join(new_labels) or 'none'})" for name in declared
                if name not in new_labels]
    columns: list[str] = []
    changes: list[str] = []
    for index, (label, field) in enumerate(zip(new_labels, new_fields, strict=True)):
        if label in declared:
            columns.append(f"({declared[label]})")
            changes.append(f"value column {label} set to {declared[label]}")
        elif move is not None and move.old_column[index] is not None:
            columns.append(f"`{old_labels[move.old_column[index] or 0]}`")
        elif move is not None and move.initial[index] is not None:
            columns.append(str(move.initial[index]))
        elif label in old_types and (stripped(old_types[label]) == stripped(field["type"])
                                     or widens(old_types[label], field["type"])):
            columns.append(f"`{label}`")
        else:
            columns.append("NULL")
            problems.append(
                f"{where}: the new state's column {label} ({stripped(field['type'])}) is not "
                f"defined: add {label}: <SQL over the old state's columns: {readable}>")
    if move is not None:
        changes[:0] = move.changes
    return DeclaredValue(tuple(columns), tuple(changes), tuple(problems))


@dataclass(frozen=True)
class GroupMerge:
    """An aggregation whose grouping lost columns: per buffer column of the state value,
    Spark's merge of two groups' buffers as SQL over ``acc.cI`` and ``x.cI`` (the value's
    columns by position), folding the groups that become one."""

    merges: tuple[str, ...]
    changes: tuple[str, ...]


_LEFT = re.compile(r"\b__left_(\d+)\b")
_RIGHT = re.compile(r"\b__right_(\d+)\b")


def group_merge(operator_name: str, old_key: dict[str, Any] | None,
                new_key: dict[str, Any] | None, old: tuple[AggregateState, ...] | None,
                new: tuple[AggregateState, ...] | None) -> GroupMerge | str | None:
    """The merge of an aggregation whose new key is the old key with columns removed (the
    rest in order, maybe widened) and whose functions are the same; a reason when it cannot
    be merged; None when the key did not lose columns."""
    if operator_name != "stateStoreSave" or old_key is None or new_key is None:
        return None
    old_fields = old_key.get("fields", [])
    new_names = [f["name"] for f in new_key.get("fields", [])]
    kept = [f for f in old_fields if f["name"] in new_names]
    if [f["name"] for f in kept] != new_names or len(kept) == len(old_fields) \
            or widened_columns({"fields": kept}, new_key) is None:
        return None
    removed = ", ".join(f["name"] for f in old_fields if f["name"] not in new_names)
    if old is None or new is None:
        return (f"grouping columns {removed} removed: the snapshot does not record the "
                "aggregates its state holds (taken by an older sparkpoint); snapshot the old "
                "job again")
    if [a.function for a in old] != [a.function for a in new]:
        return (f"grouping columns {removed} removed and the aggregates changed in the same "
                "start; change one, then the other")
    merges: list[str] = []
    position = 0
    for state in new:
        if state.merge is None:
            return (f"grouping columns {removed} removed: aggregate {state.function} has no "
                    "merge of two groups' buffers (Spark serializes its buffer as an object)")
        merges.extend(_placed(sql, position) for sql in state.merge)
        position += len(state.buffer)
    functions = ", ".join(a.function for a in new)
    return GroupMerge(tuple(merges), (
        f"grouping columns {removed} removed: the groups that become one are merged by each "
        f"aggregate's own merge, Spark's ({functions})",))


def _placed(sql: str, offset: int) -> str:
    """A merge expression over the state value's columns: buffer column ``i`` of the left
    buffer as ``acc.c<offset + i>``, of the right as ``x.c<offset + i>``."""
    def left(match: re.Match[str]) -> str:
        return f"acc.c{offset + int(match.group(1))}"

    def right(match: re.Match[str]) -> str:
        return f"x.c{offset + int(match.group(1))}"

    return _RIGHT.sub(right, _LEFT.sub(left, sql))


_JOIN_VALUES = "keyWithIndexToValue"


def join_value_changes(operator_name: str, old_stores: dict[str, tuple[Any, Any]],
                       new_stores: dict[str, tuple[Any, Any]]) -> list[str] | None:
    """What `plan` says of a stream-stream join whose buffered rows gained or lost columns
    (``*-keyWithIndexToValue`` stores: the same key, value columns by name, new ones filled
    with null, kept ones maybe widened); None when the join's state differs otherwise or not
    at all. Stores are given as name -> (key schema, value schema)."""
    if operator_name != "symmetricHashJoin" or set(old_stores) != set(new_stores):
        return None
    changes: list[str] = []
    for name in sorted(old_stores):
        (old_key, old_value), (new_key, new_value) = old_stores[name], new_stores[name]
        if None in (old_key, old_value, new_key, new_value):
            return None
        if stripped(old_key) != stripped(new_key):
            return None
        if stripped(old_value) == stripped(new_value):
            continue
        if not name.endswith(_JOIN_VALUES):
            return None
        old_types = {f["name"]: f["type"] for f in old_value.get("fields", [])}
        new_names = [f["name"] for f in new_value.get("fields", [])]
        for field in new_value.get("fields", []):
            was = old_types.get(field["name"])
            if was is None:
                changes.append(f"{name}: value column {field['name']} added (the rows "
                               "buffered before the switch get null)")
            elif stripped(was) != stripped(field["type"]):
                if not widens(was, field["type"]):
                    return None
                changes.append(f"{name}: value column {field['name']}: {was} -> "
                               f"{field['type']} (widened by Spark's cast)")
        changes.extend(f"{name}: value column {column} removed"
                       for column in old_types if column not in new_names)
    return changes or None
