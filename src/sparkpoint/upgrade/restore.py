"""Build a fresh checkpoint for a new job from a snapshot (the snapshot is only read).

The new checkpoint keeps the snapshot's batch numbering (state version N+1 belongs to batch
N) and gets a new query id. Operators are matched by name; one whose Spark operator id moved
is copied to its new id with the id in its metadata patched, as Spark identifies state by id.
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from sparkpoint.checkpoint.logs import QueryMetadata
from sparkpoint.checkpoint.operators import OperatorMetadata
from sparkpoint.errors import NameTakenError, ValidationError
from sparkpoint.snapshot.manifest import CHECKPOINT_SUBDIR, Manifest
from sparkpoint.storage.local import fsync_dir, link_or_copy, write_atomic


@dataclass(frozen=True)
class OperatorMapping:
    """Snapshot operator name -> the new job's Spark operator id."""

    target_ids: Mapping[str, int]


def check_same_operators(
    manifest: Manifest, new_operators: Mapping[str, str], snapshot: str
) -> OperatorMapping:
    """Every operator of the new job must resume one of the snapshot, and vice versa.

    ``new_operators`` maps the new job's operator names to Spark operator names (kinds).
    """
    problems = []
    old = {op.name: op for op in manifest.operators}
    for name, spark_name in new_operators.items():
        if name not in old:
            problems.append(
                f"operator '{name}' of the new job has no state in snapshot '{snapshot}' "
                f"(it has: {', '.join(old) or 'none'})"
            )
        elif old[name].spark_operator_name != spark_name:
            problems.append(
                f"operator '{name}' is a {spark_name} in the new job but a "
                f"{old[name].spark_operator_name} in snapshot '{snapshot}'"
            )
    for name in old:
        if name not in new_operators:
            problems.append(
                f"operator '{name}' of snapshot '{snapshot}' is not in the new job"
            )
    if problems:
        raise ValidationError(
            f"the job does not match snapshot '{snapshot}': " + "; ".join(problems)
            + ". --from-snapshot continues an unchanged job; use a resume point for a changed one"
        )
    return OperatorMapping({})


def build_checkpoint(
    snapshot_dir: Path,
    manifest: Manifest,
    target: Path,
    operator_ids: Mapping[str, int],
) -> None:
    """Copy the snapshot's checkpoint to ``target`` (which must not exist), remapping ids."""
    if target.exists() and any(target.iterdir()):
        raise NameTakenError(
            f"{target}: a checkpoint already exists there; a job started from a snapshot needs "
            "a new job name"
        )
    source = snapshot_dir / CHECKPOINT_SUBDIR
    staging = target.parent / f".{target.name}.{uuid.uuid4().hex[:8]}.tmp"
    moved = {
        op.operator_id: operator_ids[op.name]
        for op in manifest.operators
        if op.name in operator_ids
    }
    try:
        for entry in manifest.files:
            rel = Path(entry.path).relative_to(CHECKPOINT_SUBDIR)
            parts = rel.parts
            if parts[0] == "state" and int(parts[1]) in moved:
                rel = Path("state", str(moved[int(parts[1])]), *parts[2:])
            # Links are safe both ways: Spark only adds, renames over and deletes files.
            link_or_copy(source / Path(entry.path).relative_to(CHECKPOINT_SUBDIR), staging / rel)
        for old_id, new_id in moved.items():
            if old_id == new_id:
                continue
            path = staging / "state" / str(new_id) / "_metadata" / "metadata"
            metadata = OperatorMetadata.parse(path.read_bytes(), str(path))
            write_atomic(path, metadata.with_operator_id(new_id).to_bytes())
        write_atomic(staging / "metadata", QueryMetadata.for_id(str(uuid.uuid4())).to_bytes())
        fsync_dir(staging)
        if target.exists():
            target.rmdir()
        os.rename(staging, target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
