"""Announcements of collections in a snapshot store on S3 or HDFS: how a delete's collection
and a create that shares files never break a snapshot, with no clock compared and no wait.

A collection removes files that no published manifest and no live create names. The danger
is a create that decides to share a file after the collection listed the creates, and a
delete of that file landing after the create published. Both sides therefore write first
and read second (the handshake of Dekker's mutual exclusion, on a store whose listings see
every write that finished before them, as S3 and HDFS's NameNode do):

- a create writes its lease (every name its files may be stored under: their content's, and
  one of its own for each), *then* reads the announcements;
- a collection writes its announcement (the exact files it means to delete), *then* lists
  the leases again and deletes only what no lease names.

Whichever writes second reads the other's write: either the collection sees the create's
lease and keeps its files, or the create sees the announcement and relies on no file it
names: it stores its own copy of such content under a name of its own, which that
collection never deletes, however long it is paused between a check and a delete.

Nothing here waits or compares clocks. A collection deletes only within
``SPARKPOINT_LEASE_SECONDS`` of announcing, on its own monotonic clock (a collector frozen
past it deletes nothing more); its announcement keeps creates off the files it names until it
ends, or its collector is provably gone (storage/processes.py), or it is older than
``ANNOUNCEMENT_EXPIRY`` on the store's clock. The one assumption: a delete request is not
held in flight for that long.
"""

from __future__ import annotations

import datetime as dt
import json
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass

from sparkpoint.storage.fileio import FileIO, join
from sparkpoint.storage.lease import lease_seconds
from sparkpoint.storage.processes import ProcessIdentity

COLLECTIONS_DIR = ".collections"
# An announcement whose collector cannot be seen from here is honoured this long, on the
# store's clock (a collector that died on another machine leaves its announcement behind).
ANNOUNCEMENT_EXPIRY = dt.timedelta(hours=12)


@dataclass(frozen=True)
class Announcement:
    """A collection in flight: what it may delete, by whom."""

    url: str
    collector: ProcessIdentity
    blobs: frozenset[str]
    age: float | None  # seconds on the store's clock; None when not told

    def over(self) -> bool:
        """It can delete nothing more: its collector is provably gone, or it is older than
        ANNOUNCEMENT_EXPIRY on the store's clock."""
        return self.collector.gone() or (
            self.age is not None and self.age > ANNOUNCEMENT_EXPIRY.total_seconds())

    def describe(self) -> str:
        return self.collector.describe()


def _parse(url: str, data: bytes, age: float | None) -> Announcement | None:
    try:
        raw = json.loads(data)
        collector = ProcessIdentity.from_record(raw)
        if collector is None:
            return None
        return Announcement(url=url, collector=collector,
                            blobs=frozenset(map(str, raw["blobs"])), age=age)
    except (ValueError, KeyError, TypeError, AttributeError):
        return None  # cut off while written: it announced nothing it could act on


def announcements(io: FileIO, root: str) -> list[Announcement]:
    """Every announcement in the store; one gone between listing and reading has ended."""
    directory = join(root, COLLECTIONS_DIR)
    listing = io.stamped_listing(directory)
    found = []
    for name in sorted(listing.files):
        url = join(directory, name)
        try:
            data = io.read_bytes(url)
        except FileNotFoundError:
            continue
        parsed = _parse(url, data, listing.age(name))
        if parsed is not None:
            found.append(parsed)
    return found


def announced_blobs(io: FileIO, root: str) -> set[str]:
    """The files that announced collections may still delete (read after writing the lease
    that names them: see the module's docs). Announcements that are over are removed on the
    way."""
    announced: set[str] = set()
    for announcement in announcements(io, root):
        if announcement.over():
            io.delete(announcement.url)
        else:
            announced |= announcement.blobs
    return announced


class Collection:
    """This process's announcement of what it is about to delete."""

    def __init__(self, io: FileIO, root: str, blobs: Iterable[str],
                 leftovers: Iterable[str]) -> None:
        self.io = io
        self.deadline = time.monotonic() + lease_seconds()
        self.url = join(root, COLLECTIONS_DIR, f"{uuid.uuid4().hex}.json")
        # The leftovers (files of snapshot directories without a manifest: a delete's, a
        # cut-off publish's temporary files) are named for whoever looks into a collection
        # that stopped; creates read only the blobs, the one thing they may share.
        record = {**ProcessIdentity.current().to_record(), "blobs": sorted(blobs),
                  "leftovers": sorted(leftovers)}
        io.write_bytes(self.url, json.dumps(record).encode("utf-8"))

    def may_delete(self) -> bool:
        """Still within its length, on this process's own clock: a collector frozen past it
        deletes nothing more (its files may be stored again meanwhile under their names:
        announced_blobs forgets an announcement only once it is over)."""
        return time.monotonic() < self.deadline

    def end(self) -> None:
        self.io.delete(self.url)
