"""The exclusive right to change a job: run it, drain it, apply its startpoints.

On this machine a kernel lock (``flock``) on ``<home>/jobs/<job>/run.lock`` holds the job: the
kernel lets go the moment its holder dies, and of two processes asking at once exactly one
gets it. The file names the holder's pid for messages. A home on S3 or HDFS is shared by
machines: there the job's lease in the home (storage/lease.py) is taken as well, renewed while
held, and checked before what the holder writes back; a holder that loses it stops at once
(``LEASE_LOST``).

The lock is re-entrant within a thread, so a command that holds it across several steps
(drain: complete the in-flight batch, run the drain batch, put the watermark back) can run the
job inside without letting another process in between. Another thread of the same process (a
notebook draining a job it started with ``sparkpoint.start``) waits until the holding thread
lets go.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from sparkpoint.errors import JobRunningError, LeaseLostError
from sparkpoint.storage import fencing
from sparkpoint.storage.fileio import join
from sparkpoint.storage.home import Home
from sparkpoint.storage.lease import LEASE_DIR, Lease, LeaseStore
from sparkpoint.storage.processes import ProcessIdentity
from sparkpoint.storage.stores import file_io

LOCK_FILE = "run.lock"


def _quiet(_message: str) -> None:
    pass


@dataclass
class _Hold:
    thread: int
    count: int
    fd: int
    lease: Lease | None
    # Ends the fencing of the job's files by the lease (storage/fencing.py).
    unguard: Callable[[], None] = lambda: None


# Lock files this process holds: the holding thread, how many times it holds each, the
# kernel lock's descriptor and, on a remote home, the lease.
_held: dict[Path, _Hold] = {}
_released = threading.Condition()
# How long a thread waits for another thread of this process to let go of a job's lock.
THREAD_WAIT_S = 120.0


def lock_path(home: Home, job: str) -> Path:
    """The kernel lock's file: in the job's directory of a local home; for a home in a store,
    in this machine's own directory for the job (its processes here meet there)."""
    return home.local_job_dir(job) / LOCK_FILE


def lease_store(home: Home, job: str) -> LeaseStore:
    return LeaseStore(file_io(home.location), join(home.job_url(job), LEASE_DIR), job)


def _recorded_holder(path: Path) -> ProcessIdentity | None:
    """Who the lock file says holds the lock (the pid alone, for a file of an older
    version: on this machine)."""
    try:
        text = path.read_text().strip()
    except (FileNotFoundError, UnicodeDecodeError):
        return None
    try:
        raw = json.loads(text) if text.startswith("{") else {"pid": int(text)}
    except (ValueError, AttributeError):
        return None
    if not isinstance(raw, dict):
        return None
    raw.setdefault("host", "this machine")
    return ProcessIdentity.from_record(raw)


def _kernel_lock(path: Path, job: str, notices: list[str]) -> int:
    """Take the kernel lock on ``path`` without waiting; the descriptor that holds it.
    What a user should hear of (a lock left by a run that died) goes to ``notices``, said
    once the job is held."""
    path.parent.mkdir(parents=True, exist_ok=True)
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            holder = _recorded_holder(path)
            where = holder.describe() if holder is not None else "another process"
            raise JobRunningError(
                f"job '{job}' is already running ({where}); stop it first, or snapshot it "
                "with 'sparkpoint snapshot create'") from None
        # The holder before us may have removed the file as it let go: a lock on a file no
        # longer at the path holds nothing, so take it again on the path's file.
        try:
            same = os.stat(path).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)
    left = _recorded_holder(path)
    if left is not None:
        # Only a holder that died leaves its file: one that lets go removes it.
        notices.append(f"job '{job}': took over the lock left by an interrupted run "
                       f"({left.describe()}, no longer running)")
    os.ftruncate(fd, 0)
    os.write(fd, json.dumps(ProcessIdentity.current().to_record()).encode("utf-8"))
    return fd


def _kernel_unlock(path: Path, fd: int) -> None:
    # Removed while still locked, so nobody can lock this file after we let go (see above).
    path.unlink(missing_ok=True)
    os.close(fd)


