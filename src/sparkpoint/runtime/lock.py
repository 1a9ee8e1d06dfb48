"""The exclusive right to change a job: run it, drain it, apply its startpoints.

One lock file per job (``<home>/jobs/<job>/run.lock``) holds the owner's pid; a lock left by a
dead process is taken over. The lock is re-entrant within a thread, so a command that holds
it across several steps (drain: complete the in-flight batch, run the drain batch, put the
watermark back) can run the job inside without letting another process in between. Another
thread of the same process (a notebook draining a job it started with ``sparkpoint.start``)
waits until the holding thread lets go.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from sparkpoint.errors import JobRunningError
from sparkpoint.storage import remote_home
from sparkpoint.storage.fileio import file_io, join
from sparkpoint.storage.home import Home
from sparkpoint.storage.processes import OTHER_HOST_EXPIRY, holder_record, live_holder, pid_alive

LOCK_FILE = "run.lock"

def _quiet(_message: str) -> None:
    pass


# Lock files this process holds: the holding thread and how many times it holds each.
_held: dict[Path, tuple[int, int]] = {}
_released = threading.Condition()
# How long a thread waits for another thread of this process to let go of a job's lock.
THREAD_WAIT_S = 120.0


def lock_path(home: Home, job: str) -> Path:
    return home.job_dir(job) / LOCK_FILE


# A home on S3 or HDFS is shared by machines: its lock file names host and pid, and one
# taken on another machine counts as held until it is this old (the rule the snapshot
# store's leases follow; on this machine a dead pid frees it at once).
REMOTE_LOCK_EXPIRY = OTHER_HOST_EXPIRY


def _remote_lock_url(home: Home, job: str) -> str:
    return join(home.job_url(job), LOCK_FILE)


def _remote_lock_record() -> bytes:
    return json.dumps(holder_record()).encode("utf-8")


def _remote_holder(record: dict[str, Any]) -> int | None:
    """The pid of a live holder of a remote lock (-1 when alive on another host)."""
    return live_holder(record, REMOTE_LOCK_EXPIRY)


def _read_remote_lock(home: Home, job: str) -> tuple[dict[str, Any] | None, bool]:
    """The remote lock's record and whether one exists (a record that cannot be read is
    an interrupted write: no holder)."""
    try:
        data = file_io(home.location).read_bytes(_remote_lock_url(home, job))
    except FileNotFoundError:
        return None, False
    try:
        record = json.loads(data)
    except ValueError:
        return None, True
    return (record if isinstance(record, dict) else None), True


def _acquire_remote(home: Home, job: str, echo: Callable[[str], None]) -> None:
    """Take the lock file in the home by an atomic create-if-absent."""
    io = file_io(home.location)
    url = _remote_lock_url(home, job)
    for _attempt in range(2):
        if io.create_exclusive(url, _remote_lock_record()):
            return
        record, _found = _read_remote_lock(home, job)
        holder = _remote_holder(record) if record is not None else None
        if holder is not None and holder != os.getpid():
            where = f"pid {holder} on {record.get('host')}" if record else "another process"
            raise JobRunningError(
                f"job '{job}' is already running ({where}, lock {url}); stop it first, or "
                "snapshot it with 'sparkpoint snapshot create'")
        echo(f"job '{job}': took over the lock left by an interrupted run at {url}")
        io.delete(url)
    raise JobRunningError(f"job '{job}': another process took its lock at {url} meanwhile")


def lock_holder(home: Home, job: str) -> int | None:
    """The live process holding the job's lock, if any."""
    if home.remote:
        record, _found = _read_remote_lock(home, job)
        return _remote_holder(record) if record is not None else None
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


def _enter(home: Home, path: Path, job: str, echo: Callable[[str], None],
           wait: bool = True) -> bool:
    """Take the lock for this thread, or count one more hold; True when already held."""
    me = threading.get_ident()
    with _released:
        if not _released.wait_for(lambda: path not in _held or _held[path][0] == me,
                                  timeout=THREAD_WAIT_S if wait else 0):
            if not wait:
                raise JobRunningError(
                    f"job '{job}' is already running in this process (another thread runs "
                    "or drains it: sparkpoint.start, drain_job); stop its query or let the "
                    "drain end, then start it again")
            raise JobRunningError(
                f"job '{job}' is held by another thread of this process (a query started "
                "with sparkpoint.start is still running); stop it first")
        if path in _held:
            owner, count = _held[path]
            _held[path] = (owner, count + 1)
            return True
        _acquire(path, job, echo)
        if home.remote:
            try:
                _acquire_remote(home, job, echo)
                # What other machines changed since: the holder works on the home's copy.
                # State stays in the home: a step that reads it fetches what it needs.
                remote_home.pull_job(home, job, with_state=False)
            except BaseException:
                path.unlink(missing_ok=True)
                raise
        _held[path] = (me, 1)
        return False


@contextlib.contextmanager
def job_lock(home: Home, job: str, echo: Callable[[str], None] = _quiet,
             wait: bool = True) -> Iterator[None]:
    """Hold the job's lock for the block (re-entrant in this thread). ``wait=False``: held by
    another thread of this process is refused at once (a run: that thread runs the job)."""
    path = lock_path(home, job)
    if _enter(home, path, job, echo, wait):
        try:
            yield
        finally:
            with _released:
                owner, count = _held[path]
                _held[path] = (owner, count - 1)
        return
    try:
        yield
    finally:
        with _released:
            del _held[path]
            if home.remote:
                try:
                    remote_home.push_job(home, job)
                finally:
                    file_io(home.location).delete(_remote_lock_url(home, job))
            path.unlink(missing_ok=True)
            # A first run refused before anything was recorded leaves no trace.
            with contextlib.suppress(OSError):
                path.parent.rmdir()
            _released.notify_all()
