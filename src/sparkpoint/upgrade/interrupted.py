"""What an interrupted start from a snapshot leaves beside the new job's checkpoint, and
how the next start rolls it back.

The new checkpoint is assembled in staging directories beside the target (``.checkpoint.*.tmp``)
and published by one rename; just before the rename an intent file records the new
checkpoint's query id, and the runner removes it once the job record is written. Sink log
entries the new job's output gets before it runs are named in the intent first. A process
killed on the way leaves, at most: staging directories, the intent, and a published
checkpoint that no job record owns. None of them has run a batch (the job record is written
before the query starts), and the snapshots they came from never change, so rolling back and
building again gives the same checkpoint: that is what the next start does (taking back the
sink log entries it wrote, newest first). A checkpoint
without a record is removed only when the intent proves this code built it (same query id);
any other is left alone and the name stays taken.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from sparkpoint.checkpoint.logs import QueryMetadata
from sparkpoint.checkpoint.sink_log import SINK_LOG_DIR
from sparkpoint.errors import CheckpointFormatError, CorruptRecordError
from sparkpoint.sinks.gaps import Gap, remove_filled
from sparkpoint.storage.fileio import join
from sparkpoint.storage.location import Location, StorePath, remove_tree
from sparkpoint.storage.records import read_record, remove_record, write_record

INTENT_SUFFIX = ".restoring"


class SinkFill(BaseModel):
    """Sink log entries a start gives the new job's output before it runs."""

    model_config = ConfigDict(extra="ignore")
    output: str
    entries: list[str]
    through: int


class RestoreIntent(BaseModel):
    """A start from a snapshot under way: the query id of the checkpoint it publishes, and
    the sink log entries it writes into the output."""

    model_config = ConfigDict(extra="ignore")
    query_id: str | None = None
    sink_log: SinkFill | None = None


def _read(target: Location) -> RestoreIntent | None:
    return read_record(intent_path(target), RestoreIntent,
                       "the record of an interrupted start from a snapshot",
                       "remove it, and the job's directory, to start the job again")


def staging_prefix(target: Location) -> str:
    """Names of the staging directories of ``target`` start with this (and end in .tmp)."""
    return f".{target.name}."


def intent_path(target: Location) -> Location:
    return target.parent / f"{target.name}{INTENT_SUFFIX}"


def _query_id(checkpoint: Location) -> str | None:
    path = checkpoint / "metadata"
    try:
        return QueryMetadata.parse(path.read_bytes(), str(path)).query_id
    except (OSError, CheckpointFormatError):
        return None


def record_intent(target: Location, staging: Path) -> None:
    """Before publishing ``staging`` at ``target``: remember which checkpoint it is."""
    write_record(intent_path(target), RestoreIntent(query_id=_query_id(staging)))


def record_sink_fill(target: Location, gap: Gap) -> None:
    """Before the new job's output gets the sink log entries it lacks: name them in the
    intent, so that a start cut off before its job record takes them back (a retry numbers
    its batches from the snapshot again, and would find them in its way)."""
    intent = _read(target) or RestoreIntent()
    write_record(intent_path(target), intent.model_copy(update={"sink_log": SinkFill(
        output=str(gap.output), entries=gap.names, through=gap.through)}))


def _take_back_sink_fill(target: Location) -> list[str]:
    """The sink log entries a cut-off start wrote, taken back; their locations."""
    try:
        fill = (_read(target) or RestoreIntent()).sink_log
    except CorruptRecordError:
        return []  # not a fill this version wrote: nothing of it is taken back
    if fill is None:
        return []
    return [join(fill.output, SINK_LOG_DIR, name)
            for name in remove_filled(fill.output, fill.entries, fill.through)]


def clear_intent(target: Location) -> None:
    """The job record now owns the published checkpoint."""
    remove_record(intent_path(target))


def _intended_query_id(target: Location) -> str | None:
    try:
        intent = _read(target)
    except CorruptRecordError:
        return None
    return intent.query_id if intent is not None else None


def is_own_orphan(target: Location) -> bool:
    """A published checkpoint that an interrupted start built and no job record owns yet
    (the caller checks the record). In a store the checkpoint's ``metadata`` is uploaded
    first: whatever part of it an upload left is recognised by it."""
    intended = _intended_query_id(target)
    return intended is not None and _query_id(target) == intended


def _staging_dirs(target: Location) -> list[Path]:
    # A checkpoint for a home in a store is built in local temporary space, never beside it.
    if isinstance(target, StorePath) or not target.parent.is_dir():
        return []
    prefix = staging_prefix(target)
    return sorted(p for p in target.parent.iterdir()
                  if p.name.startswith(prefix) and p.name.endswith(".tmp"))


def roll_back(target: Location, has_record: bool,
              echo: Callable[[str], None]) -> list[Location | str]:
    """Remove what an interrupted start left; return the removed paths.

    Call it holding the job's lock: staging directories of a live start must not vanish.
    With a job record the checkpoint is the job's own and is never touched.
    """
    removed: list[Location | str] = []
    for staging in _staging_dirs(target):
        shutil.rmtree(staging, ignore_errors=True)
        removed.append(staging)
    if not has_record and is_own_orphan(target):
        remove_tree(target)
        removed.append(target)
    intent = intent_path(target)
    if intent.exists() and not has_record:
        removed += _take_back_sink_fill(target)
        intent.unlink()
        removed.append(intent)
    if removed:
        echo("an earlier start from a snapshot was interrupted; rolled back: removed "
             + ", ".join(str(p) for p in removed) + "; building the checkpoint again")
    return removed


def recover(target: Location, has_record: bool, echo: Callable[[str], None]) -> bool:
    """A start whose job record was written but whose intent was not removed (cut off in
    between) completed: its intent goes. Without a record the start is rolled back by the
    next start from a snapshot (``roll_back``), never by another command. True when an
    intent was removed."""
    if not has_record or not intent_path(target).exists():
        return False
    clear_intent(target)
    echo(f"removed {intent_path(target)}, left by a start from a snapshot that completed")
    return True
