"""Snapshots on a local filesystem: one directory each (manifest + runnable checkpoint),
immutable state files hard-linked from the job's checkpoint (or copied across filesystems).

A snapshot is published by renaming a fully written staging directory (manifest included)
to its name, so a reader sees either nothing or a complete snapshot. A killed create leaves
only a staging directory, which ``list`` ignores and a later create removes.
"""

from __future__ import annotations

import errno
import os
import shutil
import uuid
from collections.abc import Callable
from pathlib import Path

from sparkpoint.checkpoint.layout import Checkpoint
from sparkpoint.crash_points import crash_point
from sparkpoint.errors import NameTakenError, SnapshotDamagedError
from sparkpoint.snapshot.export import JobInfo, discard, export_checkpoint
from sparkpoint.snapshot.manifest import (
    CHECKPOINT_SUBDIR,
    MANIFEST_FILE,
    Manifest,
    content_mismatch,
    read_manifest,
)
from sparkpoint.snapshot.store import Problem, SnapshotStore
from sparkpoint.storage.home import name_problem, validate_name
from sparkpoint.storage.local import fsync_dir, walk_files
from sparkpoint.storage.processes import OWNER_FILE, abandoned, claim

DELETED_PREFIX = "deleted"


class LinkedSnapshotStore(SnapshotStore):
    def __init__(self, root: Path) -> None:
        self.root = root
        self.location = str(root)
        # Inside the store so that publishing is a rename within one filesystem.
        self.staging_dir = root / ".staging"

    def path(self, name: str) -> Path:
        return self.root / validate_name(name, "snapshot")

    def local_dir(self, name: str) -> Path:
        return self.path(name)

    def exists(self, name: str) -> bool:
        return (self.path(name) / MANIFEST_FILE).is_file()

    def read(self, name: str) -> Manifest:
        return read_manifest(self.path(name))

    def _clean_abandoned_staging(self) -> None:
        """Remove staging dirs whose creating process is gone (killed mid-create) and
        snapshots renamed aside by a delete that was cut off before it removed them."""
        staging = self.staging_dir
        if not staging.is_dir():
            return
        for entry in staging.iterdir():
            owner, _, rest = entry.name.partition(".")
            pid_text = rest.split(".", 1)[0] if owner == DELETED_PREFIX else owner
            if pid_text.isdigit() and abandoned(entry, int(pid_text)):
                shutil.rmtree(entry, ignore_errors=True)

    def create(
        self,
        name: str,
        checkpoint: Checkpoint,
        info: JobInfo,
        progress: Callable[[str], None] | None = None,
        batch: int | None = None,
    ) -> Manifest:
        validate_name(name, "snapshot")
        if self.path(name).exists():
            raise NameTakenError(
                f"snapshot '{name}' already exists at {self.path(name)}; choose another name or "
                "delete it first with 'sparkpoint snapshot delete'"
            )
        self._clean_abandoned_staging()
        staging = self.staging_dir / f"{os.getpid()}.{name}.{uuid.uuid4().hex[:8]}"
        staging.mkdir(parents=True)
        claim(staging)  # cleaned up by another process only once this one is provably gone
        crash_point("snapshot.staging_created")
        try:
            manifest = export_checkpoint(checkpoint, staging, name, info, progress, batch)
            (staging / OWNER_FILE).unlink()  # not part of the snapshot it becomes
            fsync_dir(staging)
            crash_point("snapshot.manifest_written")
            try:
                # rename() refuses a non-empty target, which closes the race with another create.
                os.rename(staging, self.path(name))
            except OSError as exc:
                if exc.errno in (errno.ENOTEMPTY, errno.EEXIST):
                    raise NameTakenError(
                        f"snapshot '{name}' was created by another process meanwhile; "
                        "choose another name"
                    ) from exc
                raise
            crash_point("snapshot.published")
            fsync_dir(self.root)
        except BaseException:
            discard(staging)
            raise
        return manifest

    def names(self) -> list[str]:
        root = self.root
        if not root.is_dir():
            return []
        return sorted(
            entry.name
            for entry in root.iterdir()
            if name_problem(entry.name, "snapshot") is None
            and (entry / MANIFEST_FILE).is_file()
        )

    def delete(self, name: str) -> None:
        self.get(name)
        self._clean_abandoned_staging()
        target = self.path(name)
        # Rename first so that a half-deleted snapshot is never listed; the pid in the name
        # lets a later create or delete remove it if this process is cut off.
        doomed = (self.staging_dir
                  / f"{DELETED_PREFIX}.{os.getpid()}.{name}.{uuid.uuid4().hex[:8]}")
        doomed.parent.mkdir(parents=True, exist_ok=True)
        os.rename(target, doomed)
        claim(doomed)
        crash_point("snapshot.delete_renamed")
        shutil.rmtree(doomed, ignore_errors=True)

    def verify(self, name: str) -> list[Problem]:
        """Every listed file present with its size and checksum, and nothing unlisted."""
        validate_name(name, "snapshot")
        root = self.path(name)
        if not root.is_dir():
            self.get(name)
        try:
            manifest = read_manifest(root)
        except SnapshotDamagedError as exc:
            return [Problem(str(root / MANIFEST_FILE), exc.message)]
        problems = []
        listed = set()
        for entry in manifest.files:
            path = root / entry.path
            listed.add(entry.path)
            if not path.is_file():
                problems.append(Problem(str(path), "listed in the manifest, missing on disk"))
                continue
            size = path.stat().st_size
            if size != entry.bytes:
                problems.append(
                    Problem(str(path), f"expected {entry.bytes} bytes, found {size}")
                )
                continue
            mismatch = content_mismatch(path, entry)
            if mismatch is not None:
                problems.append(Problem(str(path), f"checksum mismatch: {mismatch}: the file "
                                        "was modified or corrupted"))
        for path in walk_files(root / CHECKPOINT_SUBDIR):
            rel = path.relative_to(root).as_posix()
            if rel not in listed and not path.name.startswith("."):
                problems.append(Problem(str(path), "not listed in the manifest"))
        batch = manifest.batch_id
        for required in (f"offsets/{batch}", f"commits/{batch}", "metadata"):
            if f"{CHECKPOINT_SUBDIR}/{required}" not in listed:
                problems.append(
                    Problem(str(root / CHECKPOINT_SUBDIR / required),
                            "required for a runnable checkpoint, not in the manifest")
                )
        return problems
