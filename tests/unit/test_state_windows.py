"""What the window bounds of stored keys tell (checkpoint/state_windows.py): length always,
slide once two windows overlap, a grid otherwise, an upper bound of a session gap."""

from __future__ import annotations

import itertools
import math

from sparkpoint.checkpoint.state_windows import (
    StoredWindows,
    session_gap_mismatch,
    time_window_mismatch,
)
from sparkpoint.windows import WindowSpec

MINUTE = 60_000_000


def stored(bounds: list[tuple[int, int]]) -> StoredWindows:
    """Summarise windows given as (start, end) minutes, independently of the module."""
    starts = sorted({s * MINUTE for s, _ in bounds})
    step = 0
    for low, high in itertools.pairwise(starts):
        step = math.gcd(step, high - low)
    return StoredWindows(len(bounds), frozenset((e - s) * MINUTE for s, e in bounds),
                         step or None, starts[0] if starts else None)


def time_window(duration: float, slide: float | None = None, start: float = 0) -> WindowSpec:
    return WindowSpec(kind="time", duration_us=int(duration * MINUTE),
                      slide_us=int((slide or duration) * MINUTE), start_us=int(start * MINUTE))


SLIDING = stored([(0, 10), (5, 15), (10, 20), (5, 15)])  # one event's windows, and more
TUMBLING = stored([(0, 10), (20, 30)])


def test_overlapping_windows_give_the_slide_and_refute_any_other() -> None:
    assert SLIDING.describe() == "windows of 10 minutes sliding every 5 minutes"
    assert time_window_mismatch(SLIDING, time_window(10, 5)) is None
    assert time_window_mismatch(SLIDING, time_window(10)) == "windows sliding every 5 minutes"
    # Starts 2.5 minutes apart would have been stored next to these.
    assert time_window_mismatch(SLIDING, time_window(10, 2.5)) is not None


def test_without_overlap_the_state_shows_a_grid_only() -> None:
    assert "tumbling, as far as the state shows" in TUMBLING.describe()
    assert time_window_mismatch(TUMBLING, time_window(10)) is None
    # A sliding window whose earlier windows were emitted leaves the same keys.
    assert time_window_mismatch(TUMBLING, time_window(10, 5)) is None
    assert time_window_mismatch(TUMBLING, time_window(10, start=3)) == \
        "window starts off the job's grid"


def test_the_length_is_exact() -> None:
    assert time_window_mismatch(TUMBLING, time_window(15)) == "windows of 10 minutes"
    mixed = stored([(0, 10), (0, 15)])
    assert mixed.describe() == "windows of several lengths (10 minutes, 15 minutes)"
    assert time_window_mismatch(mixed, time_window(10)) is not None


def test_an_empty_state_refutes_nothing() -> None:
    empty = stored([])
    assert time_window_mismatch(empty, time_window(10)) is None


def test_a_session_is_at_least_its_gap() -> None:
    sessions = stored([(0, 7), (30, 42)])
    assert session_gap_mismatch(sessions, WindowSpec(kind="session", gap_us=5 * MINUTE)) is None
    found = session_gap_mismatch(sessions, WindowSpec(kind="session", gap_us=10 * MINUTE))
    assert found is not None and "a session of 7 minutes" in found
