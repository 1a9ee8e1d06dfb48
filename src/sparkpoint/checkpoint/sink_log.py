"""Spark's file sink log (``<output>/_spark_metadata``), read and written at the output's own
location: a local directory, or a URL of any store sparkpoint reaches (S3, HDFS), through that
store's FileIO (storage/fileio.py).

A job started from a snapshot resumes at batch N+1. Spark's file sink compacts its log every
``compactInterval`` batches (batch c with (c+1) % interval == 0) and then needs the entries of
batches max(0, c - interval) .. c-1, the first of them as ``<p>.compact`` when p is itself a
compaction batch; a fresh output directory has none of them and the query fails with
BATCH_METADATA_NOT_FOUND. Writing those entries empty is what the log would hold had the
sink existed but received no files.
"""

from __future__ import annotations

import json
import os

from sparkpoint.storage.fileio import FileIO, join, scheme_of
from sparkpoint.storage.local import to_path
from sparkpoint.storage.stores import file_io

SINK_LOG_DIR = "_spark_metadata"
SINK_LOG_VERSION = "v1"
DEFAULT_COMPACT_INTERVAL = 10
COMPACT_SUFFIX = ".compact"

# A file sink's output as a caller names it: a local path, or a URL.
Location = str | os.PathLike[str]

# Spark's setting of how often the file sink compacts its log.
COMPACT_INTERVAL_CONF = "spark.sql.streaming.fileSink.log.compactInterval"


def output_location(location: Location) -> str:
    """One spelling per output: a local one as its absolute path, a URL without its trailing
    slash (``s3a://bucket/out`` stays s3a: it is what Spark was given)."""
    text = os.fspath(location)
    if scheme_of(text) == "file":
        return str(to_path(text))
    return text.rstrip("/")


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


def entry_name(batch: int, interval: int) -> str:
    return f"{batch}{COMPACT_SUFFIX}" if is_compaction_batch(batch, interval) else str(batch)


def entry_batch(name: str) -> int | None:
    """The batch id an entry's file name stands for (``N`` or ``N.compact``); None for
    anything else (Hadoop's ``.N.crc`` siblings, temp files)."""
    stem = name.removesuffix(COMPACT_SUFFIX)
    return int(stem) if stem.isdigit() and not name.startswith(".") else None


class SinkLog:
    """The sink log of one output, at its location, through its store's FileIO."""

    def __init__(self, output: Location, io: FileIO | None = None) -> None:
        self.output = output_location(output)
        self.io = io if io is not None else file_io(self.output)
        self.directory = join(self.output, SINK_LOG_DIR)

    def location(self, name: str) -> str:
        """Where the entry (or sibling file) ``name`` of the log is."""
        return join(self.directory, name)

    def names(self) -> list[str]:
        """Every name in the log's directory (entries, checksums, temp files); [] without."""
        return self.io.list_names(self.directory)

    def entries(self) -> dict[int, str]:
        """The entries' file names by batch id; empty without a log."""
        found = {}
        for name in self.names():
            batch = entry_batch(name)
            if batch is not None:
                found[batch] = name
        return found

    def lines(self, name: str) -> list[str]:
        """The SinkFileStatus lines of an entry (after its version line)."""
        text = self.io.read_bytes(self.location(name)).decode("utf-8")
        return [line for line in text.split("\n")[1:] if line.strip()]

    def files(self, name: str) -> list[tuple[str, str]]:
        """(action, path) of every file an entry names, in its order."""
        found = []
        for line in self.lines(name):
            record = json.loads(line)
            found.append((str(record.get("action", "add")), str(record["path"])))
        return found

    def added(self, name: str) -> list[str]:
        return [path for action, path in self.files(name) if action == "add"]

    def create(self, name: str, data: bytes) -> bool:
        """Write an entry in one atomic step unless it exists; False when it did. Never over
        an entry Spark wrote: a single conditional PUT on S3, a temp file renamed without
        overwrite on HDFS, a complete temp file linked to the name locally."""
        return self.io.create_exclusive(self.location(name), data)

    def remove(self, name: str, names: list[str] | None = None) -> None:
        """Delete an entry and Hadoop's ``.<name>.crc`` beside it, when ``names`` (a listing
        of the log) has one: the local filesystem writes them, S3 and HDFS do not."""
        listed = self.names() if names is None else names
        if f".{name}.crc" in listed:
            self.io.delete(self.location(f".{name}.crc"))
        self.io.delete(self.location(name))

    def latest_batch(self) -> int | None:
        return max(self.entries(), default=None)

    def committed_files(self) -> list[str]:
        """Paths of the files the sink committed, as Spark's readers see them: the newest
        ``.compact`` entry folds in everything before it; later entries add to it."""
        entries = self.entries()
        compacts = [b for b, name in entries.items() if name.endswith(COMPACT_SUFFIX)]
        start = max(compacts, default=0)
        files: list[str] = []
        for batch in sorted(b for b in entries if b >= start):
            files += self.added(entries[batch])
        return files

    def files_up_to(self, batch: int) -> set[str] | None:
        """Paths of the files committed in batches 0..``batch``, or None when the log no longer
        holds what that takes (see ``files_up_to``)."""
        if batch < 0:
            return set()
        names = set(self.names())
        compact = next((b for b in range(batch, -1, -1)
                        if f"{b}{COMPACT_SUFFIX}" in names), None)
        files: set[str] = set()
        start = 0 if compact is None else compact
        for earlier in range(start, batch + 1):
            name = f"{earlier}{COMPACT_SUFFIX}" if earlier == compact else str(earlier)
            if name not in names:
                return None
            for action, file in self.files(name):
                if action == "add":
                    files.add(file)
                else:
                    files.discard(file)
        return files


def seed_empty_history(output: Location, last_batch: int, interval: int) -> list[str]:
    """Write empty sink log entries for a fresh output; return their names, in batch order.

    Nothing is written when the output already has a sink log: then the job continues an
    existing output and Spark's own log rules apply. (A job of the home gets its new output's
    history through sinks/history.py, which records it first so a cut-off one is finished.)
    """
    log = SinkLog(output)
    if any(not name.startswith(".") for name in log.names()):
        return []
    written = []
    for batch in batches_to_seed(last_batch, interval):
        name = entry_name(batch, interval)
        log.create(name, SINK_LOG_VERSION.encode())
        written.append(name)
    return written


def log_entries(output: Location) -> dict[int, str]:
    """The entries of the sink log of ``output`` by batch id (``N`` or ``N.compact``;
    Hadoop's hidden ``.N.crc`` files and temp files are not entries); empty without a log."""
    return SinkLog(output).entries()


def latest_batch(output: Location) -> int | None:
    """The newest batch id the sink log of ``output`` holds, or None without a log.

    Spark's file sink skips any batch whose id is at or below this one, so a job must not
    run such batch ids into this output.
    """
    return SinkLog(output).latest_batch()


def committed_files(output: Location) -> list[str]:
    """Paths of the files a file sink committed, as Spark's readers see them."""
    return SinkLog(output).committed_files()


def files_up_to(output: Location, batch: int) -> set[str] | None:
    """Paths of the files the sink committed in batches 0..``batch``, or None when its log no
    longer holds what that takes.

    Spark's sink log entries name files, not batches: a ``.compact`` entry repeats every file
    of the batches up to it. So the files up to ``batch`` are the newest compaction at or
    below it plus the plain entries after that compaction; those plain entries are deleted
    once a later compaction is old enough (``spark.sql.streaming.fileSink.log.cleanupDelay``).
    """
    return SinkLog(output).files_up_to(batch)
