"""The synthetic drain batch on a job's checkpoint.

Spark has no drain. What works (measured, see the drain tests): after the last committed
batch N, write ``offsets/N+1`` with the same source offsets as N (no new input) and a
maximal watermark and batch timestamp, then let Spark run that pending batch. Every
event-time window, session and join buffer below the watermark is emitted and evicted, and
event- and processing-time timers fire. Left as written, the maximal watermark would stay
the job's watermark (Spark restores it from the last batch's offsets and commit entries) and
every later row would be dropped as late; so once the batch is committed its recorded
watermark is put back to the one the job had before the drain.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from sparkpoint.checkpoint.layout import Checkpoint
from sparkpoint.checkpoint.logs import (
    MAX_WATERMARK_MS,
    CommitLogEntry,
    OffsetLogEntry,
    compact_json,
)
from sparkpoint.storage.location import remove_checksum_sibling, replace_file, write_atomic


class DrainBatch(BaseModel):
    """The drain batch N+1 and the job's own watermark and clock before it: recorded in the
    home before the checkpoint changes, so an interrupted drain can be finished or undone."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    batch_id: int
    watermark_before_ms: int
    timestamp_before_ms: int


def plan_drain_batch(checkpoint: Checkpoint, last_committed: int) -> DrainBatch:
    """The drain batch that follows the committed batch N."""
    return DrainBatch(
        batch_id=last_committed + 1,
        watermark_before_ms=checkpoint.commit(last_committed).next_batch_watermark_ms,
        timestamp_before_ms=checkpoint.offsets(last_committed).batch_timestamp_ms,
    )


def write_drain_offsets(checkpoint: Checkpoint, drain: DrainBatch) -> None:
    """Append ``offsets/N+1``: batch N's offsets with a maximal watermark and clock."""
    previous = checkpoint.offsets(drain.batch_id - 1)
    metadata = previous.metadata
    metadata["batchWatermarkMs"] = MAX_WATERMARK_MS
    metadata["batchTimestampMs"] = MAX_WATERMARK_MS
    entry = OffsetLogEntry(previous.version, compact_json(metadata), previous.sources)
    write_atomic(checkpoint.root / "offsets" / str(drain.batch_id), entry.to_bytes())


def remove_unrun_drain_offsets(checkpoint: Checkpoint, drain: DrainBatch) -> bool:
    """Take back a drain batch that Spark did not commit, so a later run cannot pick it up;
    True when there was one to take back."""
    if (checkpoint.root / "commits" / str(drain.batch_id)).exists():
        return False
    path = checkpoint.root / "offsets" / str(drain.batch_id)
    remove_checksum_sibling(path)
    existed = path.exists()
    path.unlink(missing_ok=True)
    return existed


def restore_watermark(checkpoint: Checkpoint, drain: DrainBatch, now_ms: int) -> None:
    """Record the pre-drain watermark as the committed drain batch's watermark."""
    offsets_path = checkpoint.root / "offsets" / str(drain.batch_id)
    entry = checkpoint.offsets(drain.batch_id)
    metadata = entry.metadata
    metadata["batchWatermarkMs"] = drain.watermark_before_ms
    metadata["batchTimestampMs"] = max(now_ms, drain.timestamp_before_ms)
    replace_file(offsets_path, OffsetLogEntry(entry.version, compact_json(metadata),
                                          entry.sources).to_bytes())
    commit_path = checkpoint.root / "commits" / str(drain.batch_id)
    commit = checkpoint.commit(drain.batch_id)
    body = commit.metadata
    body["nextBatchWatermarkMs"] = drain.watermark_before_ms
    replace_file(commit_path, CommitLogEntry(commit.version, compact_json(body)).to_bytes())
