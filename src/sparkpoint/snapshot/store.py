"""The snapshot store: what every store of snapshots offers, and the choice of one by the
capabilities of the filesystem it lives on.

- On a filesystem with hard links and atomic rename (local disk) a snapshot is a directory
  (manifest + runnable checkpoint) whose immutable state files are links into the job's
  checkpoint, published by renaming a staging directory (``linked_store``).
- On object stores and other remote filesystems a snapshot is a manifest whose files live
  content-addressed beside it, shared by every snapshot that holds the same bytes, and the
  manifest written by a conditional put is the commit record (``object_store``).

Both answer the same questions from manifests alone, so listing, showing and sharing
figures never start a JVM and never read state files.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from sparkpoint.checkpoint.layout import Checkpoint
from sparkpoint.errors import UnknownSnapshotError
from sparkpoint.snapshot.export import JobInfo
from sparkpoint.snapshot.manifest import CHECKPOINT_SUBDIR, Manifest
from sparkpoint.storage.home import Home, validate_name
from sparkpoint.storage.location import Location
from sparkpoint.storage.stores import file_io


@dataclass(frozen=True)
class Problem:
    path: str
    message: str


@dataclass(frozen=True)
class Sharing:
    """Bytes of a snapshot's files that other snapshots hold too, and the rest."""

    shared_bytes: int
    own_bytes: int


class SnapshotStore(ABC):
    location: str

    @abstractmethod
    def names(self) -> list[str]:
        """Published snapshots, sorted."""

    @abstractmethod
    def exists(self, name: str) -> bool: ...

    @abstractmethod
    def read(self, name: str) -> Manifest:
        """The manifest of a published snapshot (SnapshotDamagedError when unreadable)."""

    @abstractmethod
    def create(self, name: str, checkpoint: Checkpoint, info: JobInfo,
               progress: Callable[[str], None] | None = None,
               batch: int | None = None) -> Manifest:
        """Export the latest committed batch (or the earlier ``batch``) and publish it."""

    @abstractmethod
    def delete(self, name: str) -> None: ...

    @abstractmethod
    def verify(self, name: str) -> list[Problem]:
        """Every listed file present with its size and checksum."""

    @abstractmethod
    def local_dir(self, name: str) -> Path:
        """A local directory holding the snapshot as written (manifest + ``checkpoint/``),
        for the steps that read state files; never modified by its users."""

    def checkpoint_path(self, name: str) -> Path:
        return self.local_dir(name) / CHECKPOINT_SUBDIR

    def check_before_start(self, name: str) -> list[Problem]:
        """What a start checks before it uses a snapshot (``verify`` unless the store
        checks the files as the start reads or copies them)."""
        return self.verify(name)

    def logs_path(self, name: str) -> Path:
        """The snapshot's checkpoint for readers of its logs and metadata only (offsets,
        commits, sources, operator metadata): its state data files may be absent."""
        return self.local_dir_without_state(name, every_state_file=True)[0] / CHECKPOINT_SUBDIR

    def copies_into(self, target: Location) -> bool:
        """Whether this store copies its files to ``target`` without them passing through
        this process (both in one S3 store)."""
        return False

    def local_dir_without_state(self, name: str, every_state_file: bool = False
                                ) -> tuple[Path, dict[str, str]]:
        """Like ``local_dir``, but the state data files (the files of ``checkpoint/state``
        outside ``_``-named metadata directories) are left where they are: returns the
        directory and, for each file left, its path relative to it -> its URL, for a
        ``copy_within`` by the target's FileIO (where ``copies_into`` says so), or for
        Spark tasks that read them there (``every_state_file``: each one left, those a copy
        could not take too). A store whose files only this machine reads leaves none."""
        return self.local_dir(name), {}

    def get(self, name: str) -> Manifest:
        validate_name(name, "snapshot")
        if not self.exists(name):
            known = ", ".join(self.names()) or "none"
            raise UnknownSnapshotError(
                f"snapshot '{name}' not found in {self.location} (snapshots: {known}); "
                "see 'sparkpoint snapshot list'"
            )
        return self.read(name)

    def manifests(self, job: str | None = None) -> list[Manifest]:
        found = []
        for name in self.names():
            try:
                found.append(self.read(name))
            except UnknownSnapshotError:
                # Deleted (by another process) between the listing and the read: not listed.
                continue
        found = [m for m in found if job is None or m.job == job]
        return sorted(found, key=lambda m: (m.created_at, m.name))

    def sharing(self, name: str) -> Sharing:
        """How much of the snapshot other snapshots hold too (same content, stored once
        where the store shares files)."""
        manifest = self.get(name)
        others = {entry.content_key
                  for other in self.manifests() if other.name != name
                  for entry in other.files}
        shared = sum(e.bytes for e in manifest.files if e.content_key in others)
        return Sharing(shared, manifest.total_bytes - shared)


def open_snapshot_store(home: Home) -> SnapshotStore:
    """The store at ``--snapshots`` (else ``<home>/snapshots``), by what its filesystem can do."""
    from sparkpoint.snapshot.linked_store import LinkedSnapshotStore
    from sparkpoint.snapshot.object_store import ObjectSnapshotStore

    location = home.snapshots_location
    io = file_io(location)
    if io.capabilities.hard_links and io.capabilities.atomic_rename:
        return LinkedSnapshotStore(Path(io.path(location)))
    return ObjectSnapshotStore(location, io, home)
