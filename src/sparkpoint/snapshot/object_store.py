"""Snapshots on stores without hard links or atomic directory rename (S3, HDFS via WebHDFS).

Layout under the store's root URL::

    <name>/manifest.json          the commit record: the snapshot exists once this exists
    .files/<xx>/<xxh3>-<bytes>    every file of every snapshot, stored once per content
                                  (``.<id>`` added: a create's own copy, collection.py)
    .leases/<name>.<id>.json      a create in flight: the files it relies on
    .collections/<id>.json        a collection in flight: the files it means to delete

A create exports locally (links, no copy), writes its lease, uploads only the files the store
does not hold yet, then writes the manifest with a conditional put: of two creates of one
name (from two homes) exactly one wins, and a create cut off anywhere before that leaves
nothing listed. A delete removes the manifest first (the snapshot is gone from the listing
at once), then every file no remaining manifest or live lease refers to; the next create or
delete collects what a cut-off one left. Creates and collections meet by a handshake of
leases and announcements (snapshot/collection.py): neither waits, no clock is compared.
"""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import json
import os
import time
import uuid
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from sparkpoint.checkpoint.layout import Checkpoint
from sparkpoint.crash_points import crash_point
from sparkpoint.errors import (
    NameTakenError,
    SnapshotDamagedError,
    StateRetentionError,
    UnknownSnapshotError,
)
from sparkpoint.snapshot.collection import Collection, announced_blobs
from sparkpoint.snapshot.export import (
    COPY_REQUEST_LIMIT,
    InStoreCopies,
    JobInfo,
    discard,
    export_checkpoint,
)
from sparkpoint.snapshot.manifest import (
    CHECKPOINT_SUBDIR,
    MANIFEST_FILE,
    FileEntry,
    Manifest,
    content_mismatch,
    parse_manifest,
)
from sparkpoint.snapshot.store import Problem, SnapshotStore
from sparkpoint.storage.fileio import FileIO, join, progress_bars
from sparkpoint.storage.home import Home, name_problem, validate_name
from sparkpoint.storage.local import write_atomic
from sparkpoint.storage.location import Location, StorePath
from sparkpoint.storage.processes import ProcessIdentity

FILES_DIR = ".files"
LEASES_DIR = ".leases"
# A create's registration older than this on the store's clock is a create that died on
# another machine (on this machine a gone process says so at once); its files are collected
# like any other unreferenced file. The create itself publishes nothing once this long,
# less the margin, has passed on its own clock since it registered.
LEASE_EXPIRY = dt.timedelta(hours=12)
LEASE_MARGIN_S = 3600.0
_FETCHED_MARK = ".complete"


def blob_name(entry: FileEntry) -> str:
    """Where a file is stored: the name its manifest entry gives, else its content's."""
    return entry.blob if entry.blob is not None else _content_blob(entry)


def _content_blob(entry: FileEntry) -> str:
    """A file's content's name: its xxh3-128 when it passed through sparkpoint, its
    source's ETag when the store copied it (``etag/``: never one of the other)."""
    if entry.xxh3_128 is not None:
        return f"{entry.xxh3_128[:2]}/{entry.xxh3_128}-{entry.bytes}"
    return f"etag/{entry.etag}-{entry.bytes}"


