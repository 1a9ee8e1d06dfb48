"""The exclusive right to change a job: run it, drain it, apply its startpoints.

One lock file per job (``<home>/jobs/<job>/run.lock``) holds the owner's pid; a lock left by a
dead process is taken over. The lock is re-entrant within a process, so a command that holds
it across several steps (drain: complete the in-flight batch, run the drain batch, put the
watermark back) can run the job inside without letting another process in between.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from pathlib import Path

from sparkpoint.errors import JobRunningError
from sparkpoint.storage.home import Home
from sparkpoint.storage.processes import pid_alive

LOCK_FILE = "run.lock"

def _quiet(_message: str) -> None:
    pass


# Lock files this process holds, with how many times each is held.
_held: dict[Path, int] = {}


def lock_path(home: Home, job: str) -> Path:
    return home.job_dir(job) / LOCK_FILE


def lock_holder(home: Home, job: str) -> int | None:
    """The live process holding the job's lock, if any."""
    path = lock_path(home, job)
    try:
        text = path.read_text().strip()
    except FileNotFoundError:
        return None
    holder = int(text) if text.isdigit() else None
    return holder if holder is not None and pid_alive(holder) else None


def _acquire(path: Path, job: str, echo: Callable[[str], None]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    for _attempt in range(2):
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            text = path.read_text().strip()
            holder = int(text) if text.isdigit() else None
            if holder is not None and pid_alive(holder) and holder != os.getpid():
                raise JobRunningError(
                    f"job '{job}' is already running (pid {holder}); stop it first, or snapshot "
                    "it with 'sparkpoint snapshot create'"
                ) from None
            owner = f"pid {holder}, which is no longer running" if holder is not None \
                else "no process (the file is empty)"
            echo(f"job '{job}': took over the lock left by an interrupted run ({owner})")
            path.unlink(missing_ok=True)
            continue
        with os.fdopen(fd, "w") as handle:
            handle.write(str(os.getpid()))
        return
    raise JobRunningError(f"job '{job}': another process took its lock at {path} meanwhile")


@contextlib.contextmanager
def job_lock(home: Home, job: str, echo: Callable[[str], None] = _quiet) -> Iterator[None]:
    """Hold the job's lock for the block (re-entrant in this process)."""
    path = lock_path(home, job)
    if _held.get(path):
        _held[path] += 1
        try:
            yield
        finally:
            _held[path] -= 1
        return
    _acquire(path, job, echo)
    _held[path] = 1
    try:
        yield
    finally:
        del _held[path]
        path.unlink(missing_ok=True)
        # A first run refused before anything was recorded leaves no trace.
        with contextlib.suppress(OSError):
            path.parent.rmdir()
