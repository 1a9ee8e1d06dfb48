"""Small bridges from py4j's view of Scala objects to Python."""

from __future__ import annotations

from typing import Any


def scala_list(value: Any) -> list[Any]:
    """The elements of any Scala collection (Seq, Map entries...) as a Python list."""
    iterator = value.iterator()
    items = []
    while iterator.hasNext():
        items.append(iterator.next())
    return items