class ObjectSnapshotStore(SnapshotStore):
    def __init__(self, location: str, io: FileIO, home: Home) -> None:
        self.location = location.rstrip("/")
        self.io = io
        self.home = home
        # Blob name -> the SHA-256 its store computed, as read in published manifests.
        self._known_sha256: dict[str, str] = {}

    # -- locations --------------------------------------------------------------------
    def _manifest_url(self, name: str) -> str:
        return join(self.location, validate_name(name, "snapshot"), MANIFEST_FILE)

    def _blob_url(self, entry: FileEntry) -> str:
        return join(self.location, FILES_DIR, blob_name(entry))

    # -- reading ----------------------------------------------------------------------
    def names(self) -> list[str]:
        return self._listed()[0]

    def _listed(self) -> tuple[list[str], list[str]]:
        """(published snapshots, names whose manifest is gone: a delete's leftovers)."""
        published, leftovers = [], []
        for name in self.io.list_names(self.location):
            if name_problem(name, "snapshot") is None:
                if self.io.is_file(join(self.location, name, MANIFEST_FILE)):
                    published.append(name)
                else:
                    leftovers.append(name)
        return sorted(published), leftovers

    def exists(self, name: str) -> bool:
        return self.io.is_file(self._manifest_url(name))

    def read(self, name: str) -> Manifest:
        url = self._manifest_url(name)
        try:
            data = self.io.read_bytes(url)
        except FileNotFoundError as exc:
            raise UnknownSnapshotError(
                f"snapshot '{name}' not found in {self.location}: it was deleted meanwhile "
                f"(no {url}); see 'sparkpoint snapshot list'"
            ) from exc
        return parse_manifest(data, url)

    def verify(self, name: str) -> list[Problem]:
        """Every file read from the store and checked against its size and xxh3-128
        checksum. Never the local copy a start fetched: a file gone from the store since
        must be found (the cache is never evidence)."""
        manifest = self.get(name)
        scratch = self.home.scratch_dir / "verify" / f"{os.getpid()}.{uuid.uuid4().hex[:8]}"
        try:
            self._fetch_checked(name, manifest, scratch)
        except SnapshotDamagedError as exc:
            if not self.exists(name):
                raise UnknownSnapshotError(
                    f"snapshot '{name}' not found in {self.location}: it was deleted while "
                    "it was verified; see 'sparkpoint snapshot list'") from exc
            return [Problem(self.location, exc.message)]
        finally:
            discard(scratch)
        return []

    def check_before_start(self, name: str) -> list[Problem]:
        """Every file of the snapshot in the store with its size, from one listing. Their
        content is checked as the start uses them: a fetched file by its checksum, a file
        copied inside the store by the SHA-256 the store computes of the copy."""
        manifest = self.get(name)
        held = self.io.walk_sizes(join(self.location, FILES_DIR))
        for entry in manifest.files:
            size = held.get(blob_name(entry))
            if size != entry.bytes:
                found = "nothing" if size is None else f"{size} bytes"
                return [Problem(self._blob_url(entry),
                                f"{entry.path}: expected {entry.bytes} bytes, found {found}")]
        return []

    def _fetch_checked(self, name: str, manifest: Manifest, target: Path) -> None:
        pairs = [(self._blob_url(entry), target / entry.path) for entry in manifest.files]
        try:
            self.io.get_files(pairs, show_progress=progress_bars(), description=f"fetch {name}")
        except FileNotFoundError as exc:
            raise SnapshotDamagedError(
                f"{self.location}: snapshot '{name}' lists a file the store does not hold "
                f"({exc}); the snapshot is damaged: delete it and create it again"
            ) from exc
        for entry in manifest.files:
            _check_fetched(target / entry.path, entry, self._blob_url(entry))

    def local_dir(self, name: str) -> Path:
        """Fetch the snapshot into the home's scratch space once (keyed by its manifest, so a
        recreated snapshot of the same name is fetched again), checking every file."""
        return self._fetched(name)

    def copies_into(self, target: Location) -> bool:
        return isinstance(target, StorePath) and target.io is self.io \
            and self.io.capabilities.server_side_copy

    def local_dir_without_state(self, name: str, every_state_file: bool = False
                                ) -> tuple[Path, dict[str, str]]:
        manifest = self.get(name)
        state = [entry for entry in manifest.files if is_state_data(entry.path)]
        if every_state_file and not all(_left(entry) for entry in state):
            left, suffix = _state_data, ".without-state-data"
        else:
            # The same files either way: one copy here serves both.
            left, suffix = _left, ".without-state"
        return self._fetched(name, left, suffix), {
            entry.path: self._blob_url(entry) for entry in state if left(entry)}

    def _fetched(self, name: str, left: Callable[[FileEntry], bool] | None = None,
                 suffix: str = "") -> Path:
        """The snapshot here, but for the files ``left`` names (in a directory named with
        ``suffix``: what it holds depends on them)."""
        manifest = self.get(name)
        key = manifest.created_at.replace(":", "").replace(".", "")
        target = self.home.scratch_dir / "snapshots" / f"{name}.{key}{suffix}"
        if (target / _FETCHED_MARK).is_file():
            return target
        partial = target.with_name(f"{target.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}")
        wanted = manifest if left is None else manifest.model_copy(update={
            "files": [e for e in manifest.files if not left(e)]})
        try:
            self._fetch_checked(name, wanted, partial)
            write_atomic(partial / MANIFEST_FILE, manifest.to_json().encode("utf-8"))
            write_atomic(partial / _FETCHED_MARK, b"")
            discard(target)
            partial.rename(target)
        finally:
            discard(partial)
        return target

    # -- writing ----------------------------------------------------------------------
    def create(self, name: str, checkpoint: Checkpoint, info: JobInfo,
               progress: Callable[[str], None] | None = None,
               batch: int | None = None) -> Manifest:
        validate_name(name, "snapshot")
        if self.exists(name):
            raise NameTakenError(
                f"snapshot '{name}' already exists in {self.location}; choose another name or "
                "delete it first with 'sparkpoint snapshot delete'"
            )
        say = progress or (lambda _msg: None)
        staging = self.home.scratch_dir / "export" / f"{os.getpid()}.{name}.{uuid.uuid4().hex[:8]}"
        staging.mkdir(parents=True)
        own = uuid.uuid4().hex[:12]  # names this create's own copies of announced content
        lease = join(self.location, LEASES_DIR, f"{name}.{own}.json")
        # State files of a checkpoint in this same store are copied by the store itself.
        in_store = InStoreCopies(self.io) if self.io.capabilities.server_side_copy else None
        try:
            manifest = export_checkpoint(checkpoint, staging, name, info, progress, batch,
                                         in_store)
            if in_store is not None:
                # A start copies state files inside the store and checks each copy by the
                # SHA-256 the store computes of it: the files passing through here get theirs.
                manifest = manifest.model_copy(update={"files": [
                    _with_sha256(entry, staging) for entry in manifest.files]})
            sources = {f"{CHECKPOINT_SUBDIR}/{rel}": found.url
                       for rel, found in (in_store.files.items() if in_store else ())}
            # Registered before deciding what to share, with every name a file may be
            # stored under (snapshot/collection.py); counted from before it is written.
            registered = time.monotonic()
            self.io.write_bytes(lease, _lease_record(name, manifest.files, own))
            crash_point("remote_snapshot.lease_written")
            announced = announced_blobs(self.io, self.location)
            held = self.collect_garbage()
            files = [_own_copy(entry, own) if blob_name(entry) in announced else entry
                     for entry in manifest.files]
            if any(entry.blob is not None for entry in files):
                say("a collection of unreferenced files had named files this snapshot "
                    "shares: storing copies of its own of them")
            # Identical files (same content) are stored once, also within one snapshot.
            new = {blob: entry for entry in files if (blob := blob_name(entry)) not in held}
            uploads = [(staging / entry.path, self._blob_url(entry)) for entry in new.values()
                       if entry.path not in sources]
            copies = [(sources[entry.path], self._blob_url(entry)) for entry in new.values()
                      if entry.path in sources]
            added = sum(entry.bytes for entry in new.values())
            inside = f" and copying {len(copies)} inside the store" if copies else ""
            say(f"uploading {len(uploads)}{inside} of {len(manifest.files)} files "
                f"({added} bytes new) to {self.location}")
            self.io.put_files(uploads, show_progress=progress_bars(),
                              description=f"snapshot {name}")
            copied = dict(zip((blob for _, blob in copies), self._copy_in_store(copies),
                              strict=True))
            crash_point("remote_snapshot.files_uploaded")
            manifest = manifest.model_copy(update={
                "added_bytes": added,
                "files": [self._with_store_checksum(entry, copied) for entry in files],
            })
            if time.monotonic() > registered + LEASE_EXPIRY.total_seconds() - LEASE_MARGIN_S:
                # Collections may treat the lease as a dead create's from now on.
                raise StateRetentionError(
                    f"snapshot '{name}': creating it took longer than its registration in "
                    f"{self.location} lasts ({LEASE_EXPIRY}); nothing was published: create "
                    "it again")
            if not self.io.create_exclusive(self._manifest_url(name),
                                            manifest.to_json().encode("utf-8")):
                raise NameTakenError(
                    f"snapshot '{name}' was created in {self.location} by another process "
                    "meanwhile; choose another name"
                )
            crash_point("remote_snapshot.published")
            self.io.delete(lease)
        finally:
            discard(staging)
        return manifest

    def _copy_in_store(self, copies: list[tuple[str, str]]) -> list[str]:
        """Copy a checkpoint's files to blobs inside the store; their SHA-256 as computed
        there. A source gone since the listing was deleted by the running job's cleanup."""
        try:
            return self.io.copy_within(copies)
        except FileNotFoundError as exc:
            raise StateRetentionError(
                f"{self.location}: a state file of the job was deleted while the snapshot "
                f"was copied ({exc}): the job commits batches faster than the copy and keeps "
                "only spark.sql.streaming.minBatchesToRetain of them; nothing was published: "
                "create the snapshot again, or with --cancel") from exc

    def _with_store_checksum(self, entry: FileEntry, copied: dict[str, str]) -> FileEntry:
        """A file copied inside the store with the SHA-256 the store computed of its blob:
        from this copy, else from a published snapshot that holds the same blob, else asked
        of the store."""
        if entry.xxh3_128 is not None or entry.sha256 is not None:
            return entry
        blob = self._blob_url(entry)
        sha256 = copied.get(blob) or self._known_sha256.get(blob_name(entry)) \
            or self.io.stored_sha256(blob)
        if sha256 is None:
            raise SnapshotDamagedError(
                f"{blob}: expected the store to keep the SHA-256 of a copied file, found "
                "none; the snapshot cannot be checked later: delete the blob's snapshots "
                "and create them again")
        return entry.model_copy(update={"sha256": sha256})

    def delete(self, name: str) -> None:
        self.get(name)
        self.io.delete(self._manifest_url(name))
        crash_point("remote_snapshot.delete_unlisted")
        self.collect_garbage()

    def collect_garbage(self) -> set[str]:
        """Remove files that no published snapshot and no live create refers to, leases of
        creates that are over, and the files of snapshot directories without a manifest
        (a delete's leftovers); return the files that remain (blob names).

        Safe against creates and deletes running meanwhile, anywhere:
        - Leases are listed before manifests, and a create writes its manifest before it
          removes its lease: a create is seen by one listing or the other.
        - What it would delete is announced first, then the leases are listed again, and
          only what no lease names is deleted: a create whose lease came too late for that
          listing finds the announcement and stores no file of its own under a name the
          announcement holds (snapshot/collection.py).
        - In a directory without a manifest only the files listed are removed, never a
          manifest, and the directory itself only when empty: a snapshot published there
          meanwhile stays whole.
        """
        blobs = self.io.walk_sizes(join(self.location, FILES_DIR))
        published, _ = self._listed()
        referenced = {blob_name(entry) for name in published
                      for entry in self._files_of(name)}
        live, creating = self._creates()
        # Published after the first listing, by a create whose lease was gone by the second.
        published, leftovers = self._listed_since(published, referenced)
        garbage = {blob for blob in blobs if not _kept(blob, referenced | live)}
        doomed = self._leftover_files([name for name in leftovers if name not in creating])
        if not garbage and not doomed:
            return set(blobs)
        crash_point("remote_snapshot.collection_planned")
        collection = Collection(self.io, self.location, garbage, doomed)
        deleted: set[str] = set()
        try:
            crash_point("remote_snapshot.collection_announced")
            # The handshake's second read: a create registered before the announcement.
            live, creating = self._creates()
            _, leftovers = self._listed_since(published, referenced)
            kept = referenced | live
            for blob in sorted(garbage):
                if _kept(blob, kept):
                    continue
                if not collection.may_delete():
                    break  # past its length: a collector frozen that long stops here
                crash_point("remote_snapshot.collection_deleting")
                self.io.delete(join(self.location, FILES_DIR, blob))
                deleted.add(blob)
            still_left = set(leftovers) - creating
            for url in sorted(doomed):
                if _snapshot_of(self.location, url) in still_left and collection.may_delete():
                    self.io.delete(url)
            for name in sorted(still_left):
                self.io.remove_empty_dir(join(self.location, name))
        finally:
            collection.end()
        return set(blobs) - deleted

    def _leftover_files(self, names: list[str]) -> set[str]:
        """The files in directories of snapshots without a manifest (never a manifest)."""
        found: set[str] = set()
        for name in names:
            directory = join(self.location, name)
            found |= {join(directory, rel) for rel in self.io.walk_sizes(directory)
                      if rel != MANIFEST_FILE}
        return found

    def _creates(self) -> tuple[set[str], set[str]]:
        """The files and snapshot names of creates in flight; leases of creates that are
        over (their process provably gone, or older than LEASE_EXPIRY on the store's clock)
        removed."""
        live: set[str] = set()
        creating: set[str] = set()
        directory = join(self.location, LEASES_DIR)
        listing = self.io.stamped_listing(directory)
        for lease_name in sorted(listing.files):
            url = join(directory, lease_name)
            try:
                record = json.loads(self.io.read_bytes(url))
            except (FileNotFoundError, ValueError):
                continue
            if _lease_over(record, listing.age(lease_name)):
                self.io.delete(url)
            else:
                live.update(record.get("blobs", []))
                creating.add(str(record.get("name") or lease_name.split(".", 1)[0]))
        return live, creating

    def _listed_since(self, published: list[str],
                      referenced: set[str]) -> tuple[list[str], list[str]]:
        """List again; the files of snapshots published since ``published`` are added to
        ``referenced``. Returns the published names and the leftovers, as _listed."""
        published_now, leftovers = self._listed()
        for name in set(published_now) - set(published):
            referenced |= {blob_name(entry) for entry in self._files_of(name)}
        return published_now, leftovers

    def _files_of(self, name: str) -> list[FileEntry]:
        """The files of a published snapshot; none when it was deleted meanwhile. The
        store's checksums of copied files are remembered for creates sharing them."""
        try:
            files = list(self.read(name).files)
        except UnknownSnapshotError:
            return []
        for entry in files:
            if entry.sha256 is not None:
                self._known_sha256[blob_name(entry)] = entry.sha256
        return files


