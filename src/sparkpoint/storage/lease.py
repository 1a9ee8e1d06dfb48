"""A job's lease in a home on S3 or HDFS: who may change the job, for how long, fenced.

The lease is a directory of generation files, ``<job>/lease/<generation>.json``, each holding
a random token, the holder's host and pid, and the wall-clock time it expires. The file of the
highest generation is the lease; its holder is live while it has not expired or been let go.

- **Taking it** is one conditional create of the next generation (S3 ``If-None-Match``, HDFS
  create without overwrite, a hard link on local disk): of two processes that both read the
  same expired generation N, exactly one creates N+1. Nothing is ever read, deleted and
  created again, so no interleaving lets two takers win. This is compare-and-swap on the
  generation number, which every store sparkpoint supports can do; S3 ``If-Match`` on an ETag
  would be the same idea on one object, but HDFS has no equivalent for a file's content.
- **Renewing it** rewrites the holder's own generation file with a later expiry, every third
  of the lease's length, and only while the holder's own deadline (measured on its monotonic
  clock from the last renewal) has not passed: a holder frozen past its deadline (SIGSTOP, a
  long GC pause, a lost network) never renews again, since a taker may already work. A
  renewal first checks that the highest generation is still its own.
- **Fencing**: ``check()`` before a write confirms the highest generation is this holder's,
  by token. A taker's generation is always higher, and generations below the newest are the
  only files ever deleted, so a fenced-out holder always sees that it lost.
- **Letting go** marks the holder's generation released (it is not deleted: a holder that was
  fenced out must still find a higher generation than its own).

Audit: with ``SPARKPOINT_LEASE_LOG=<file>`` a process appends one JSON line to the file for each
lease it takes and lets go (job, generation, token, host, pid, wall and monotonic times), so a
test can check from every process's log that no two holders' intervals overlapped. Taken is
stamped after the conditional create won, let go before the release is written (or, for a
lease found lost, at the holder's own deadline if that came first): the interval is never
shorter than the time the holder believed it held.

Clocks: a taker compares the recorded expiry with its own wall clock, so machines sharing a
home must keep their clocks within a small fraction of ``SPARKPOINT_LEASE_SECONDS`` (NTP
does). A home on local disk does not use this: kernel locks (runtime/lock.py) free a dead
holder at once.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from typing import Any

from sparkpoint.crash_points import crash_point
from sparkpoint.errors import JobRunningError, LeaseLostError, UsageError
from sparkpoint.storage.fileio import FileIO, join
from sparkpoint.storage.processes import pid_alive, this_host

LEASE_DIR = "lease"
DEFAULT_LEASE_SECONDS = 60.0
LEASE_SECONDS_ENV = "SPARKPOINT_LEASE_SECONDS"
LEASE_LOG_ENV = "SPARKPOINT_LEASE_LOG"
# Listing and reading the newest generation can race a taker tidying older ones.
READ_ATTEMPTS = 5


def lease_seconds() -> float:
    """The lease length from SPARKPOINT_LEASE_SECONDS (default 60)."""
    text = os.environ.get(LEASE_SECONDS_ENV)
    if text is None or not text.strip():
        return DEFAULT_LEASE_SECONDS
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 < value < float("inf"):  # NaN fails the comparison too
        raise UsageError(
            f"{LEASE_SECONDS_ENV}={text!r}: expected a positive number of seconds, found "
            f"{text!r}; set it to e.g. 60 or unset it")
    return value


@dataclass(frozen=True)
class LeaseRecord:
    generation: int
    token: str
    host: str
    pid: int
    expires_at: float  # seconds since the epoch, the holder's wall clock
    released: bool = False

    def live(self, now: float | None = None) -> bool:
        """Held: not let go, not expired, and, when held on this machine, by a live process
        (a holder that died here frees the job at once, as a kernel lock would)."""
        if self.released or self.expires_at <= (time.time() if now is None else now):
            return False
        return self.host != this_host() or pid_alive(self.pid)

    def describe(self) -> str:
        return f"pid {self.pid} on {self.host}"

    def to_bytes(self) -> bytes:
        return json.dumps(asdict(self), sort_keys=True).encode("utf-8")


def _log(event: str, job: str, record: LeaseRecord, **extra: Any) -> None:
    """One line in $SPARKPOINT_LEASE_LOG, if set (see the module's docs)."""
    path = os.environ.get(LEASE_LOG_ENV)
    if not path:
        return
    line = {"event": event, "job": job, "generation": record.generation,
            "token": record.token, "host": record.host, "pid": record.pid,
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
        record = LeaseRecord(generation=generation, token=str(raw["token"]),
                             host=str(raw["host"]), pid=int(raw["pid"]),
                             expires_at=float(raw["expires_at"]),
                             released=bool(raw.get("released", False)))
    except (ValueError, KeyError, TypeError):
        return None
    return record


class LeaseStore:
    """The lease of one job: ``directory`` is ``<job url>/lease``."""

    def __init__(self, io: FileIO, directory: str, job: str) -> None:
        self.io, self.directory, self.job = io, directory, job

    def _url(self, generation: int) -> str:
        return join(self.directory, _name(generation))

    def _generations(self) -> list[int]:
        found = (_generation(name) for name in self.io.list_names(self.directory))
        return sorted(gen for gen in found if gen is not None)

    def current(self) -> tuple[int, LeaseRecord | None]:
        """The newest generation number (0 when none) and its record (None when none, or
        when the file is unreadable: a record cut off while written holds nobody)."""
        for _attempt in range(READ_ATTEMPTS):
            generations = self._generations()
            if not generations:
                return 0, None
            newest = generations[-1]
            try:
                data = self.io.read_bytes(self._url(newest))
            except FileNotFoundError:
                continue  # the whole lease was deleted with its job meanwhile: list again
            return newest, _parse(data, newest)
        return 0, None

    def holder(self) -> LeaseRecord | None:
        """The live holder, if any."""
        _generation_number, record = self.current()
        return record if record is not None and record.live() else None

    def acquire(self, echo: Callable[[str], None], length: float | None = None) -> Lease:
        """Take the lease, or raise JobRunningError naming its live holder."""
        length = lease_seconds() if length is None else length
        for _attempt in range(2):
            newest, record = self.current()
            if record is not None and record.live():
                raise JobRunningError(
                    f"job '{self.job}' is already running ({record.describe()}, lease "
                    f"{self._url(newest)} live for {record.expires_at - time.time():.0f} s "
                    "more); stop it first, or snapshot it with 'sparkpoint snapshot create'")
            started = time.monotonic()
            mine = LeaseRecord(generation=newest + 1, token=uuid.uuid4().hex, host=this_host(),
                               pid=os.getpid(), expires_at=time.time() + length)
            if not self.io.create_exclusive(self._url(mine.generation), mine.to_bytes()):
                continue  # another process took this generation: look again
            _log("acquired", self.job, mine, length=length, expires_at=mine.expires_at)
            crash_point("lease.taken")
            if record is not None and not record.released:
                echo(f"job '{self.job}': took over the lease left by {record.describe()}, "
                     f"expired {time.time() - record.expires_at:.0f} s ago")
            lease = Lease(self, mine, length, started)
            lease.tidy()
            return lease
        _newest, record = self.current()
        holder = record.describe() if record is not None else "another process"
        raise JobRunningError(
            f"job '{self.job}': {holder} took its lease at {self.directory} meanwhile; stop "
            "it first, or snapshot it with 'sparkpoint snapshot create'")


class Lease:
    """A lease this process holds."""

    def __init__(self, store: LeaseStore, record: LeaseRecord, length: float,
                 started: float) -> None:
        self.store, self.record, self.length = store, record, length
        # The holder's own deadline on its monotonic clock: past it, it no longer holds,
        # whatever the store says (a taker may already work).
        self.deadline = started + length
        self.lost = threading.Event()
        self._on_lost: list[Callable[[], None]] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self.ended = False

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
            for callback in list(self._on_lost):
                # Stopping is best effort: the loss stands whatever the callback does.
                with contextlib.suppress(Exception):
                    callback()
        return LeaseLostError(
            f"job '{self.store.job}': lost its lease at {self.store.directory} ({why}); "
            "another process may run the job now, so this one stopped without writing more; "
            "see 'sparkpoint jobs show' for who holds it")

    def fence(self) -> None:
        """The cheap fence for frequent small writes: lost, or past this holder's own
        deadline, raises LeaseLostError without asking the store (before the deadline no
        taker can have taken the lease; the renewing thread asks the store every third)."""
        if self.lost.is_set():
            raise self._lose("lost earlier")
        if time.monotonic() >= self.deadline:
            raise self._lose(f"not renewed within its {self.length:g} s")

    def check(self) -> None:
        """Raise LeaseLostError unless this process still holds the lease (a fence: call it
        before every write made under the lease)."""
        if self.lost.is_set():
            raise self._lose("lost earlier")
        if time.monotonic() >= self.deadline:
            raise self._lose(f"not renewed within its {self.length:g} s")
        newest, record = self.store.current()
        if record is None or newest != self.record.generation \
                or record.token != self.record.token:
            holder = record.describe() if record is not None else "nobody"
            raise self._lose(f"generation {newest} now, held by {holder}")

    def renew(self) -> None:
        with self._lock:
            started = time.monotonic()
            self.check()
            renewed = replace(self.record, expires_at=time.time() + self.length)
            self.store.io.write_bytes(self.url, renewed.to_bytes())
            self.record, self.deadline = renewed, started + self.length

    def on_lost(self, callback: Callable[[], None]) -> Callable[[], None]:
        """Call ``callback`` (e.g. stop the query) as soon as the lease is found lost; the
        returned function unregisters it."""
        self._on_lost.append(callback)
        if self.lost.is_set():
            callback()
        return lambda: self._on_lost.remove(callback) if callback in self._on_lost else None

    def start_renewing(self) -> None:
        self._thread = threading.Thread(target=self._renew_loop, daemon=True,
                                        name=f"sparkpoint-lease-{self.store.job}")
        self._thread.start()

    def _renew_loop(self) -> None:
        while not self._stop.wait(self.length / 3):
            try:
                self.renew()
            except LeaseLostError:
                return
            except Exception:  # a store error: try again until the deadline
                if time.monotonic() >= self.deadline:
                    self._lose("the store could not be reached to renew it")
                    return

    def gone_with_job(self) -> None:
        """The job was deleted with its lease: stop renewing, write nothing more."""
        self.ended = True
        self._stop_renewing()

    def _stop_renewing(self) -> None:
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()

    def _log_let_go(self, outcome: str) -> None:
        # The holder's own deadline, on the wall clock: past it, it believed it held no more.
        deadline = time.time() - max(0.0, time.monotonic() - self.deadline)
        _log("released", self.store.job, self.record, outcome=outcome,
             held_until=min(time.time(), deadline))

    def release(self) -> None:
        """Stop renewing and let go (nothing is written once the lease was lost)."""
        self._stop_renewing()
        if self.lost.is_set() or self.ended:
            self._log_let_go("lost" if self.lost.is_set() else "deleted with the job")
            return
        with self._lock:
            try:
                self.check()
            except LeaseLostError:
                self._log_let_go("lost")
                return
            self._log_let_go("released")
            released = replace(self.record, released=True)
            self.store.io.write_bytes(self.url, released.to_bytes())
