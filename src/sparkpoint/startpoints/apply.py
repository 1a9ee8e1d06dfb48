"""Write resolved startpoints into a stopped job's checkpoint.

New file-source log entries are added first, then the last committed batch's offsets entry
is rewritten (one atomic rename) with the sources' new committed offsets. Spark reads that
entry on restart as what batch N consumed, so the next batch starts there; state, commits
and the sink are untouched (a startpoint moves input, it does not rewind state). Both steps
write the same bytes when repeated, so an apply cut off between them is finished by doing it
again.
"""

from __future__ import annotations

from sparkpoint.checkpoint.layout import Checkpoint
from sparkpoint.checkpoint.logs import OffsetLogEntry, SourceOffset
from sparkpoint.crash_points import crash_point
from sparkpoint.errors import PreconditionError
from sparkpoint.startpoints.resolve import Resolved
from sparkpoint.storage.location import replace_file, write_atomic


def require_applicable(checkpoint: Checkpoint, batch: int | None = None) -> int:
    """The committed batch N startpoints apply to: no batch in flight, and N as expected."""
    latest = checkpoint.require_latest_committed_batch()
    planned = checkpoint.uncommitted_batch()
    if planned is not None:
        raise PreconditionError(
            f"{checkpoint.root}: batch {planned} was planned but not "
            "committed; run the job to complete it before applying startpoints")
    if batch is not None and latest != batch:
        raise PreconditionError(
            f"{checkpoint.root}: startpoints were resolved against committed batch {batch}, "
            f"found batch {latest}; the checkpoint was run by something else meanwhile: clear "
            "the startpoints and set them again")
    return latest


def apply(checkpoint: Checkpoint, resolved: list[Resolved], batch: int) -> None:
    """Apply to the last committed batch, which must be ``batch``."""
    require_applicable(checkpoint, batch)
    for result in resolved:
        for name, data in result.log_files:
            write_atomic(checkpoint.root / "sources" / result.source / name, data)
    crash_point("startpoint.source_log_written")
    moved = {r.source: r.offset_after for r in resolved if r.moves_offset}
    if not moved:
        return
    path = checkpoint.root / "offsets" / str(batch)
    entry = checkpoint.offsets(batch)
    # Format v1 names sources by position ("0", "1", ...), v2 by name.
    keys = [s.name if s.name is not None else str(i) for i, s in enumerate(entry.sources)]
    sources = [SourceOffset(s.name, moved.get(key, s.offset))
               for key, s in zip(keys, entry.sources, strict=True)]
    if entry.version >= 2:  # a source with no offset yet gets its line
        sources += [SourceOffset(name, offset) for name, offset in moved.items()
                    if name not in keys]
    replace_file(path, OffsetLogEntry(entry.version, entry.metadata_text,
                                      tuple(sources)).to_bytes())
