"""Choosing the earlier batch that ``snapshot create --batch K`` / ``--at TIME`` exports."""

from __future__ import annotations

import datetime as dt

from sparkpoint.checkpoint.layout import Checkpoint
from sparkpoint.checkpoint.retained import (
    RetainedBatch,
    batch_times,
    describe_range,
    iso_utc,
    snapshottable_batches,
)
from sparkpoint.errors import BatchNotHeldError, UsageError

RETAIN_CONF = "spark.sql.streaming.minBatchesToRetain"


def parse_time(text: str) -> dt.datetime:
    """An ISO 8601 time; without a zone it is the local time of this machine."""
    try:
        moment = dt.datetime.fromisoformat(text.strip())
    except ValueError as exc:
        raise UsageError(
            f"--at: expected an ISO 8601 time such as 2026-11-23T14:05 or "
            f"2026-11-23T14:05:00+01:00, found {text!r}"
        ) from exc
    # astimezone() takes a naive time as local time.
    return moment.astimezone(dt.UTC)


def _refuse(job: str, checkpoint: Checkpoint, what: str,
            held: list[RetainedBatch] | None = None) -> BatchNotHeldError:
    if held is None:
        held = snapshottable_batches(checkpoint)
    return BatchNotHeldError(
        f"job '{job}': {what}; its checkpoint holds {describe_range(held)} (Spark keeps the "
        f"last {RETAIN_CONF} batches); nothing was created: pick a batch in that range "
        f"(listed by 'sparkpoint jobs show {job}')",
        held=[entry.to_dict() for entry in held],
    )


def require_held(job: str, checkpoint: Checkpoint, batch: int) -> int:
    """``batch`` when the checkpoint holds everything of it, else a BatchNotHeldError."""
    latest = checkpoint.require_latest_committed_batch()
    if batch > latest:
        raise _refuse(job, checkpoint, f"batch {batch} is not committed (the latest committed "
                                       f"batch is {latest})")
    if batch not in {entry.batch for entry in snapshottable_batches(checkpoint)}:
        raise _refuse(job, checkpoint, f"batch {batch} is no longer held completely")
    return batch


def batch_at(job: str, checkpoint: Checkpoint, moment: dt.datetime) -> int:
    """The newest batch whose time is at or before ``moment``, when the checkpoint still
    holds it.

    A batch's time is Spark's own (``batchTimestampMs``, see checkpoint/retained.py): the
    batch read what had arrived by then, so its state is the state of everything the job
    had taken in by ``moment``. An older batch is never taken in its place: any other would
    silently be a different moment.
    """
    checkpoint.require_latest_committed_batch()
    held = snapshottable_batches(checkpoint)
    times = {entry.batch: entry.batch_time for entry in held}
    # Committed batches not held completely still have a time when their offsets entry is
    # there (the oldest one, whose previous entry Spark cleaned up, mostly): one of them
    # may be the batch asked for, which is then refused rather than passed over.
    offsets = set(checkpoint.offset_ids())
    times.update(batch_times(checkpoint, [b for b in checkpoint.commit_ids()
                                          if b not in times and b in offsets]))
    by_then = [batch for batch, when in times.items() if when <= moment]
    if not by_then:
        raise _refuse(job, checkpoint, f"no batch it records has a time at or before "
                                       f"{iso_utc(moment)}", held)
    newest = max(by_then)
    if newest not in {entry.batch for entry in held}:
        raise _refuse(job, checkpoint, f"the newest batch with a time at or before "
                                       f"{iso_utc(moment)} is batch {newest}, which it no "
                                       "longer holds completely", held)
    return newest
