"""Replaying another checkpoint's batch: its offsets entry (and the file-source log entries
it points at) written as the next, uncommitted batch of a checkpoint.

Spark 4.3 re-runs an offsets entry that has no commit with exactly the offsets it holds, and
with the batch watermark and batch time it records, when the query restarts (the rehearsal
tests pin this). So a checkpoint restored from a snapshot of batch N, given the old job's
``offsets/K`` as its next entry, reads exactly the input the old job read in batch K, at the
same event-time watermark and clock. Only this checkpoint's files are written; the old
checkpoint is read.
"""

from __future__ import annotations

from collections.abc import Mapping

from sparkpoint.checkpoint.layout import Checkpoint
from sparkpoint.checkpoint.logs import OffsetLogEntry, SourceOffset, compact_json
from sparkpoint.checkpoint.source_log import file_source_log_offset
from sparkpoint.errors import PreconditionError
from sparkpoint.storage.location import Location, copy_file, numbered_files, write_atomic


def _source_log_ids(log_dir_entries: list[str]) -> list[int]:
    return sorted({int(name.split(".")[0]) for name in log_dir_entries
                   if name.split(".")[0].isdigit() and not name.startswith(".")})


def _source_log_entries(old: Checkpoint, old_name: str, have: list[int],
                        up_to: int) -> list[Location]:
    """The old file source's log entries after ``have`` (the ids a log holds already) up to
    ``up_to``; refused when Spark removed one (as it does after a later compaction)."""
    old_dir = old.root / "sources" / old_name
    found: list[Location] = []
    for log_id in range((have[-1] + 1) if have else 0, up_to + 1):
        entry = next((old_dir / name for name in (str(log_id), f"{log_id}.compact")
                      if (old_dir / name).is_file()), None)
        if entry is None:
            raise PreconditionError(
                f"{old_dir}: expected file-source log entry {log_id} (read by a batch to "
                "replay), found nothing; Spark removed it after a later compaction: rehearse "
                "from a newer snapshot")
        found.append(entry)
    return found


def require_source_log(old: Checkpoint, old_name: str, log_dir: Location,
                       up_to: int) -> None:
    """Refuse, from the files alone, a replay up to log entry ``up_to`` of the old file
    source whose entries after those in ``log_dir`` (the log the replay starts from) Spark
    no longer keeps."""
    have = _source_log_ids([p.name for p in log_dir.iterdir()]) if log_dir.is_dir() else []
    _source_log_entries(old, old_name, have, up_to)


def _copy_source_log(old: Checkpoint, old_name: str, new: Checkpoint, new_name: str,
                     up_to: int) -> None:
    """Copy the old file source's log entries the new log lacks, up to ``up_to``."""
    new_dir = new.root / "sources" / new_name
    have = _source_log_ids([p.name for p in new_dir.iterdir()]) if new_dir.is_dir() else []
    for entry in _source_log_entries(old, old_name, have, up_to):
        copy_file(entry, new_dir / entry.name)  # a copy: the old file stays untouched


def replay_batch(old: Checkpoint, batch: int, new: Checkpoint, as_batch: int,
                 sources: Mapping[str, str], added: Mapping[str, str] | None = None) -> None:
    """Write the old checkpoint's batch ``batch`` as this checkpoint's uncommitted batch
    ``as_batch``. ``sources`` maps each source of this checkpoint to its old name;
    ``added``: sources the old job did not have, each with the offset its batch ends at."""
    entry = old.offsets(batch)
    previous = new.offsets(as_batch - 1)
    old_offsets = entry.source_offsets()
    added = added or {}
    lines = []
    for line in previous.sources:
        name = line.name if line.name is not None else ""
        if name in added:
            lines.append(SourceOffset(line.name, added[name]))
            continue
        old_name = sources.get(name, name)
        if old_name not in old_offsets:
            raise PreconditionError(
                f"{old.root / 'offsets' / str(batch)}: expected an offset of source "
                f"'{old_name}', found sources {', '.join(old_offsets) or 'none'}; replay only "
                "sources the old job has")
        offset = old_offsets[old_name]
        log_offset = file_source_log_offset(offset)
        if log_offset is not None:
            _copy_source_log(old, old_name, new, name, log_offset)
        lines.append(SourceOffset(line.name, offset))
    # This job's own settings (state format, partitions) stay; the old batch's time and
    # watermark come along, so both versions process the batch at the same moment.
    metadata = previous.metadata
    metadata["batchWatermarkMs"] = entry.batch_watermark_ms
    metadata["batchTimestampMs"] = entry.batch_timestamp_ms
    replayed = OffsetLogEntry(previous.version, compact_json(metadata), tuple(lines))
    write_atomic(new.root / "offsets" / str(as_batch), replayed.to_bytes())


def replayable_batches(old: Checkpoint, after: int) -> list[int]:
    """Committed batches of the old checkpoint after ``after`` whose offsets it still holds."""
    committed = old.latest_committed_batch()
    if committed is None:
        return []
    held = set(numbered_files(old.root / "offsets"))
    return [k for k in range(after + 1, committed + 1) if k in held]
