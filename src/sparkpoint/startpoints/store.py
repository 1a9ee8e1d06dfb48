"""Pending startpoints: one JSON file per ``startpoint set``, under
``<home>/jobs/<job>/startpoints/<source>/<set id>.json``, read and written at the home's URL.

Kept apart from the checkpoint, so they can be written while the job runs, from any machine,
without the job's lease; the job's next start applies them to its checkpoint and removes
them (the job record keeps them for audit). One file per set is what makes that safe: the
start removes exactly the files it applied (their ids are in its intent), so a set made
while another machine applies startpoints is never removed unapplied; it stays pending for
the next start. The pending startpoints of a source are the files folded in set order: a
whole-source startpoint replaces those before it, a partition one that partition's.

The order is the store's, never a clock's: a set's id is the next number after every id the
source's directory holds, taken by a conditional create (of two machines setting at once,
one gets the number and the other the next). A set made after another one finished always
folds after it, whatever the machines' clocks say. An applied (or cleared) set leaves a
``<id>.done`` marker, written before its file is removed: the set is consumed from the
moment its marker exists, and the newest marker stays, so numbers are never taken twice.
A marker holds the SHA-256 of the set it consumed: a setter paused between its listing and
its create may create ``<id>.json`` after another set of that number was applied and removed;
finding the marker of another set over its file, it removes the file and takes a later
number (else no start would apply it, and the set would be lost).

A home written by an earlier version may hold ``<source>.json`` (a list); it is read as the
oldest set and removed with the first start that applies it.
"""

from __future__ import annotations

import hashlib
import json
from typing import Literal

from pydantic import BaseModel, ConfigDict
from pydantic import ValidationError as PydanticValidationError

from sparkpoint.errors import CorruptRecordError, PreconditionError
from sparkpoint.storage.fileio import FileIO, join
from sparkpoint.storage.home import Home, name_problem, validate_name
from sparkpoint.storage.stores import file_io

PositionKind = Literal["earliest", "latest", "timestamp", "offset", "group"]
WHOLE_SOURCE = "*"
LEGACY_ID = "legacy"
DONE_SUFFIX = ".done"
# Conditional creates a set tries before it gives up (each loses only to another set).
SET_ATTEMPTS = 20


def _number(set_id: str) -> int:
    """A set's place in the order: its id's number (an earlier version's ids began with the
    setting machine's clock in nanoseconds, always below the numbers taken after them)."""
    head = set_id.split("-", 1)[0]
    return int(head) if head.isdigit() else -1


