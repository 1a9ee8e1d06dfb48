"""A file sink's log (``<output>/_spark_metadata``) kept without holes.

Spark's readers and its sink need every entry of a file sink's log from its newest compaction
to its latest batch (``CompactibleFileStreamLog.allFiles`` and ``compact`` fail with
"``_spark_metadata/N doesn't exist``" and BATCH_METADATA_NOT_FOUND otherwise). Only a batch
that Spark runs through the sink writes an entry, so a batch committed in the checkpoint by
anything else leaves a hole as soon as Spark writes the next one:

- Spark's offline repartition (``OfflineStateRepartitionRunner``) commits batch N+1 from
  N's offsets and writes nothing to the sink;
- a start from a snapshot numbered past the output's latest batch (``--first-batch K``)
  commits batch K-1 without the batches in between;
- a new output directory has no log at all.

Before such a checkpoint runs, every batch id the output's log lacks up to the checkpoint's
batch gets the entry the sink would have written had the batch emitted no rows: ``v1`` alone,
or, at a compaction batch, ``<id>.compact`` repeating the files of the entries it folds in (as
``CompactibleFileStreamLog.compact`` does). Entries are written in order, each in one atomic
step that never replaces an entry (``SinkLog.create``), so a reader or a crash sees a log
without holes at every moment. The output may be a local directory or a URL on S3 or HDFS.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from sparkpoint.checkpoint.layout import Checkpoint
from sparkpoint.checkpoint.sink_log import (
    COMPACT_SUFFIX,
    SINK_LOG_VERSION,
    Location,
    SinkLog,
    batches_to_seed,
    entry_batch,
    entry_name,
    is_compaction_batch,
)
from sparkpoint.errors import CheckpointFormatError, OutputHasHistoryError


def derive_compact_interval(default: int, latest_compact: int) -> int:
    """``CompactibleFileStreamLog.deriveCompactInterval``: the interval that makes the one
    compaction batch seen a compaction batch, as close to ``default`` as it can."""
    if latest_compact + 1 <= default:
        return latest_compact + 1
    if default < (latest_compact + 1) // 2:
        n = latest_compact + 1
        return next((i for i in range(default, n // 2 + 1) if n % i == 0), n)
    return latest_compact + 1


def _interval(entries: dict[int, str], default: int) -> int:
    compacts = sorted((b for b, name in entries.items() if name.endswith(COMPACT_SUFFIX)),
                      reverse=True)
    if len(compacts) >= 2:
        return compacts[0] - compacts[1]
    if len(compacts) == 1:
        return derive_compact_interval(default, compacts[0])
    return default


def compact_interval(output: Location, default: int) -> int:
    """The interval Spark's sink uses on this log (``CompactibleFileStreamLog.compactInterval``):
    the distance of the two newest ``.compact`` entries, else derived from the one there is,
    else the configured default."""
    return _interval(SinkLog(output).entries(), default)


@dataclass(frozen=True)
class Gap:
    """The entries ``output`` lacks up to ``through``: batch ids and file names, in order."""

    output: str
    through: int
    interval: int
    batches: tuple[int, ...]

    @property
    def names(self) -> list[str]:
        return [entry_name(b, self.interval) for b in self.batches]


def find_gap(output: Location, through: int, default_interval: int) -> Gap:
    """What the output's log lacks for a checkpoint whose latest committed batch is
    ``through``: nothing when the log reaches it; from the log's latest on otherwise; for a
    log with no entries, what Spark reads up to ``through`` (from its compaction window)."""
    log = SinkLog(output)
    entries = log.entries()
    interval = _interval(entries, default_interval)
    if not entries:
        batches = batches_to_seed(through, interval)
    else:
        batches = list(range(max(entries) + 1, through + 1))
    return Gap(log.output, through, interval, tuple(batches))


def _compaction_lines(log: SinkLog, batch: int, interval: int) -> list[str]:
    """The files a compaction entry at ``batch`` repeats: those of the entries
    ``max(0, batch - interval) .. batch - 1`` (``getValidBatchesBeforeCompactionBatch``).
    A missing one is left out: it is only missing in a fresh log's seeded window, where
    everything before it is empty too."""
    names = set(log.names())
    lines: list[str] = []
    for earlier in range(max(0, batch - interval), batch):
        name = entry_name(earlier, interval)
        if name in names:
            lines += log.lines(name)
    return lines


def fill_gap(gap: Gap, after_each: Callable[[], None] | None = None) -> list[str]:
    """Write the gap's entries in batch order, each in one atomic step that never replaces
    an entry; return their names.

    An entry that is already there (a fill cut off and done again) is kept: it is the same
    entry. ``after_each`` runs after each entry written (a crash point)."""
    log = SinkLog(gap.output)
    present = set(log.names())
    written = []
    for batch, name in zip(gap.batches, gap.names, strict=True):
        if name in present or not _create(log, batch, name, gap.interval):
            if adds_files(log, batch, name):
                raise OutputHasHistoryError(
                    f"{log.location(name)}: a job wrote batch {batch} into the output "
                    f"{gap.output} while its sink log was being brought up to the new "
                    "checkpoint's batch; the output has another writer: stop it, or give this "
                    "job a new, empty output directory")
        elif after_each is not None:
            after_each()
        written.append(name)
    return written


def _create(log: SinkLog, batch: int, name: str, interval: int) -> bool:
    lines = _compaction_lines(log, batch, interval) if is_compaction_batch(batch, interval) \
        else []
    return log.create(name, "\n".join([SINK_LOG_VERSION, *lines]).encode("utf-8"))


def adds_files(log: SinkLog, batch: int, name: str) -> bool:
    """The entry ``name`` of ``batch`` names a file no earlier entry names: a batch that wrote
    rows, never an entry a fill wrote (empty, or a compaction repeating earlier files only).
    Unknown earlier files (entries Spark's cleanup removed) count as added."""
    added = set(log.added(name))
    if not added:
        return False
    earlier = log.files_up_to(batch - 1)
    return earlier is None or not added <= earlier


def remove_filled(output: Location, names: list[str], through: int) -> list[str]:
    """Take back the entries a fill wrote, newest first, so the log stays without holes at
    every step; nothing is removed once the log has moved past ``through`` (a job ran into
    the output since, and the entries are part of its history), and an entry that names
    files of its own is a batch another job wrote in its place: it and everything below it
    stay. Returns the names removed."""
    log = SinkLog(output)
    listed = log.names()
    entries = {b: n for n in listed if (b := entry_batch(n)) is not None}
    if not entries or max(entries) > through:
        return []
    removed = []
    for name in sorted(names, key=lambda n: int(n.removesuffix(COMPACT_SUFFIX)), reverse=True):
        if name not in listed:
            continue
        if adds_files(log, int(name.removesuffix(COMPACT_SUFFIX)), name):
            break
        log.remove(name, listed)
        removed.append(name)
    return removed


def is_repartition_batch(checkpoint: Checkpoint, batch: int) -> bool:
    """``OfflineStateRepartitionUtils.isRepartitionBatch``: Spark's offline repartition batch
    is the one whose recorded shuffle partition count differs from the batch before it."""
    if batch <= 0:
        return False
    try:
        now, before = checkpoint.state_partitions(batch), checkpoint.state_partitions(batch - 1)
    except CheckpointFormatError:
        return False  # purged or unreadable: not something to fill on a guess
    return now is not None and before is not None and now != before
