"""A job's lease in a home on S3 or HDFS: who may change the job, for how long, fenced.

The lease is a directory of generation files, ``<job>/lease/<generation>.json``. Each is
written once, by a conditional create (S3 ``If-None-Match``, HDFS rename without overwrite,
a hard link on local disk), and names its holder (a process identity: storage/processes.py),
a random token and the lease's length. The file of the highest generation is the lease.

Every change is the next generation, created conditionally, so the store orders them: of two
processes that try to create generation N+1, exactly one succeeds.

- **Taking it**: a process that finds the newest generation free (let go, its holder provably
  gone, or older than its length on the store's clock) creates the next one, then lists the
  generations again: the take counts only if its generation is still the newest. (Older
  generations are tidied away, so between its listing and its create, another process may
  have taken N+1, let go with N+2 and deleted N+1: the create of N+1 then succeeds, beneath
  a newer generation. Generations are deleted only beneath a newer one, so the listing after
  the create shows it.)
- **Renewing it**: the holder creates the next generation with its own token, every third
  of the length. A taker's create and a renewal's create of one generation cannot both land:
  a renewal that lost that race knows it lost the lease.
- **Letting go**: the holder creates the next generation marked released.

Clocks, and why two holders never overlap
-----------------------------------------
No time of one machine is compared with another's. A generation's age is measured on the
store's clock alone: its modification time (stamped by the store when the create landed) and
the store's clock at a listing (S3's Date header, WebHDFS's), both truncated to the second,
so an age read may be up to ``STORE_CLOCK_RESOLUTION_S`` short. A taker takes the lease only
when the newest generation's age read exceeds its length plus that resolution.

The holder measures on its own monotonic clock. Its deadline is the moment it *sent* the
create of its newest generation, plus the length, minus ``holder_margin`` (a sixth of the
length); a renewal counts only if its create is confirmed before the deadline
in force, and then the new deadline again starts from when it was sent. Every write made
under the lease is fenced by that deadline (storage/fencing.py; Spark's own checkpoint writes
by the same deadline in its JVM: spark/lease_fence.py), so nothing is written after it.

Since the create was sent before the store stamped it, the holder's deadline ends at most
``length - margin`` (holder's clock) after the stamp, while a taker acts at least ``length``
(store's clock) after it. Assumptions: the two clocks' *rates* differ by far less than
``margin / length`` (a sixth: real clocks differ by parts per million; their absolute times
may be anything), and a write begun before the deadline lands within ``margin`` of it (for a
60 s lease, 10 s). A holder frozen past its deadline (SIGSTOP, a long pause, a lost network)
never writes again: it finds its deadline passed when it wakes, before any write.

A holder on this machine, in the same pid namespace, that died frees the lease at once: its
pid is free or reused (``ProcessIdentity.gone``). A holder that cannot be seen from here
(another machine, another pid namespace) is never judged by its pid.

Audit: with ``SPARKPOINT_LEASE_LOG=<file>`` a process appends one JSON line to the file for each
lease it takes and lets go (job, generation, token, host, pid, boot and pid namespace, wall and
monotonic times), so a test can check from every process's log that no two holders' intervals
overlapped (on one machine by the monotonic times, which a process with its wall clock set
apart shares), and which taker could see a dead holder's pid namespace. Taken is
stamped after the conditional create won, let go at the holder's own deadline if that came
before the release: the interval is never shorter than the time the holder believed it held.

A home on local disk does not use this: kernel locks (runtime/lock.py) free a dead holder at
once.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from sparkpoint import settings
from sparkpoint.crash_points import crash_point
from sparkpoint.errors import JobRunningError, LeaseLostError
from sparkpoint.storage.fileio import FileIO, StampedListing, join
from sparkpoint.storage.processes import ProcessIdentity

LEASE_DIR = "lease"
DEFAULT_LEASE_SECONDS = settings.DEFAULT_LEASE_SECONDS
LEASE_SECONDS_ENV = settings.LEASE_SECONDS.name
LEASE_LOG_ENV = settings.LEASE_LOG.name
# Two readings of the store's clock (a modification time and a Date), each to the second.
STORE_CLOCK_RESOLUTION_S = 2.0
# Listing and reading the newest generation can race a holder tidying older ones.
READ_ATTEMPTS = 5
# A renewal that failed (a store error) is tried again this often until the deadline.
RETRY_S = 1.0


def lease_seconds() -> float:
    """The lease length from SPARKPOINT_LEASE_SECONDS (default 60)."""
    return settings.LEASE_SECONDS.get()


def holder_margin(length: float) -> float:
    """How long before a lease's end its holder stops writing (see the module's docs)."""
    return length / 6


@dataclass(frozen=True)
class LeaseRecord:
    generation: int
    token: str
    holder: ProcessIdentity
    length: float  # seconds, on the store's clock from the file's modification time
    released: bool = False

    @property
    def host(self) -> str:
        return self.holder.host

    @property
    def pid(self) -> int:
        return self.holder.pid

    def describe(self) -> str:
        return self.holder.describe()

    def to_bytes(self) -> bytes:
        body = {"token": self.token, **self.holder.to_record(), "length": self.length,
                "released": self.released}
        return json.dumps(body, sort_keys=True).encode("utf-8")


@dataclass(frozen=True)
class LeaseView:
    """The newest generation of a lease as one listing showed it."""

    generation: int  # 0 when there is none
    record: LeaseRecord | None  # None when none, or unreadable (holds nobody)
    age: float | None  # on the store's clock; None when not told

    def free(self) -> bool:
        """Nobody holds it: none, let go, its holder provably gone, or expired."""
        record = self.record
        if record is None or record.released or record.holder.gone():
            return True
        return self.age is not None and self.age > record.length + STORE_CLOCK_RESOLUTION_S

    def remaining(self) -> float:
        """How long, at most, until the lease expires unless renewed (seconds)."""
        if self.record is None or self.age is None:
            return 0.0
        return max(0.0, self.record.length + STORE_CLOCK_RESOLUTION_S - self.age)


def _log(event: str, job: str, record: LeaseRecord, **extra: Any) -> None:
    """One line in $SPARKPOINT_LEASE_LOG, if set (see the module's docs)."""
    path = settings.LEASE_LOG.get()
    if not path:
        return
    line = {"event": event, "job": job, "generation": record.generation,
            "token": record.token, "host": record.host, "pid": record.pid,
            "boot_id": record.holder.boot_id, "pid_namespace": record.holder.pid_namespace,
            "wall": time.time(), "monotonic": time.monotonic(), **extra}
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(json.dumps(line, sort_keys=True) + "\n")


def _name(generation: int) -> str:
    return f"{generation:012d}.json"


def _generation(name: str) -> int | None:
    stem, dot, ext = name.partition(".")
    return int(stem) if dot and ext == "json" and stem.isdigit() else None


def _parse(data: bytes, generation: int) -> LeaseRecord | None:
    try:
        raw: Any = json.loads(data)
        holder = ProcessIdentity.from_record(raw)
        if holder is None:
            return None
        # A record of an earlier version holds no length: the default's.
        length = float(raw["length"]) if "length" in raw else DEFAULT_LEASE_SECONDS
        return LeaseRecord(generation=generation, token=str(raw["token"]), holder=holder,
                           length=length, released=bool(raw.get("released", False)))
    except (ValueError, KeyError, TypeError, AttributeError):
        return None


class LeaseStore:
    """The lease of one job: ``directory`` is ``<job url>/lease``."""

    def __init__(self, io: FileIO, directory: str, job: str) -> None:
        self.io, self.directory, self.job = io, directory, job

    def _url(self, generation: int) -> str:
        return join(self.directory, _name(generation))

    def _generations(self) -> list[int]:
        found = (_generation(name) for name in self.io.list_names(self.directory))
        return sorted(gen for gen in found if gen is not None)

    def _listing(self) -> tuple[StampedListing, list[int]]:
        listing = self.io.stamped_listing(self.directory)
        found = (_generation(name) for name in listing.files)
        return listing, sorted(gen for gen in found if gen is not None)

    def newest(self) -> int:
        """The newest generation's number (0 when there is none): one listing."""
        generations = self._listing()[1]
        return generations[-1] if generations else 0

    def view(self) -> LeaseView:
        """The newest generation, its record and its age on the store's clock."""
        for _attempt in range(READ_ATTEMPTS):
            listing, generations = self._listing()
            if not generations:
                return LeaseView(0, None, None)
            newest = generations[-1]
            try:
                data = self.io.read_bytes(self._url(newest))
            except FileNotFoundError:
                continue  # tidied by a newer holder since the listing: look again
            return LeaseView(newest, _parse(data, newest), listing.age(_name(newest)))
        return LeaseView(0, None, None)

    def current(self) -> tuple[int, LeaseRecord | None]:
        """The newest generation number (0 when none) and its record (None when none, or
        when the file is unreadable: a record cut off while written holds nobody)."""
        view = self.view()
        return view.generation, view.record

    def holder(self) -> LeaseRecord | None:
        """The live holder, if any."""
        view = self.view()
        return None if view.free() else view.record

    def _refusal(self, view: LeaseView) -> JobRunningError:
        assert view.record is not None
        return JobRunningError(
            f"job '{self.job}' is already running ({view.record.describe()}: its lease "
            f"{self._url(view.generation)} holds for up to {view.remaining():.0f} s more "
            "unless renewed); stop it there first, or snapshot it with 'sparkpoint "
            "snapshot create'")

    def acquire(self, echo: Callable[[str], None], length: float | None = None) -> Lease:
        """Take the lease, or raise JobRunningError naming its live holder. ``echo`` hears
        of a lease taken over from a holder that did not let go, once it is taken."""
        length = lease_seconds() if length is None else length
        for _attempt in range(2):
            view = self.view()
            if not view.free():
                raise self._refusal(view)
            sent = time.monotonic()
            mine = LeaseRecord(generation=view.generation + 1, token=uuid.uuid4().hex,
                               holder=ProcessIdentity.current(), length=length)
            if not self.io.create_exclusive(self._url(mine.generation), mine.to_bytes()):
                continue  # another process took this generation: look again
            if self.newest() != mine.generation:
                # A ghost: this generation had been created by another process, let go and
                # tidied away (a newer one now stands) between the listing and the create.
                # Ours is not the lease; it goes, and the newest is looked at again.
                self.io.delete(self._url(mine.generation))
                continue
            lease = Lease(self, mine, sent)
            # The holder's own deadline on the wall clock: the audit compares it, on one
            # machine, with the moment another process took the lease.
            _log("acquired", self.job, mine, length=length,
                 expires_at=time.time() + lease.deadline - time.monotonic(),
                 expires_monotonic=lease.deadline)
            crash_point("lease.taken")
            if view.record is not None and not view.record.released:
                why = "whose process is gone" if view.record.holder.gone() else \
                    f"that was not renewed for {view.age or 0:.0f} s"
                echo(f"job '{self.job}': took over the lease left by "
                     f"{view.record.describe()}, {why}")
            lease.tidy()
            return lease
        view = self.view()
        if view.record is not None and not view.free():
            raise self._refusal(view)
        raise JobRunningError(
            f"job '{self.job}': another process took its lease at {self.directory} "
            "meanwhile; stop it first, or snapshot it with 'sparkpoint snapshot create'")


@dataclass
class _Renewal:
    """The generation a renewal is creating, and when its create was first sent."""

    record: LeaseRecord
    sent: float


@dataclass
class _Listeners:
    lost: list[Callable[[], None]] = field(default_factory=list)
    # Told the holder's deadline (monotonic seconds) after each renewal; None once it is
    # no longer held.
    deadline: list[Callable[[float | None], None]] = field(default_factory=list)


class Lease:
    """A lease this process holds."""

    def __init__(self, store: LeaseStore, record: LeaseRecord, sent: float) -> None:
        self.store, self.record, self.length = store, record, record.length
        self.margin = holder_margin(record.length)
        # When the create of the newest generation was sent, and the holder's own deadline
        # on its monotonic clock: past it, it no longer holds, whatever the store says (a
        # taker may already work).
        self.sent = sent
        self.deadline = sent + self.length - self.margin
        self.lost = threading.Event()
        self._listeners = _Listeners()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._renewal: _Renewal | None = None
        self.ended = False
        self._end_logged = False  # each holding is let go once in the audit log

    @property
    def url(self) -> str:
        return self.store._url(self.record.generation)

    def tidy(self) -> None:
        """Delete generations below this one (never the newest: see the module's docs)."""
        for generation in self.store._generations():
            if generation < self.record.generation:
                self.store.io.delete(self.store._url(generation))

    def _lose(self, why: str) -> LeaseLostError:
        first = not self.lost.is_set()
        self.lost.set()
        if first:
            for callback in [*self._listeners.lost]:
                # Stopping is best effort: the loss stands whatever the callback does.
                with contextlib.suppress(Exception):
                    callback()
            self._tell_deadline(None)
        return LeaseLostError(
            f"job '{self.store.job}': lost its lease at {self.store.directory} ({why}); "
            "another process may run the job now, so this one stopped without writing more; "
            "see 'sparkpoint jobs show' for who holds it")

    def _tell_deadline(self, deadline: float | None) -> None:
        for callback in [*self._listeners.deadline]:
            with contextlib.suppress(Exception):
                callback(deadline)

    def fence(self) -> None:
        """The fence of every write made under the lease: lost, or past this holder's own
        deadline, raises LeaseLostError without asking the store (before the deadline no
        taker can have taken the lease: see the module's docs)."""
        if self.lost.is_set():
            raise self._lose("lost earlier")
        if time.monotonic() >= self.deadline:
            raise self._lose(f"not renewed within its {self.length:g} s")

    def check(self) -> None:
        """``fence``, and the store asked whether the newest generation is still this
        holder's (one listing)."""
        with self._lock:
            self.fence()
            newest = self.store.newest()
            if newest != self.record.generation:
                raise self._lose(self._taken_by(newest))

    def _taken_by(self, newest: int) -> str:
        view = self.store.view()
        holder = view.record.describe() if view.record is not None else "nobody"
        return f"generation {max(newest, view.generation)} now, held by {holder}"

    def renew(self) -> None:
        """Create the next generation; it counts only when confirmed before the deadline
        in force, and the new deadline runs from when it was sent."""
        with self._lock:
            self.fence()
            renewal = self._renewal
            if renewal is None or renewal.record.generation != self.record.generation + 1:
                renewal = self._renewal = _Renewal(
                    replace(self.record, generation=self.record.generation + 1),
                    time.monotonic())
            created = self._create(renewal.record)
            if time.monotonic() >= self.deadline:
                if created:
                    self._let_go_quietly(renewal.record)
                raise self._lose(f"its renewal was confirmed after its {self.length:g} s")
            if not created:
                raise self._lose(self._taken_by(renewal.record.generation))
            self.record, self._renewal = renewal.record, None
            self.sent = renewal.sent
            self.deadline = renewal.sent + self.length - self.margin
            self._tell_deadline(self.deadline)
        self.tidy()

    def _create(self, record: LeaseRecord) -> bool:
        """Create ``record``'s generation; True when it is this holder's (created now, or by
        an earlier attempt whose answer was lost: FileIO.create_exclusive finds its bytes)."""
        return self.store.io.create_exclusive(self.store._url(record.generation),
                                              record.to_bytes())

    def _let_go_quietly(self, record: LeaseRecord) -> None:
        """A generation this holder created too late to use: let it go (best effort)."""
        with contextlib.suppress(Exception):
            released = replace(record, generation=record.generation + 1, released=True)
            self.store.io.create_exclusive(self.store._url(released.generation),
                                           released.to_bytes())

    def on_lost(self, callback: Callable[[], None]) -> Callable[[], None]:
        """Call ``callback`` (e.g. stop the query) as soon as the lease is found lost; the
        returned function unregisters it."""
        self._listeners.lost.append(callback)
        if self.lost.is_set():
            callback()
        return lambda: _remove(self._listeners.lost, callback)

    def on_deadline(self, callback: Callable[[float | None], None]) -> Callable[[], None]:
        """Tell ``callback`` this holder's deadline now and after every renewal (None once
        it is lost or let go); the returned function unregisters it."""
        self._listeners.deadline.append(callback)
        callback(None if self.lost.is_set() or self.ended else self.deadline)
        return lambda: _remove(self._listeners.deadline, callback)

    def start_renewing(self) -> None:
        self._thread = threading.Thread(target=self._renew_loop, daemon=True,
                                        name=f"sparkpoint-lease-{self.store.job}")
        self._thread.start()

    def _renew_loop(self) -> None:
        """Renew a third of the length after the last renewal was sent; after a store
        error, again every RETRY_S; at the deadline, lost (the fence would say so at the next
        write anyway: this stops a running query at once)."""
        retry_at: float | None = None
        while True:
            due = retry_at if retry_at is not None else self.sent + self.length / 3
            if self._stop.wait(max(0.0, min(due, self.deadline) - time.monotonic())):
                return
            if time.monotonic() >= self.deadline:
                self._lose(f"not renewed within its {self.length:g} s")
                return
            try:
                self.renew()
                retry_at = None
            except LeaseLostError:
                return
            except Exception:  # a store error: try again until the deadline
                retry_at = time.monotonic() + min(RETRY_S, self.length / 3)

    def gone_with_job(self) -> None:
        """The job was deleted: stop renewing, write nothing more under the lease. The
        holding ends here, in the audit log too: nothing releases a lease that ended."""
        self.ended = True
        self._stop_renewing()
        self._log_let_go("deleted")
        self._tell_deadline(None)

    def _stop_renewing(self) -> None:
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            # A renewal stuck in a request that hangs is past its deadline by then: not
            # waited for longer than a lease (the thread is a daemon, and writes nothing).
            self._thread.join(timeout=self.length)

    def _log_let_go(self, outcome: str) -> None:
        if self._end_logged:
            return
        self._end_logged = True
        # The holder's own deadline, on the wall clock: past it, it believed it held no more.
        # The monotonic figures compare processes of one machine whatever their wall clocks.
        deadline = time.time() - max(0.0, time.monotonic() - self.deadline)
        _log("released", self.store.job, self.record, outcome=outcome,
             held_until=min(time.time(), deadline),
             held_until_monotonic=min(time.monotonic(), self.deadline))

    def release(self) -> None:
        """Stop renewing and let go: the next generation, marked released (nothing is
        written once the lease was lost)."""
        self._stop_renewing()
        if self.lost.is_set() or self.ended:
            self._log_let_go("lost" if self.lost.is_set() else "ended")
            self._tell_deadline(None)
            return
        # A renewal stuck in a request that hangs holds the lock: waited for a lease's
        # length at most (the holder's deadline has passed by then, so the renewal can no
        # longer count, and lets its generation go if it ever lands).
        if not self._lock.acquire(timeout=self.length):
            self._lose("a renewal hung in a request to the store")
            self._log_let_go("lost")
            return
        try:
            try:
                self.fence()
                if self.store.newest() != self.record.generation:
                    raise self._lose("taken by another process")
            except LeaseLostError:
                self._log_let_go("lost")
                return
            self._log_let_go("released")
            self._tell_deadline(None)
            released = replace(self.record, generation=self.record.generation + 1,
                               released=True)
            if self.store.io.create_exclusive(self.store._url(released.generation),
                                              released.to_bytes()):
                self.record = released
                self.ended = True
        finally:
            self._lock.release()
        if self.ended:
            self.tidy()


def _remove(callbacks: list[Any], callback: Any) -> None:
    if callback in callbacks:
        callbacks.remove(callback)
