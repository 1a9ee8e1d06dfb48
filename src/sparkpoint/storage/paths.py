"""Locations sparkpoint and Spark must read at the same place.

Spark hands a path to Hadoop's ``Path``, which keeps ``#`` and ``?`` as part of the name and
never decodes a ``%`` escape; a URL parser cuts the path at ``#`` or ``?`` and store clients
decode escapes and collapse ``.``/``..`` differently from one another. A home, a snapshot
store or an output whose path holds any of them would be read by sparkpoint at another key
than the one Spark writes (an empty sink log where Spark's is full; every job of a home
``s3://b/team#1`` at ``team``). Such locations are refused, with one line and before
anything is written; every other path is read and written under exactly the key Spark uses.
A plain local path may hold ``.``/``..`` segments: it is made absolute and normalised
before any use, by sparkpoint and Spark alike.
"""

from __future__ import annotations

import re

from sparkpoint.errors import InvalidLocationError

_ESCAPE = re.compile(r"%[0-9A-Fa-f]{2}")


def _is_url(location: str) -> bool:
    return "://" in location or location.startswith("file:")


def location_problem(location: str) -> str | None:
    """What in ``location``'s path Spark and sparkpoint would read differently, or None."""
    path = location
    if _is_url(location):
        scheme_end = location.index(":") + 1
        rest = location[scheme_end:]
        if rest.startswith("//"):
            # The authority (bucket, NameNode) ends at the first '/' after it.
            slash = rest.find("/", 2)
            path = "" if slash < 0 else rest[slash:]
        else:
            path = rest
    for mark, name in (("#", "'#'"), ("?", "'?'")):
        if mark in path:
            return f"{name} in its path"
    escape = _ESCAPE.search(path)
    if escape is not None:
        return f"the escape '{escape.group(0)}' in its path"
    if _is_url(location):
        segments = path.split("/")
        for dots in (".", ".."):
            if dots in segments:
                return f"a '{dots}' segment in its path"
    return None


def check_location(location: str, what: str) -> str:
    """``location`` when Spark and sparkpoint read it alike; else InvalidLocationError."""
    problem = location_problem(location)
    if problem is not None:
        raise InvalidLocationError(
            f"{what} {location}: expected a path without '#', '?', '%' escapes or '.'/'..' "
            f"segments (Spark's Hadoop paths keep them as written, sparkpoint's store clients "
            f"would not), found {problem}; choose a {what} path without them")
    return location

