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
``CompactibleFileStreamLog.compact`` does). Entries are written in order, one atomic rename
each, so a reader or a crash sees a log without holes at every moment.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from sparkpoint.checkpoint.layout import Checkpoint
from sparkpoint.checkpoint.sink_log import (
    COMPACT_SUFFIX,
    SINK_LOG_DIR,
    SINK_LOG_VERSION,
    added_files,
    batches_to_seed,
    entry_lines,
    files_up_to,
    is_compaction_batch,
    log_entries,
)
from sparkpoint.errors import CheckpointFormatError, OutputHasHistoryError
from sparkpoint.storage.local import write_atomic


def derive_compact_interval(default: int, latest_compact: int) -> int:
    """``CompactibleFileStreamLog.deriveCompactInterval``: the interval that makes the one
    compaction batch seen a compaction batch, as close to ``default`` as it can."""
    if latest_compact + 1 <= default:
        return latest_compact + 1
    if default < (latest_compact + 1) // 2:
        n = latest_compact + 1
        return next((i for i in range(default, n // 2 + 1) if n % i == 0), n)
    return latest_compact + 1


def compact_interval(output_dir: Path, default: int) -> int:
    """The interval Spark's sink uses on this log (``CompactibleFileStreamLog.compactInterval``):
    the distance of the two newest ``.compact`` entries, else derived from the one there is,
    else the configured default."""
    compacts = sorted((b for b, p in log_entries(output_dir).items()
                       if p.name.endswith(COMPACT_SUFFIX)), reverse=True)
    if len(compacts) >= 2:
        return compacts[0] - compacts[1]
    if len(compacts) == 1:
        return derive_compact_interval(default, compacts[0])
    return default


def entry_name(batch: int, interval: int) -> str:
    return f"{batch}{COMPACT_SUFFIX}" if is_compaction_batch(batch, interval) else str(batch)


@dataclass(frozen=True)
class Gap:
    """The entries ``output`` lacks up to ``through``: batch ids and file names, in order."""

    output: Path
    through: int
    interval: int
    batches: tuple[int, ...]

    @property
    def names(self) -> list[str]:
        return [entry_name(b, self.interval) for b in self.batches]


def find_gap(output_dir: Path, through: int, default_interval: int) -> Gap:
    """What the output's log lacks for a checkpoint whose latest committed batch is
    ``through``: nothing when the log reaches it; from the log's latest on otherwise; for a
    log with no entries, what Spark reads up to ``through`` (from its compaction window)."""
    interval = compact_interval(output_dir, default_interval)
    entries = log_entries(output_dir)
    if not entries:
        batches = batches_to_seed(through, interval)
    else:
        batches = list(range(max(entries) + 1, through + 1))
    return Gap(output_dir, through, interval, tuple(batches))


def _compaction_lines(log_dir: Path, batch: int, interval: int) -> list[str]:
    """The files a compaction entry at ``batch`` repeats: those of the entries
    ``max(0, batch - interval) .. batch - 1`` (``getValidBatchesBeforeCompactionBatch``).
    A missing one is left out: it is only missing in a fresh log's seeded window, where
    everything before it is empty too."""
    lines: list[str] = []
    for earlier in range(max(0, batch - interval), batch):
        path = log_dir / entry_name(earlier, interval)
        if path.is_file():
            lines += entry_lines(path)
    return lines


def fill_gap(gap: Gap, after_each: Callable[[], None] | None = None) -> list[Path]:
    """Write the gap's entries in batch order, each by one atomic rename; return them.

    An entry that is already there (a fill cut off and done again) is kept: it is the same
    entry. ``after_each`` runs after each entry written (a crash point)."""
    log_dir = gap.output / SINK_LOG_DIR
    log_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for batch, name in zip(gap.batches, gap.names, strict=True):
        path = log_dir / name
        if path.exists() and adds_files(gap.output, batch, path):
            raise OutputHasHistoryError(
                f"{path}: a job wrote batch {batch} into the output {gap.output} while its sink "
                "log was being brought up to the new checkpoint's batch; the output has "
                "another writer: stop it, or give this job a new, empty output directory")
        if not path.exists():
            lines = (_compaction_lines(log_dir, batch, gap.interval)
                     if is_compaction_batch(batch, gap.interval) else [])
            write_atomic(path, "\n".join([SINK_LOG_VERSION, *lines]).encode("utf-8"))
            if after_each is not None:
                after_each()
        written.append(path)
    return written


def adds_files(output_dir: Path, batch: int, entry: Path) -> bool:
    """The entry of ``batch`` names a file no earlier entry names: a batch that wrote rows,
    never an entry a fill wrote (empty, or a compaction repeating earlier files only).
    Unknown earlier files (entries Spark's cleanup removed) count as added."""
    added = set(added_files(entry))
    if not added:
        return False
    earlier = files_up_to(output_dir, batch - 1)
    return earlier is None or not added <= earlier


def remove_filled(output_dir: Path, names: list[str], through: int) -> list[Path]:
    """Take back the entries a fill wrote, newest first, so the log stays without holes at
    every step; nothing is removed once the log has moved past ``through`` (a job ran into
    the output since, and the entries are part of its history), and an entry that names
    files of its own is a batch another job wrote in its place: it and everything below it
    stay."""
    entries = log_entries(output_dir)
    if not entries or max(entries) > through:
        return []
    removed = []
    for name in sorted(names, key=lambda n: int(n.removesuffix(COMPACT_SUFFIX)), reverse=True):
        path = output_dir / SINK_LOG_DIR / name
        if path.is_file() and adds_files(output_dir, int(name.removesuffix(COMPACT_SUFFIX)),
                                         path):
            break
        if path.is_file():
            (path.parent / f".{name}.crc").unlink(missing_ok=True)
            path.unlink()
            removed.append(path)
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
