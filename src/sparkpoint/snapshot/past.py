"""Choosing the earlier batch that ``snapshot create --batch K`` / ``--at TIME`` exports."""

from __future__ import annotations

import datetime as dt

from sparkpoint.checkpoint.layout import Checkpoint
from sparkpoint.checkpoint.retained import (
    commit_times,
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


def _refuse(job: str, checkpoint: Checkpoint, what: str) -> BatchNotHeldError:
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
    """The newest batch committed at or before ``moment``, when the checkpoint still holds it.

    An older batch is never taken in its place: the state as of ``moment`` is that of the
    newest batch committed by then, and any other would silently be a different moment.
    """
    checkpoint.require_latest_committed_batch()
    times = commit_times(checkpoint)
    before = [batch for batch, when in times.items() if when <= moment]
    if not before:
        raise _refuse(job, checkpoint, f"no batch it holds was committed at or before "
                                       f"{iso_utc(moment)}")
    newest = max(before)
    if newest not in {entry.batch for entry in snapshottable_batches(checkpoint)}:
        raise _refuse(job, checkpoint, f"the newest batch committed at or before "
                                       f"{iso_utc(moment)} is batch {newest}, which it no "
                                       "longer holds completely")
    return newest