class Startpoint(BaseModel):
    """Where one source (or one of its partitions) starts at the job's next start."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    source: str
    partition: str = WHOLE_SOURCE  # "*", "<p>" or "<topic>:<p>"
    kind: PositionKind
    value: str | None = None  # ISO 8601 time, or offset JSON
    set_at: str
    # The file it was read from (None for the list an earlier version wrote).
    set_id: str | None = None

    def describe(self) -> str:
        where = "" if self.partition == WHOLE_SOURCE else f" partition {self.partition}"
        what = self.kind if self.value is None else f"{self.kind} {self.value}"
        return f"{self.source}{where}: {what}"


class StartpointStore:
    def __init__(self, home: Home) -> None:
        self.home = home
        self.io: FileIO = file_io(home.location)

    def _url(self, job: str) -> str:
        return join(self.home.job_url(job), "startpoints")

    def _source_url(self, job: str, source: str) -> str:
        return join(self._url(job), validate_name(source, "source"))

    def _legacy_url(self, job: str, source: str) -> str:
        return join(self._url(job), f"{validate_name(source, 'source')}.json")

    def _read(self, url: str, source: str) -> list[Startpoint]:
        try:
            items = json.loads(self.io.read_bytes(url))
            if isinstance(items, dict):
                items = [items]
            if not isinstance(items, list):
                raise ValueError(f"expected a JSON object or list, found {type(items).__name__}")
            entries = [Startpoint.model_validate(item) for item in items]
        except (OSError, ValueError, RecursionError, PydanticValidationError) as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise CorruptRecordError(
                f"{url}: expected a pending startpoint of source '{source}' (JSON), found "
                f"unreadable content ({first}); remove them with 'sparkpoint startpoint "
                f"clear JOB {source}' and set them again") from exc
        if any(entry.source != source for entry in entries):
            raise CorruptRecordError(
                f"{url}: holds startpoints of another source than '{source}'; remove them "
                f"with 'sparkpoint startpoint clear JOB {source}' and set them again")
        return entries

    def _listed(self, job: str, source: str) -> tuple[list[str], list[str]]:
        """(pending set ids in set order, ids of consumed sets whose marker remains)."""
        names = self.io.list_names(self._source_url(job, source))
        done = {name[:-len(DONE_SUFFIX)] for name in names
                if name.endswith(DONE_SUFFIX) and not name.startswith(".")}
        pending = {name[:-len(".json")] for name in names
                   if name.endswith(".json") and not name.startswith(".")} - done
        order = lambda set_id: (_number(set_id), set_id)  # noqa: E731
        return sorted(pending, key=order), sorted(done, key=order)

    def _ids(self, job: str, source: str) -> list[str]:
        return self._listed(job, source)[0]

    def pending(self, job: str, source: str) -> tuple[list[Startpoint], list[str]]:
        """The source's pending startpoints, and the ids of the sets they fold (what a start
        that applies them removes)."""
        folded: list[Startpoint] = []
        consumed: list[str] = []
        legacy = self._legacy_url(job, source)
        if self.io.is_file(legacy):
            folded = self._read(legacy, source)
            consumed.append(LEGACY_ID)
        for set_id in self._ids(job, source):
            try:
                entries = self._read(join(self._source_url(job, source), f"{set_id}.json"),
                                     source)
            except CorruptRecordError as exc:
                if isinstance(exc.__cause__, FileNotFoundError):
                    continue  # applied and removed by a start meanwhile
                raise
            for entry in entries:
                folded = _folded(folded, entry.model_copy(update={"set_id": set_id}))
            consumed.append(set_id)
        return folded, consumed

    def get(self, job: str, source: str) -> list[Startpoint]:
        return self.pending(job, source)[0]

    def set(self, job: str, startpoint: Startpoint) -> Startpoint:
        """Store ``startpoint`` as a set of its own, after every set the store holds; a
        whole-source one replaces the source's others at the next start, a partition one
        that partition's. Returns it with its set id (what the job record's
        ``startpoints_applied`` names once applied)."""
        directory = self._source_url(job, startpoint.source)
        for _attempt in range(SET_ATTEMPTS):
            pending, done = self._listed(job, startpoint.source)
            taken = [_number(set_id) for set_id in pending + done]
            set_id = f"{max(taken, default=0) + 1:020d}"
            entry = startpoint.model_copy(update={"set_id": set_id})
            data = json.dumps(entry.model_dump(mode="json"), indent=2) + "\n"
            url = join(directory, f"{set_id}.json")
            if not self.io.create_exclusive(url, data.encode()):
                continue
            if self._consumed_before(directory, set_id, data.encode()):
                # A ghost: between the listing and the create, another set took this number
                # and a start consumed it (its marker stands, its file was removed). Under
                # that marker no start would ever apply this file: it goes, and the set
                # takes a later number.
                self.io.delete(url)
                continue
            return entry
        raise PreconditionError(
            f"job '{job}': startpoints of source '{startpoint.source}' are being set by other "
            f"processes faster than this one could take a place after them ({SET_ATTEMPTS} "
            "tries); set it again")

    def _consumed_before(self, directory: str, set_id: str, data: bytes) -> bool:
        """Whether ``set_id``'s marker stands for another set than the one of ``data`` (a
        start that applied this very set names its bytes' digest in the marker)."""
        try:
            marker = self.io.read_bytes(join(directory, f"{set_id}{DONE_SUFFIX}"))
        except FileNotFoundError:
            return False
        return marker.decode("ascii", "replace").strip() != _digest(data)

    def sources(self, job: str) -> list[str]:
        found = set()
        for name in self.io.list_names(self._url(job)):
            stem = name[:-len(".json")] if name.endswith(".json") else name
            if name_problem(stem, "source") is None:
                found.add(stem)
        return sorted(found)

    def all(self, job: str) -> dict[str, list[Startpoint]]:
        return {source: entries for source in self.sources(job)
                if (entries := self.get(job, source))}

    def all_with_ids(self, job: str) -> tuple[dict[str, list[Startpoint]], dict[str, list[str]]]:
        pending, consumed = {}, {}
        for source in self.sources(job):
            entries, ids = self.pending(job, source)
            if entries:
                pending[source], consumed[source] = entries, ids
        return pending, consumed

    def remove_applied(self, job: str, source: str, set_ids: list[str]) -> None:
        """Remove the sets a start applied (and only those): each one's marker first (it
        is consumed from then on), then its file; then the markers older than the newest."""
        directory = self._source_url(job, source)
        for set_id in set_ids:
            if set_id == LEGACY_ID:
                self.io.delete(self._legacy_url(job, source))
                continue
            url = join(directory, f"{set_id}.json")
            try:
                digest = _digest(self.io.read_bytes(url))
            except FileNotFoundError:
                digest = ""  # removed already: this is a cut-off removal done again
            self.io.create_exclusive(join(directory, f"{set_id}{DONE_SUFFIX}"),
                                     digest.encode("ascii"))
            self.io.delete(url)
        _pending, done = self._listed(job, source)
        for set_id in done[:-1]:
            self.io.delete(join(directory, f"{set_id}{DONE_SUFFIX}"))

    def clear_if_unchanged(self, job: str, source: str, applied: list[Startpoint]) -> None:
        """For an intent recorded by an earlier version (no set ids): clear what was
        applied, but keep startpoints set meanwhile for the next start."""
        if [s.model_copy(update={"set_id": None}) for s in self.get(job, source)] == applied:
            self.clear(job, source)

    def clear(self, job: str, source: str) -> bool:
        """Remove every pending startpoint of the source (the user's clear)."""
        ids = self._ids(job, source)
        legacy = self.io.is_file(self._legacy_url(job, source))
        self.remove_applied(job, source, ids + ([LEGACY_ID] if legacy else []))
        return bool(ids) or legacy


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _folded(entries: list[Startpoint], new: Startpoint) -> list[Startpoint]:
    kept = [] if new.partition == WHOLE_SOURCE else [
        s for s in entries if s.partition != new.partition]
    return [*kept, new]
