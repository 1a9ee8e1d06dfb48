"""Which committed batches a checkpoint still holds completely enough to snapshot, and the
time of each.

Spark keeps the last ``spark.sql.streaming.minBatchesToRetain`` entries of its logs and
state versions and deletes older ones. Batch K can be rebuilt as a runnable checkpoint when
``offsets/K``, ``offsets/K-1`` (Spark reads it to know where batch K started), ``commits/K``
and state version K+1 of every store partition are all loadable: for the HDFS provider the
newest ``<s>.snapshot`` at or below K+1 and every delta after it (or every delta from 1),
for RocksDB the newest ``<v>.zip`` at or below K+1 and the changelogs after it (or every
changelog from 1).

A batch's time is the one Spark gave it: ``batchTimestampMs`` of its offsets entry, taken
on the driver's clock right after the sources' end offsets were fixed (so the batch reads
what had arrived by then), the time ``current_timestamp()`` returns in that batch and that
processing-time timeouts are judged against. It is recorded to the millisecond, once (a
batch run again after a failure keeps its entry), and travels with the checkpoint; a
file's modification time is the store's (S3 keeps seconds: batches committed in one second
could not be told apart) and is lost by a copy.

Answered from directory listings and the offsets entries of the batches considered: no
state file is opened, so ``jobs show`` stays fast on jobs with many partitions.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from dataclasses import dataclass

from sparkpoint.checkpoint.layout import SHUFFLE_PARTITIONS_CONF, Checkpoint
from sparkpoint.checkpoint.logs import OffsetLogEntry
from sparkpoint.checkpoint.providers import loadable_versions as loadable_versions

_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


@dataclass(frozen=True)
class RetainedBatch:
    batch: int
    batch_time: dt.datetime

    def to_dict(self) -> dict[str, object]:
        return {"batch": self.batch, "batch_time": iso_utc(self.batch_time)}


def iso_utc(moment: dt.datetime) -> str:
    return moment.astimezone(dt.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def batch_time(entry: OffsetLogEntry) -> dt.datetime:
    """Spark's time of the batch an offsets entry plans (see the module's docstring)."""
    try:
        return _EPOCH + dt.timedelta(milliseconds=entry.batch_timestamp_ms)
    except OverflowError:  # not a time Spark writes; kept in order, not refused
        return dt.datetime.max.replace(tzinfo=dt.UTC) if entry.batch_timestamp_ms > 0 \
            else dt.datetime.min.replace(tzinfo=dt.UTC)


def _offsets_entries(checkpoint: Checkpoint, batches: Iterable[int]) -> dict[int, OffsetLogEntry]:
    """The offsets entries of ``batches`` that are still there."""
    entries = {}
    for batch in batches:
        path = checkpoint.root / "offsets" / str(batch)
        try:
            data = path.read_bytes()  # one request in a store: no look before
        except FileNotFoundError:
            continue  # cleaned up by a running job since the listing
        entries[batch] = OffsetLogEntry.parse(data, str(path))
    return entries


def batch_times(checkpoint: Checkpoint, batches: Iterable[int]) -> dict[int, dt.datetime]:
    """The time of each of ``batches`` whose offsets entry is still there."""
    return {batch: batch_time(entry)
            for batch, entry in _offsets_entries(checkpoint, batches).items()}


def snapshottable_batches(checkpoint: Checkpoint) -> list[RetainedBatch]:
    """Committed batches the checkpoint holds everything of, oldest first, with their time."""
    offsets = set(checkpoint.offset_ids())
    listed = [b for b in checkpoint.commit_ids()
              if b in offsets and (b == 0 or b - 1 in offsets)]
    entries = _offsets_entries(checkpoint, listed)
    candidates = [b for b in listed if b in entries]
    if not candidates:
        return []
    # The provider is fixed at a query's first batch and recorded in every offsets entry.
    provider = checkpoint.state_provider(candidates[-1])

    def partitions_of(batch: int) -> int:
        value = entries[batch].conf.get(SHUFFLE_PARTITIONS_CONF)
        return int(value) if value is not None else 0

    held: list[int] = []
    # Batches on either side of a repartition keep their state in different partitions.
    for partitions in sorted({partitions_of(b) for b in candidates}):
        same = [b for b in candidates if partitions_of(b) == partitions]
        versions = {b + 1 for b in same}
        for operator in checkpoint.operators(same[-1]):
            for store in operator.stores():
                for partition in range(operator.partitions):
                    pdir = store.partition_dir(operator.path, partition)
                    versions &= provider.loadable(pdir, versions)
        held.extend(b for b in same if b + 1 in versions)
    return [RetainedBatch(b, batch_time(entries[b])) for b in sorted(held)]


def describe_range(held: list[RetainedBatch]) -> str:
    """``batches 4 (time ...) to 9 (time ...)`` or ``no complete batch``."""
    if not held:
        return "no complete batch"
    first, last = held[0], held[-1]
    if first.batch == last.batch:
        return f"only batch {first.batch} (time {iso_utc(first.batch_time)})"
    return (f"batches {first.batch} (time {iso_utc(first.batch_time)}) to {last.batch} "
            f"(time {iso_utc(last.batch_time)})")
