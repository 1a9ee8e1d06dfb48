"""Which changes of a stateful operator's state schema are migrated with no user input, and
how `plan` names them.

A store's key and value are compared column by column, by position and name. A column whose
type is widened (byte, short, int to a longer integer; float to double; a decimal with room
for at least as many digits on each side of the point) is migrated by Spark's own cast; any
other difference is left to the checks that call it incompatible. Stateful operators with
more than one store (stream-stream joins) are not migrated here.
"""

from __future__ import annotations

import re
from typing import Any

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
