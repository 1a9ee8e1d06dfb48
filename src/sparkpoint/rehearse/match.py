"""Pairing the rows of two outputs one to one, as multisets, with floating-point values
compared within a relative tolerance.

Why a tolerance: Spark adds doubles in the order its partitions arrive, and that order
depends on how the input is split and shuffled; the same job over the same input can write
sums that differ in their last bits. Why one to one: a row of one side may stand for at most
one row of the other, so counts of duplicates still matter.

A row is split into an exact part and a float part. The exact part is the row with every
finite float (at any depth: structs, arrays, map values) replaced by a marker, NaN by another
marker (NaN equals NaN here, unlike in IEEE 754, because a job that writes NaN twice wrote
the same thing twice), -0.0 by 0.0 (Spark itself normalizes it in grouping and joins); the
float part is the list of those finite floats in a fixed order. Rows pair only within one
exact part, so a null, a NaN, an infinity or any non-float value never pairs with a
different one, and floats are only ever compared with floats at the same place.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from sparkpoint.errors import UsageError

DEFAULT_FLOAT_TOLERANCE = 1e-9

Row = tuple[Any, ...]
Floats = tuple[float, ...]


class _Marker:
    """A stand-in that equals only itself (hashable, unlike a list; equal, unlike NaN)."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


FLOAT = _Marker("<float>")
NAN = _Marker("NaN")


def _refused(name: str, found: str) -> UsageError:
    return UsageError(f"{name}: expected a relative tolerance, a number >= 0 and < 1 (e.g. "
                      f"1e-9; 0 compares floats exactly), found {found}")


def check_float_tolerance(value: float, name: str = "--float-tolerance") -> float:
    """``value`` when it is a usable relative tolerance, else a usage error naming ``name``.

    1 and above are refused: every two values of one sign would then be equal."""
    if isinstance(value, bool) or not isinstance(value, int | float) \
            or not 0 <= value < 1:  # NaN fails this too
        raise _refused(name, repr(value))
    return float(value)


def parse_float_tolerance(text: str, name: str = "--float-tolerance") -> float:
    try:
        value = float(text)
    except ValueError:
        raise _refused(name, repr(text)) from None
    if not 0 <= value < 1:
        raise _refused(name, text)
    return value


def exact(value: Any) -> Any:
    """``value`` hashable and compared exactly, NaN equal to NaN and -0.0 to 0.0."""
    return _canonical(value, None)


def split(row: Row) -> tuple[Any, Floats]:
    """A row's exact part and its finite floats, in the order the exact part marks them."""
    floats: list[float] = []
    return _canonical(row, floats), tuple(floats)


def _canonical(value: Any, floats: list[float] | None) -> Any:
    if isinstance(value, float):
        if math.isnan(value):
            return NAN
        value += 0.0  # -0.0 becomes 0.0
        if floats is None or math.isinf(value):
            return value
        floats.append(value)
        return FLOAT
    if isinstance(value, dict):
        # Map keys compare exactly (a key is an identity, not a measurement); entries in
        # one fixed order so that equal maps put their values' floats in the same order.
        entries = sorted(((exact(k), v) for k, v in value.items()), key=lambda kv: repr(kv[0]))
        return tuple((k, _canonical(v, floats)) for k, v in entries)
    if isinstance(value, list | tuple):
        # Rows keep their field names, so a struct {a, b} never equals a plain pair.
        fields = getattr(value, "__fields__", None)
        items = tuple(_canonical(v, floats) for v in value)
        return (tuple(fields), items) if fields else items
    if isinstance(value, bytearray):
        return bytes(value)
    return value


def _close(a: float, b: float, tolerance: float) -> bool:
    return math.isclose(a, b, rel_tol=tolerance, abs_tol=0.0)


def pair_rows(old: Sequence[Row], new: Sequence[Row], tolerance: float
              ) -> tuple[list[bool], list[bool]]:
    """Which rows of ``old`` and of ``new`` found a partner on the other side."""
    groups: dict[Any, tuple[list[tuple[Floats, int]], list[tuple[Floats, int]]]] = {}
    for side, rows in enumerate((old, new)):
        for index, row in enumerate(rows):
            key, floats = split(row)
            groups.setdefault(key, ([], []))[side].append((floats, index))
    old_paired, new_paired = [False] * len(old), [False] * len(new)
    for olds, news in groups.values():
        for i, j in _pair_group(olds, news, tolerance):
            old_paired[i] = new_paired[j] = True
    return old_paired, new_paired


def _pair_group(olds: list[tuple[Floats, int]], news: list[tuple[Floats, int]],
                tolerance: float) -> list[tuple[int, int]]:
    """Pairs of (old index, new index) among rows of one exact part.

    First the rows whose floats are bit-identical pair by counting: most rows, since the
    same computation mostly gives the same bits. The rest pair greedily: both sides sorted,
    each old row (ascending) takes the first unpaired new row, ascending, whose floats are all
    within the tolerance of its own; new rows too small for this old row are passed for good.

    Why that is correct enough: closeness to a value is an interval around it (for a > 0:
    [a(1-rel), a/(1-rel)]), so with one float per row this is the classic greedy matching of
    points to intervals, which pairs as many rows as any matching can. With several floats the
    window is chosen by the first float only and the rest checked, so the greedy could leave
    a pair unmade only when one old row is within the tolerance of two new rows in its first
    float but of the wrong one in another, which needs distinct rows of one exact part to
    differ by about the tolerance itself: a borderline difference, reported as one (the
    same holds for pairing bit-identical rows first). Noise of
    a reordered sum is a few units in the last place (1e-16 relative), far below the default
    1e-9, and real differences are far above it.

    Cost: sorting, O(n log n), and per old row a scan of the unpaired new rows whose first
    float is within the tolerance of its own; only rows that share an exact part and a first
    float up to the tolerance but not their other floats make that scan long.
    """
    if not olds or not news:
        return []
    by_floats: dict[Floats, list[int]] = defaultdict(list)
    for floats, j in news:
        by_floats[floats].append(j)
    pairs, left_old = [], []
    for floats, i in olds:
        same = by_floats.get(floats)
        if same:
            pairs.append((i, same.pop()))
        else:
            left_old.append((floats, i))
    left_new = sorted((f, j) for f, js in by_floats.items() for j in js)
    if tolerance == 0 or not left_old or not left_new:
        return pairs  # exactly equal floats paired above; nothing else can pair
    left_old.sort()
    firsts = [floats[0] for floats, _ in left_new]
    # following[k]: the first unpaired new row at or after k (paired rows are skipped over,
    # with the path shortened as it is followed).
    following = list(range(len(left_new) + 1))

    def unpaired_from(k: int) -> int:
        root = k
        while following[root] != root:
            root = following[root]
        while following[k] != root:
            following[k], k = root, following[k]
        return root

    start = 0
    for floats, i in left_old:
        first = floats[0]
        while start < len(firsts) and firsts[start] < first \
                and not _close(firsts[start], first, tolerance):
            start += 1
        k = unpaired_from(start)
        while k < len(firsts) and _close(firsts[k], first, tolerance):
            theirs, j = left_new[k]
            if all(_close(a, b, tolerance) for a, b in zip(floats, theirs, strict=True)):
                pairs.append((i, j))
                following[k] = k + 1
                break
            k = unpaired_from(k + 1)
    return pairs
