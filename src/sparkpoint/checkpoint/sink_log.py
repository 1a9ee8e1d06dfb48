"""Spark's file sink log (``<output>/_spark_metadata``), enough to give a fresh output
directory an empty history.

A job started from a snapshot resumes at batch N+1. Spark's file sink compacts its log every
``compactInterval`` batches (batch c with (c+1) % interval == 0) and then needs the entries of
batches max(0, c - interval) .. c-1, the first of them as ``<p>.compact`` when p is itself a
compaction batch; a fresh output directory has none of them and the query fails with
BATCH_METADATA_NOT_FOUND. Writing those entries empty is what the log would hold had the
sink existed but received no files.
"""

from __future__ import annotations

import json
from pathlib import Path

from sparkpoint.storage.local import write_atomic

SINK_LOG_DIR = "_spark_metadata"
SINK_LOG_VERSION = "v1"
DEFAULT_COMPACT_INTERVAL = 10
COMPACT_SUFFIX = ".compact"


def is_compaction_batch(batch: int, interval: int) -> bool:
    return (batch + 1) % interval == 0


def batches_to_seed(last_batch: int, interval: int) -> list[int]:
    """Batches <= ``last_batch`` that Spark will read when it next compacts or lists the log."""
    if last_batch < 0:
        return []
    first_compaction = last_batch + 1
    while not is_compaction_batch(first_compaction, interval):
        first_compaction += 1
    start = max(0, first_compaction - interval)
    return list(range(start, last_batch + 1))


def seed_empty_history(output_dir: Path, last_batch: int, interval: int) -> list[Path]:
    """Write empty sink log entries for a fresh output dir; return what was written.

    Nothing is written when the directory already has a sink log: then the job continues an
    existing output and Spark's own log rules apply.
    """
    log_dir = output_dir / SINK_LOG_DIR
    if log_dir.is_dir() and any(not p.name.startswith(".") for p in log_dir.iterdir()):
        return []
    written = []
    for batch in batches_to_seed(last_batch, interval):
        name = f"{batch}.compact" if is_compaction_batch(batch, interval) else str(batch)
        path = log_dir / name
        write_atomic(path, SINK_LOG_VERSION.encode())
        written.append(path)
    return written


def log_entries(output_dir: Path) -> dict[int, Path]:
    """The entries of the sink log of ``output_dir`` by batch id (``N`` or ``N.compact``;
    Hadoop's hidden ``.N.crc`` files and temp files are not entries); empty without a log."""
    log_dir = output_dir / SINK_LOG_DIR
    if not log_dir.is_dir():
        return {}
    entries = {}
    for path in log_dir.iterdir():
        stem = path.name.removesuffix(COMPACT_SUFFIX)
        if stem.isdigit() and not path.name.startswith(".") and path.is_file():
            entries[int(stem)] = path
    return entries


def entry_lines(entry: Path) -> list[str]:
    """The SinkFileStatus lines of a sink log entry (after its version line)."""
    return [line for line in entry.read_text("utf-8").split("\n")[1:] if line.strip()]


def entry_files(entry: Path) -> list[tuple[str, str]]:
    """(action, path) of every file a sink log entry names, in its order."""
    found = []
    for line in entry_lines(entry):
        record = json.loads(line)
        found.append((str(record.get("action", "add")), str(record["path"])))
    return found


def added_files(entry: Path) -> list[str]:
    return [path for action, path in entry_files(entry) if action == "add"]


def latest_batch(output_dir: Path) -> int | None:
    """The newest batch id the sink log of ``output_dir`` holds, or None without a log.

    Spark's file sink skips any batch whose id is at or below this one, so a job must not
    run such batch ids into this output.
    """
    return max(log_entries(output_dir), default=None)


def committed_files(output_dir: Path) -> list[str]:
    """Paths of the files a file sink committed, as Spark's readers see them.

    The newest ``.compact`` entry folds in everything before it; later entries add to it.
    """
    entries = log_entries(output_dir)
    compacts = [b for b, p in entries.items() if p.name.endswith(COMPACT_SUFFIX)]
    start = max(compacts, default=0)
    files: list[str] = []
    for batch in sorted(b for b in entries if b >= start):
        files += added_files(entries[batch])
    return files



def files_up_to(output_dir: Path, batch: int) -> set[str] | None:
    """Paths of the files the sink committed in batches 0..``batch``, or None when its log no
    longer holds what that takes.

    Spark's sink log entries name files, not batches: a ``.compact`` entry repeats every file
    of the batches up to it. So the files up to ``batch`` are the newest compaction at or
    below it plus the plain entries after that compaction; those plain entries are deleted
    once a later compaction is old enough (``spark.sql.streaming.fileSink.log.cleanupDelay``).
    """
    if batch < 0:
        return set()
    log_dir = output_dir / SINK_LOG_DIR
    compact = next((b for b in range(batch, -1, -1)
                    if (log_dir / f"{b}.compact").is_file()), None)
    files: set[str] = set()
    start = 0 if compact is None else compact
    for entry_batch in range(start, batch + 1):
        name = f"{entry_batch}.compact" if entry_batch == compact else str(entry_batch)
        path = log_dir / name
        if not path.is_file():
            return None
        for action, file in entry_files(path):
            if action == "add":
                files.add(file)
            else:
                files.discard(file)
    return files