def holder_of(home: Home, job: str) -> ProcessIdentity | None:
    """The live process holding the job: its lease's holder in a store, the kernel lock's
    on a local home (asked of the kernel: a file left by a process that died, its pid maybe
    reused since, holds nothing)."""
    if home.remote:
        record = lease_store(home, job).holder()
        return None if record is None else record.holder
    path = lock_path(home, job)
    with _released:
        if path in _held:
            return ProcessIdentity.current()
    holder = _recorded_holder(path)
    if holder is None:
        return None
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return holder
    finally:
        os.close(fd)
    return None


def lock_holder(home: Home, job: str) -> int | None:
    """The live process holding the job: its pid, or -1 when it cannot be seen from here
    (another machine or pid namespace)."""
    holder = holder_of(home, job)
    if holder is None:
        return None
    if home.remote and not holder.visible_here():
        return -1
    return holder.pid


def holds(home: Home, job: str, holder: ProcessIdentity | None) -> bool:
    """Whether process ``holder`` holds the job (its lease in a store, its kernel lock on a
    local home)."""
    if holder is None:
        return False
    found = holder_of(home, job)
    return found is not None and found.same_process(holder)


def held_lease(home: Home, job: str) -> Lease | None:
    """The lease this thread holds on the job (None on a local home or when not held)."""
    with _released:
        hold = _held.get(lock_path(home, job))
    return hold.lease if hold is not None and hold.thread == threading.get_ident() else None


def fence(home: Home, job: str) -> None:
    """Before a write to a job this thread holds: raise LEASE_LOST when its lease is lost or
    past its deadline (no I/O; the renewing thread asks the store every third of the
    lease). Nothing on a local home, or for a job this thread does not hold."""
    lease = held_lease(home, job)
    if lease is not None:
        lease.fence()


def _enter(home: Home, path: Path, job: str, echo: Callable[[str], None],
           wait: bool = True) -> bool:
    """Take the lock for this thread, or count one more hold; True when already held."""
    me = threading.get_ident()
    with _released:
        if not _released.wait_for(lambda: path not in _held or _held[path].thread == me,
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
            _held[path].count += 1
            return True
        notices: list[str] = []
        fd = _kernel_lock(path, job, notices)
        lease = None
        unguard: Callable[[], None] = lambda: None  # noqa: E731
        if home.remote:
            try:
                lease = lease_store(home, job).acquire(notices.append)
                lease.start_renewing()
            except BaseException:
                if lease is not None:
                    lease.release()
                _kernel_unlock(path, fd)
                raise
            # From here every write of this thread into the job's directory is fenced.
            unguard = fencing.add_guarded([home.job_url(job)], lease.fence)
        _held[path] = _Hold(thread=me, count=1, fd=fd, lease=lease, unguard=unguard)
        # Said only now: a notice followed by a refusal would contradict itself.
        for notice in notices:
            echo(notice)
        return False


def _leave(home: Home, path: Path, job: str) -> None:
    """Let go of the lock (and of the lease, on a home in a store)."""
    hold = _held[path]
    hold.unguard()
    try:
        if hold.lease is not None and not hold.lease.ended:
            try:
                hold.lease.check()  # a holder that lost its lease ends with LEASE_LOST
            finally:
                hold.lease.release()
                if hold.lease.ended:
                    _forget_if_unrecorded(home, job)
    finally:
        del _held[path]
        _kernel_unlock(path, hold.fd)
        # A first run refused before anything was recorded leaves no trace.
        with contextlib.suppress(OSError):
            path.parent.rmdir()
        _released.notify_all()


def _forget_if_unrecorded(home: Home, job: str) -> None:
    """A job of a store holding nothing but the lease just let go (a first run refused
    before anything was recorded): its lease's files go too, the newest last, so that it
    leaves no trace, as on a local home. Another process finds the lease let go, or none:
    free either way."""
    job_url = home.job_url(job)
    io = file_io(job_url)
    if io.list_names(job_url) != [LEASE_DIR]:
        return
    lease_dir = join(job_url, LEASE_DIR)
    for name in io.list_names(lease_dir):  # zero-padded generations: the newest last
        io.delete(join(lease_dir, name))


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
                _held[path].count -= 1
        return
    try:
        yield
    except LeaseLostError:
        with _released:
            _leave(home, path, job)
        raise
    except BaseException:
        # The block's own error is the one to report.
        with _released, contextlib.suppress(LeaseLostError):
            _leave(home, path, job)
        raise
    with _released:
        _leave(home, path, job)
