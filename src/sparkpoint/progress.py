"""Progress bars for the work that can last more than a couple of seconds (copying state,
reading it, rewriting it, replaying batches): on stderr, only when stderr is a terminal, and
never in a process asked for one JSON document. A bar appears only once its work has lasted
a second, so quick commands print nothing more than before.

Library code marks its long loops with :func:`track` and its long single calls (a Spark job,
a batch) with :func:`phase`; whether anything is drawn is decided here, once per process."""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import TypeVar

from tqdm import tqdm

from sparkpoint import settings

T = TypeVar("T")

# A bar is drawn once its work has lasted this long (seconds; the environment variable sets
# another): commands that end sooner stay as quiet as they were.
SHOW_AFTER_ENV = settings.PROGRESS_AFTER.name
DEFAULT_SHOW_AFTER_SECONDS = settings.DEFAULT_PROGRESS_AFTER_SECONDS
# How often a phase (one long call with no steps to count) redraws its elapsed time.
PHASE_REFRESH_SECONDS = 0.5

_enabled = True


def quiet() -> None:
    """No progress bars in this process (``--json`` output must stay one document)."""
    global _enabled
    _enabled = False


def show_after() -> float:
    """Seconds a piece of work lasts before its bar is drawn."""
    return settings.PROGRESS_AFTER.get()


def shown() -> bool:
    """Whether bars are drawn: on a terminal, unless made quiet."""
    return _enabled and sys.stderr.isatty()


def track(items: Iterable[T], description: str, total: int | None = None,
          unit: str = "item") -> Iterator[T]:
    """``items``, counted on a bar named ``description`` while they are consumed."""
    if not shown():
        yield from items
        return
    if total is None and hasattr(items, "__len__"):
        total = len(items)  # type: ignore[arg-type]
    with tqdm(items, desc=description, total=total, unit=unit, leave=False, file=sys.stderr,
              delay=show_after(), dynamic_ncols=True) as bar:
        yield from bar


@contextmanager
def phase(description: str) -> Iterator[None]:
    """A bar with the elapsed time of one long step that has nothing to count."""
    if not shown():
        yield
        return
    done = threading.Event()
    with tqdm(desc=description, total=None, leave=False, file=sys.stderr,
              delay=show_after(), bar_format="{desc}: {elapsed}") as bar:

        def redraw() -> None:
            while not done.wait(PHASE_REFRESH_SECONDS):
                bar.refresh()

        ticker = threading.Thread(target=redraw, name="sparkpoint-progress", daemon=True)
        ticker.start()
        try:
            yield
        finally:
            done.set()
            ticker.join()


def write(message: str) -> None:
    """One line on stderr that leaves a bar being drawn intact (drawn again below it)."""
    if shown():
        tqdm.write(message, file=sys.stderr)
    else:
        print(message, file=sys.stderr, flush=True)
