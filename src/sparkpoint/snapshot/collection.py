"""Announcements of collections in a snapshot store on S3 or HDFS: how a delete's collection
and a create that shares files never break a snapshot, without either waiting on a clock.

A collection removes files that no published manifest and no live create names. The danger
is a create that decides to share a file after the collection listed the creates, and a
delete of that file landing after the create published. Both sides therefore write first
and read second (the handshake of Dekker's mutual exclusion, on a store whose listings see
every write that finished before them, as S3 and HDFS's NameNode do):

- a create writes its lease (the files it relies on, its name), *then* reads the
  announcements;
- a collection writes its announcement (the files and directories it means to delete), *then*
  lists the leases again and deletes only what no lease names.

Whichever writes second reads the other's write: either the collection sees the create's
lease and keeps its files, or the create sees the announcement and waits until that
collection has ended, then looks at what the store holds and stores again what went.

A collection deletes only while its announcement lasts, measured on its own monotonic clock
(``SPARKPOINT_LEASE_SECONDS``, as a job's lease): a collector frozen past it (SIGSTOP, a long
pause) deletes nothing more, so a create waits at most that long, and a margin, for a
collector that died on another machine. One that dies on this machine frees its
announcement at once (its pid is gone).
"""

from __future__ import annotations

import itertools
import json
import os
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from sparkpoint.storage.fileio import FileIO, join
from sparkpoint.storage.lease import lease_seconds
from sparkpoint.storage.processes import pid_alive, this_host

COLLECTIONS_DIR = ".collections"
# Requests still on the wire when a collector's deadline passes, and the clocks of two
# machines: a create treats an announcement as over only this long after it expired.
CLOCK_MARGIN_S = 2.0
# How often a create waiting on a collection looks again (seconds, doubling up to the last).
POLL_S = (0.05, 0.1, 0.2, 0.5, 1.0)


@dataclass(frozen=True)
class Announcement:
    """A collection in flight: what it may delete, by whom, until when."""

    url: str
    host: str
    pid: int
    expires_at: float  # wall clock, seconds since the epoch
    blobs: frozenset[str]
    names: frozenset[str]

    def live(self, now: float | None = None) -> bool:
        """It may still delete: not past its expiry and margin, and, when announced on this
        machine, by a live process."""
        if self.expires_at + CLOCK_MARGIN_S <= (time.time() if now is None else now):
            return False
        return self.host != this_host() or pid_alive(self.pid)

    def touches(self, blobs: Iterable[str], names: Iterable[str]) -> bool:
        return not (self.blobs.isdisjoint(blobs) and self.names.isdisjoint(names))

    def describe(self) -> str:
        return f"pid {self.pid} on {self.host}"


def _parse(url: str, data: bytes) -> Announcement | None:
    try:
        raw = json.loads(data)
        return Announcement(url=url, host=str(raw["host"]), pid=int(raw["pid"]),
                            expires_at=float(raw["expires_at"]),
                            blobs=frozenset(map(str, raw["blobs"])),
                            names=frozenset(map(str, raw["names"])))
    except (ValueError, KeyError, TypeError):
        return None  # cut off while written: it announced nothing it could act on


def announcements(io: FileIO, root: str) -> list[Announcement]:
    """Every announcement in the store; one gone between listing and reading has ended."""
    directory = join(root, COLLECTIONS_DIR)
    found = []
    for name in io.list_names(directory):
        url = join(directory, name)
        try:
            data = io.read_bytes(url)
        except FileNotFoundError:
            continue
        parsed = _parse(url, data)
        if parsed is not None:
            found.append(parsed)
    return found


class Collection:
    """This process's announcement of what it is about to delete."""

    def __init__(self, io: FileIO, root: str, blobs: Iterable[str],
                 names: Iterable[str]) -> None:
        self.io = io
        length = lease_seconds()
        self.deadline = time.monotonic() + length
        self.url = join(root, COLLECTIONS_DIR, f"{uuid.uuid4().hex}.json")
        record = {"host": this_host(), "pid": os.getpid(), "expires_at": time.time() + length,
                  "blobs": sorted(blobs), "names": sorted(names)}
        io.write_bytes(self.url, json.dumps(record).encode("utf-8"))

    def may_delete(self) -> bool:
        """Still within the announcement's length, on this process's own clock."""
        return time.monotonic() < self.deadline

    def end(self) -> None:
        self.io.delete(self.url)


def wait_for_collections(io: FileIO, root: str, blobs: set[str], names: set[str],
                         say: Callable[[str], None]) -> None:
    """Wait until no live collection announced any of ``blobs`` or ``names`` (call after
    writing the lease that names them: see the module's docs). Announcements of dead
    collectors are removed on the way."""
    told: set[str] = set()
    for attempt in itertools.count():
        pending = []
        for announced in announcements(io, root):
            if not announced.live():
                io.delete(announced.url)
            elif announced.touches(blobs, names):
                pending.append(announced)
        if not pending:
            return
        for announced in pending:
            if announced.url not in told:
                told.add(announced.url)
                say(f"waiting for a collection of unreferenced files by "
                    f"{announced.describe()} to end: it named files this snapshot shares")
        time.sleep(POLL_S[min(attempt, len(POLL_S) - 1)])