def is_state_data(path: str) -> bool:
    """A snapshot's file of state data (``checkpoint/state/<op>/<partition>/...``, not in
    a ``_``-named metadata directory nor a partition's ``schema``): the bulk of its bytes,
    which a start copies unread."""
    parts = path.split("/")
    return (len(parts) >= 5 and parts[:2] == [CHECKPOINT_SUBDIR, "state"]
            and not any(part.startswith("_") for part in parts[2:])
            and parts[-1] != "schema")


def _state_data(entry: FileEntry) -> bool:
    return is_state_data(entry.path)


def _left(entry: FileEntry) -> bool:
    """A file a start leaves in the store, to be copied there (one copy request each), each
    copy checked against the SHA-256 the manifest records. A file without one (a snapshot of
    an older version) is fetched and checked by its xxh3 instead."""
    return is_state_data(entry.path) and entry.bytes <= COPY_REQUEST_LIMIT \
        and entry.sha256 is not None


def _kept(blob: str, kept: set[str]) -> bool:
    """Named by a manifest or a live create, or an upload in flight of such a blob."""
    return blob in kept or _uploading(blob) in kept


def _uploading(blob: str) -> str | None:
    """The blob a temporary file is being uploaded as (HDFS writes ``.<name>.<hex>.tmp``
    beside the target and renames it: storage/webhdfs.py), or None for any other file. A
    live create's upload in flight is its blob, not a leftover."""
    parent, _, name = blob.rpartition("/")
    if not (name.startswith(".") and name.endswith(".tmp")):
        return None
    stem = name[1:-len(".tmp")].rpartition(".")[0]
    return f"{parent}/{stem}" if parent else stem


