"""Snapshots on stores without hard links or atomic directory rename (S3, HDFS via WebHDFS).

Layout under the store's root URL::

    <name>/manifest.json          the commit record: the snapshot exists once this exists
    .files/<xx>/<xxh3>-<bytes>    every file of every snapshot, stored once per content
    .leases/<name>.<id>.json      a create in flight: the files it relies on

A create exports locally (links, no copy), writes its lease, uploads only the files the store
does not hold yet, then writes the manifest with a conditional put: of two creates of one
name (from two homes) exactly one wins, and a create cut off anywhere before that leaves
nothing listed. A delete removes the manifest first (the snapshot is gone from the listing
at once), then every file no remaining manifest or live lease refers to; the next create or
delete collects what a cut-off one left.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from sparkpoint.checkpoint.layout import Checkpoint
from sparkpoint.crash_points import crash_point
from sparkpoint.errors import NameTakenError, SnapshotDamagedError
from sparkpoint.snapshot.export import JobInfo, discard, export_checkpoint
from sparkpoint.snapshot.manifest import MANIFEST_FILE, FileEntry, Manifest, parse_manifest
from sparkpoint.snapshot.store import Problem, SnapshotStore
from sparkpoint.storage.fileio import FileIO, join, progress_bars
from sparkpoint.storage.home import Home, name_problem, validate_name
from sparkpoint.storage.local import checksum_of, write_atomic
from sparkpoint.storage.processes import OTHER_HOST_EXPIRY, holder_record, live_holder

FILES_DIR = ".files"
LEASES_DIR = ".leases"
# A lease older than this is a create that died on another machine (on this machine a dead
# pid says so at once); its files are collected like any other unreferenced file.
LEASE_EXPIRY = OTHER_HOST_EXPIRY
_FETCHED_MARK = ".complete"


def blob_name(entry: FileEntry) -> str:
    return f"{entry.xxh3_128[:2]}/{entry.xxh3_128}-{entry.bytes}"


class ObjectSnapshotStore(SnapshotStore):
    def __init__(self, location: str, io: FileIO, home: Home) -> None:
        self.location = location.rstrip("/")
        self.io = io
        self.home = home

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
            raise SnapshotDamagedError(
                f"{url}: expected the snapshot manifest, found nothing; the snapshot was "
                "deleted meanwhile"
            ) from exc
        return parse_manifest(data, url)

    def verify(self, name: str) -> list[Problem]:
        """Every file fetched and checked against its size and xxh3-128 checksum."""
        self.get(name)
        try:
            self.local_dir(name)
        except SnapshotDamagedError as exc:
            return [Problem(self.location, exc.message)]
        return []

    def local_dir(self, name: str) -> Path:
        """Fetch the snapshot into the home's scratch space once (keyed by its manifest, so a
        recreated snapshot of the same name is fetched again), checking every file."""
        manifest = self.get(name)
        key = manifest.created_at.replace(":", "").replace(".", "")
        target = self.home.scratch_dir / "snapshots" / f"{name}.{key}"
        if (target / _FETCHED_MARK).is_file():
            return target
        partial = target.with_name(f"{target.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}")
        try:
            pairs = [(self._blob_url(entry), partial / entry.path) for entry in manifest.files]
            try:
                self.io.get_files(pairs, show_progress=progress_bars(), description=f"fetch {name}")
            except FileNotFoundError as exc:
                raise SnapshotDamagedError(
                    f"{self.location}: snapshot '{name}' lists a file the store does not hold "
                    f"({exc}); the snapshot is damaged: delete it and create it again"
                ) from exc
            for entry in manifest.files:
                _check_fetched(partial / entry.path, entry, self._blob_url(entry))
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
        held = self.collect_garbage()
        staging = self.home.scratch_dir / "export" / f"{os.getpid()}.{name}.{uuid.uuid4().hex[:8]}"
        staging.mkdir(parents=True)
        lease = join(self.location, LEASES_DIR, f"{name}.{uuid.uuid4().hex}.json")
        try:
            manifest = export_checkpoint(checkpoint, staging, name, info, progress, batch)
            self.io.write_bytes(lease, _lease_record(manifest.files))
            crash_point("remote_snapshot.lease_written")
            # Files a delete collects after the listing above are put back once the
            # manifest is published (_reupload_collected).
            # Identical files (same content) are stored once, also within one snapshot.
            new = {blob: entry for entry in manifest.files
                   if (blob := blob_name(entry)) not in held}
            uploads = [(staging / entry.path, self._blob_url(entry)) for entry in new.values()]
            added = sum(entry.bytes for entry in new.values())
            say(f"uploading {len(uploads)} of {len(manifest.files)} files "
                f"({added} bytes new) to {self.location}")
            self.io.put_files(uploads, show_progress=progress_bars(),
                              description=f"snapshot {name}")
            crash_point("remote_snapshot.files_uploaded")
            manifest = manifest.model_copy(update={"added_bytes": added})
            if not self.io.create_exclusive(self._manifest_url(name),
                                            manifest.to_json().encode("utf-8")):
                raise NameTakenError(
                    f"snapshot '{name}' was created in {self.location} by another process "
                    "meanwhile; choose another name"
                )
            crash_point("remote_snapshot.published")
            self._reupload_collected(manifest.files, staging)
            self.io.delete(lease)
        finally:
            discard(staging)
        return manifest

    def _reupload_collected(self, files: Iterable[FileEntry], staging: Path) -> None:
        """A delete that listed manifests before ours was published and leases before ours
        was written may have collected a file we found present: put such files back."""
        held = set(self.io.walk_sizes(join(self.location, FILES_DIR)))
        lost = {blob_name(e): e for e in files if blob_name(e) not in held}
        self.io.put_files([(staging / e.path, self._blob_url(e)) for e in lost.values()])

    def delete(self, name: str) -> None:
        self.get(name)
        self.io.delete(self._manifest_url(name))
        crash_point("remote_snapshot.delete_unlisted")
        self.collect_garbage()

    def collect_garbage(self) -> set[str]:
        """Remove files that no published snapshot and no live create refers to, and leases
        of creates that died; return the files that remain (blob names)."""
        live: set[str] = set()
        for lease_name in self.io.list_names(join(self.location, LEASES_DIR)):
            url = join(self.location, LEASES_DIR, lease_name)
            try:
                record = json.loads(self.io.read_bytes(url))
            except (FileNotFoundError, ValueError):
                continue
            if _lease_alive(record):
                live.update(record.get("blobs", []))
            else:
                self.io.delete(url)
        published, leftovers = self._listed()
        referenced = {blob_name(entry) for name in published
                      for entry in self.read(name).files}
        remaining = set()
        for blob in self.io.walk_sizes(join(self.location, FILES_DIR)):
            if blob not in referenced and blob not in live:
                self.io.delete(join(self.location, FILES_DIR, blob))
            else:
                remaining.add(blob)
        # A listed name whose manifest is gone is a delete's leftover directory marker.
        for name in leftovers:
            self.io.delete_tree(join(self.location, name))
        return remaining


def _lease_record(files: Iterable[FileEntry]) -> bytes:
    record = {**holder_record(), "blobs": sorted({blob_name(entry) for entry in files})}
    return json.dumps(record).encode("utf-8")


def _lease_alive(record: dict[str, Any]) -> bool:
    return live_holder(record, LEASE_EXPIRY) is not None


def _check_fetched(path: Path, entry: FileEntry, url: str) -> None:
    size, digest = checksum_of(path)
    if size != entry.bytes or digest != entry.xxh3_128:
        raise SnapshotDamagedError(
            f"{url}: expected {entry.bytes} bytes with xxh3-128 {entry.xxh3_128[:16]}... for "
            f"{entry.path}, found {size} bytes with {digest[:16]}...; the stored file was "
            "modified or corrupted: delete the snapshot and create it again"
        )
