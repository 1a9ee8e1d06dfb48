"""Fences on writes: a thread that holds a job's lease writes under the job's locations only
while it still holds the lease.

The job's lock (runtime/lock.py) registers, for the thread that holds it, the locations the
job owns (its directory in the home, later its output) with the lease's fence; every FileIO
call that changes a store (``storage/fileio.py``) asks ``check_write`` first, so a holder
that lost its lease (or passed its own deadline) writes nothing more, whichever code path
writes: records, intents, checkpoint files, cleanups, sink logs. Other threads, and writes
elsewhere, are not affected. The lease's own files are written by conditional creates, which
the store itself fences, outside any registration (storage/lease.py).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

Check = Callable[[], None]


@dataclass(frozen=True)
class _Guard:
    prefix: str  # a location with a trailing '/'
    check: Check


_local = threading.local()


def _guards() -> list[_Guard]:
    guards: list[_Guard] | None = getattr(_local, "guards", None)
    if guards is None:
        guards = _local.guards = []
    return guards


def _prefix(location: str) -> str:
    return location.rstrip("/") + "/"


@contextlib.contextmanager
def guarding(locations: Iterable[str], check: Check) -> Iterator[None]:
    """While the block runs, writes of this thread at or under ``locations`` call ``check``
    first (it raises to refuse them)."""
    added = [_Guard(_prefix(location), check) for location in locations]
    guards = _guards()
    guards.extend(added)
    try:
        yield
    finally:
        for guard in added:
            guards.remove(guard)


def add_guarded(locations: Iterable[str], check: Check) -> Callable[[], None]:
    """``guarding`` for a span that is not a block: returns the function that ends it."""
    added = [_Guard(_prefix(location), check) for location in locations]
    guards = _guards()
    guards.extend(added)

    def remove() -> None:
        for guard in added:
            if guard in guards:
                guards.remove(guard)

    return remove


def fence_for(locations: Iterable[str]) -> Check:
    """The checks that guard any of ``locations`` for this thread, as one function (for
    work this thread hands to others: parallel uploads call it per file)."""
    wanted = [_prefix(location) for location in locations]
    checks = {id(guard.check): guard.check for guard in _guards()
              if any(prefix.startswith(guard.prefix) for prefix in wanted)}

    def check_all() -> None:
        for check in checks.values():
            check()

    return check_all


def check_write(*locations: str) -> None:
    """Refuse (by the guard's own error) a write at ``locations`` that a lost lease fences."""
    fence_for(locations)()