def _lease_record(name: str, files: Iterable[FileEntry], own: str) -> bytes:
    """A create's registration: its process, its snapshot's name, and every name its files
    may be stored under (their content's, and its own copy's)."""
    names = {blob_name(entry) for entry in files}
    names |= {blob_name(_own_copy(entry, own)) for entry in files}
    record = {**ProcessIdentity.current().to_record(), "name": name, "blobs": sorted(names)}
    return json.dumps(record).encode("utf-8")


def _lease_over(record: dict[str, Any], age: float | None) -> bool:
    """A create's registration that protects nothing any more: its process is provably
    gone, or it is older than LEASE_EXPIRY on the store's clock (it publishes nothing after
    that: ObjectSnapshotStore.create)."""
    holder = ProcessIdentity.from_record(record)
    if holder is not None and holder.gone():
        return True
    return age is not None and age > LEASE_EXPIRY.total_seconds()


def _own_copy(entry: FileEntry, own: str) -> FileEntry:
    """The entry stored under a name of this create's own (see snapshot/collection.py)."""
    return entry.model_copy(update={"blob": f"{_content_blob(entry)}.{own}"})


def _with_sha256(entry: FileEntry, staging: Path) -> FileEntry:
    """A state file a start may copy inside the store, with its SHA-256 (base64), taken of
    the bytes exported here; other entries as they are."""
    if entry.sha256 is not None or entry.xxh3_128 is None or not is_state_data(entry.path) \
            or entry.bytes > COPY_REQUEST_LIMIT:
        return entry
    digest = hashlib.sha256()
    with open(staging / entry.path, "rb") as reader:
        while chunk := reader.read(1 << 20):
            digest.update(chunk)
    return entry.model_copy(update={"sha256": base64.b64encode(digest.digest()).decode()})


def _snapshot_of(root: str, url: str) -> str:
    """The snapshot directory a file of the store is in."""
    return url[len(root.rstrip("/")) + 1:].split("/", 1)[0]


def _check_fetched(path: Path, entry: FileEntry, url: str) -> None:
    mismatch = content_mismatch(path, entry)
    if mismatch is not None:
        raise SnapshotDamagedError(
            f"{url}: {entry.path}: {mismatch}; the stored file was modified or corrupted: "
            "delete the snapshot and create it again"
        )
