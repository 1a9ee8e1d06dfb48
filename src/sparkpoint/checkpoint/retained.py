"""Which committed batches a checkpoint still holds completely enough to snapshot.

Spark keeps the last ``spark.sql.streaming.minBatchesToRetain`` entries of its logs and
state versions and deletes older ones. Batch K can be rebuilt as a runnable checkpoint when
``offsets/K``, ``offsets/K-1`` (Spark reads it to know where batch K started), ``commits/K``
and state version K+1 of every store partition are all loadable: for the HDFS provider the
newest ``<s>.snapshot`` at or below K+1 and every delta after it (or every delta from 1),
for RocksDB the newest ``<v>.zip`` at or below K+1 and the changelogs after it (or every
changelog from 1).

Answered from directory listings only: no state file is opened, so ``jobs show`` stays fast
on jobs with many partitions.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from dataclasses import dataclass

from sparkpoint.checkpoint import hdfs_state
from sparkpoint.checkpoint.layout import Checkpoint
from sparkpoint.checkpoint.rocksdb_state import version_numbers
from sparkpoint.storage.location import Location, modified_times


@dataclass(frozen=True)
class RetainedBatch:
    batch: int
    committed_at: dt.datetime

    def to_dict(self) -> dict[str, object]:
        return {"batch": self.batch, "committed_at": iso_utc(self.committed_at)}


def iso_utc(moment: dt.datetime) -> str:
    return moment.astimezone(dt.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def commit_times(checkpoint: Checkpoint) -> dict[int, dt.datetime]:
    """When each batch still in the commit log committed.

    The commit entry holds no time of its own (only the next batch's watermark), and
    ``batchTimestampMs`` in the offsets entry is when the batch was planned, not when it
    finished. Spark writes ``commits/K`` once, by renaming a complete temp file, right after
    the batch's output and state are durable, so the file's modification time is the moment
    batch K committed. (A copy of a checkpoint that does not keep file times loses this.)
    """
    times = {}
    written = modified_times(checkpoint.root / "commits")
    for batch in checkpoint.commit_ids():
        when = written.get(str(batch))
        if when is None:
            continue  # cleaned up by a running job since the listing
        # Milliseconds, as shown: '--at' with a time 'jobs show' printed picks that batch.
        times[batch] = when.replace(microsecond=when.microsecond // 1000 * 1000)
    return times


def loadable_versions(versions: Iterable[int], bases: set[int], steps: set[int]) -> set[int]:
    """Versions v reachable as the newest base at or below v (0: the empty state) plus
    every step after it.

    One walk up from the newest base below the lowest version: v is reachable when it is
    a base, or when v-1 is and v's step exists (v-1 then has the same newest base).
    """
    wanted = set(versions)
    if not wanted:
        return set()
    first = max((b for b in bases if b <= min(wanted)), default=0)
    found = {first} & wanted
    reachable = True
    for version in range(first + 1, max(wanted) + 1):
        reachable = version in bases or (reachable and version in steps)
        if reachable and version in wanted:
            found.add(version)
    return found


def _partition_loadable(partition_dir: Location, versions: set[int], rocksdb: bool) -> set[int]:
    if not partition_dir.is_dir():
        return {v for v in versions if v == 0}
    if rocksdb:
        zips, changelogs = version_numbers(partition_dir)
        # Below the first zip, changelogs from 1 rebuild a version from the empty store.
        return loadable_versions(versions, zips, changelogs)
    deltas, snapshots = hdfs_state.state_file_versions(partition_dir)
    return loadable_versions(versions, snapshots, deltas)


def snapshottable_batches(checkpoint: Checkpoint) -> list[RetainedBatch]:
    """Committed batches the checkpoint holds everything of, oldest first, with the time
    each committed."""
    times = commit_times(checkpoint)
    offsets = set(checkpoint.offset_ids())
    candidates = [b for b in sorted(times)
                  if b in offsets and (b == 0 or b - 1 in offsets)]
    if not candidates:
        return []
    # The provider is fixed at a query's first batch and recorded in every offsets entry.
    rocksdb = checkpoint.is_rocksdb(candidates[-1])
    held: list[int] = []
    # Batches on either side of a repartition keep their state in different partitions.
    for partitions in sorted({checkpoint.state_partitions(b) for b in candidates},
                             key=lambda p: p or 0):
        same = [b for b in candidates if checkpoint.state_partitions(b) == partitions]
        versions = {b + 1 for b in same}
        for operator in checkpoint.operators(same[-1]):
            for store in operator.stores():
                for partition in range(operator.partitions):
                    pdir = store.partition_dir(operator.path, partition)
                    versions &= _partition_loadable(pdir, versions, rocksdb)
        held.extend(b for b in same if b + 1 in versions)
    return [RetainedBatch(b, times[b]) for b in sorted(held)]


def describe_range(held: list[RetainedBatch]) -> str:
    """``batches 4 (committed ...) to 9 (committed ...)`` or ``no batch``."""
    if not held:
        return "no complete batch"
    first, last = held[0], held[-1]
    if first.batch == last.batch:
        return f"only batch {first.batch} (committed {iso_utc(first.committed_at)})"
    return (f"batches {first.batch} (committed {iso_utc(first.committed_at)}) to {last.batch} "
            f"(committed {iso_utc(last.committed_at)})")
