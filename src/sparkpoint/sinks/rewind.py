"""Taking a file sink's output back to an earlier batch, so that a rollback of the state
takes the table back with it (``run --from-snapshot S --rewind-output``).

Spark reads a file sink's output through its log (``<output>/_spark_metadata``): the table
is the files the log names up to its newest entry (FileStreamSinkLog.allFiles: the newest
compaction at or below it plus the plain entries after it), and the sink skips every batch
id at or below that entry (FileStreamSink.addBatch). Rewinding to batch B therefore means:

- the log ends at B: the entries of batches B+1.. leave ``_spark_metadata`` (the compaction
  entries among them too; every entry up to B stays as Spark wrote it, so the newest
  compaction at or below B and the plain entries after it, which the log's next reader and
  Spark's next compaction need, are untouched). The new job then runs batch B+1 onward and
  the sink accepts them. With no compaction file left above B, Spark derives the same
  compact interval as before (CompactibleFileStreamLog.compactInterval).
- the data files those entries added and the entries up to B do not name leave the table.

Nothing is deleted: entries and files are renamed into
``<output>/_sparkpoint_rewound/<id>/``, a directory Spark's readers skip (names starting with
``_`` or ``.`` and without ``=`` are filtered out by HadoopFSUtils.shouldFilterOutPathName,
and a log-based read lists only logged files). The abandoned files keep their paths relative
to the output there, and the log entries go to ``_spark_metadata_abandoned/``, so
``spark.read.parquet(<that directory>)`` reads exactly the abandoned rows.

The steps: an intent (``_intent.json``, every rename to make) is written first; the log
entries are moved newest first, so at every moment the log is a prefix of batches that a
reader can read whole; then the data files; then the intent is renamed to ``_rewind.json``,
the record of what was done. A process cut off on the way leaves the intent: the next
command that runs a job into this output does the remaining renames (each one already done
is skipped), so the rewind is completed, never half applied.

On S3 a rename is a copy inside the store and a delete, on HDFS one WebHDFS rename: each
move is repeated safely (a source already gone is a move already made), so a cut-off rewind
is completed the same way everywhere. The intent becomes the record by a move too (on S3 a
cut-off one leaves both: the moves are done, and the next run makes it again). Reading what
a rewind left (``pending``, ``finished``) costs one listing.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Literal
from urllib.parse import unquote, urlparse

from pydantic import BaseModel, ConfigDict
from pydantic import ValidationError as PydanticValidationError

from sparkpoint.checkpoint.sink_log import SINK_LOG_DIR, Location, SinkLog, output_location
from sparkpoint.crash_points import crash_point
from sparkpoint.errors import CorruptRecordError, SinkRewindError
from sparkpoint.storage.fileio import FileIO, is_local, join, scheme_of
from sparkpoint.storage.local import fsync_dir
from sparkpoint.storage.stores import file_io

REWOUND_DIR = "_sparkpoint_rewound"
ABANDONED_LOG_DIR = "_spark_metadata_abandoned"
INTENT_FILE = "_intent.json"
RECORD_FILE = "_rewind.json"

Echo = Callable[[str], None]


class RewindPlan(BaseModel):
    """Every rename a rewind makes, decided before the first one."""

    model_config = ConfigDict(extra="forbid")
    format_version: Literal[1] = 1
    rewind_id: str
    output: str
    to_batch: int
    latest_batch: int
    # Names in _spark_metadata, newest batch first.
    log_entries: list[str]
    # Data files, relative to the output.
    files: list[str]
    reason: str
    recorded_at: str

    @property
    def directory(self) -> str:
        return join(self.output, REWOUND_DIR, self.rewind_id)

    def summary(self) -> str:
        return (f"rewound the output {self.output} to batch {self.to_batch}: the sink log "
                f"entries of batches {self.to_batch + 1}..{self.latest_batch} and their "
                f"{len(self.files)} data file(s) moved aside to {self.directory}")


def _relative_to_output(output: str, location: str) -> str:
    parsed = urlparse(location)
    if is_local(output):
        if parsed.scheme not in ("", "file"):
            raise SinkRewindError(
                f"{join(output, SINK_LOG_DIR)}: names {location}, not a local file like the "
                "output; its files cannot be moved aside under the output; write the new job "
                "to a new output directory instead; nothing was changed")
        path = Path(unquote(parsed.path))
        try:
            # Spark qualifies the path it was given; a symlink in it must not make it
            # "outside".
            relative = path.resolve().relative_to(Path(output).resolve()).as_posix()
        except ValueError:
            relative = None
    else:
        base = urlparse(output)
        inside = scheme_of(location) == scheme_of(output) and parsed.netloc == base.netloc \
            and unquote(parsed.path).startswith(unquote(base.path).rstrip("/") + "/")
        relative = unquote(parsed.path)[len(unquote(base.path).rstrip("/")) + 1:] \
            if inside else None
    if relative is None:
        raise SinkRewindError(
            f"{join(output, SINK_LOG_DIR)}: names {location}, outside the output {output} (was "
            "the output copied from elsewhere?); its files cannot be moved aside under the "
            "output; write the new job to a new output directory instead; nothing was "
            "changed") from None
    if relative.split("/")[:1] in ([SINK_LOG_DIR], [REWOUND_DIR]):
        raise SinkRewindError(
            f"{join(output, SINK_LOG_DIR)}: names {location} as a data file, expected files "
            "of the table only; the log was not written by Spark's file sink alone, so the "
            "output cannot be taken back: write the new job to a new output directory "
            "instead; nothing was changed")
    return relative


def plan_rewind(output: Location, to_batch: int, reason: str) -> RewindPlan | None:
    """What rewinding ``output`` to ``to_batch`` moves; None when its log ends at or before
    that batch already. Reads only."""
    log = SinkLog(output)
    entries = log.entries()
    abandoned = sorted((b for b in entries if b > to_batch), reverse=True)
    if not abandoned:
        return None
    output = log.output
    kept = log.files_up_to(to_batch)
    if kept is None:
        raise SinkRewindError(
            f"{join(output, SINK_LOG_DIR)}: the sink log no longer holds the entries that tell "
            f"which files batch {to_batch} ended with (an entry is missing: Spark removes "
            "entries before an older compaction once spark.sql.streaming.minBatchesToRetain "
            "batches have passed and spark.sql.streaming.fileSink.log.cleanupDelay has "
            "elapsed, and a batch that wrote no entry leaves a hole); the output "
            f"cannot be taken back to batch {to_batch}; write the new job to a new output "
            "directory instead; nothing was changed")
    files: list[str] = []
    seen: set[str] = set()
    for batch in abandoned:
        for location in log.added(entries[batch]):
            if location in kept or location in seen:
                continue
            seen.add(location)
            files.append(_relative_to_output(output, location))
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    return RewindPlan(
        rewind_id=f"{stamp}-to-batch-{to_batch}-{uuid.uuid4().hex[:6]}", output=output,
        to_batch=to_batch, latest_batch=abandoned[0],
        log_entries=[entries[b] for b in abandoned], files=files, reason=reason,
        recorded_at=dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds"))


def _move(io: FileIO, source: str, target: str) -> bool:
    """Move a file; False when it was moved already (the step is repeated after a crash).
    Locally Hadoop's ``.<name>.crc`` sibling goes with it."""
    if not is_local(source):
        return io.move(source, target)
    src, dst = Path(io.path(source)), Path(io.path(target))
    crc = src.parent / f".{src.name}.crc"
    if crc.exists():
        dst.parent.mkdir(parents=True, exist_ok=True)
        os.replace(crc, dst.parent / crc.name)
    if not src.exists():
        return False
    dst.parent.mkdir(parents=True, exist_ok=True)
    os.replace(src, dst)
    return True


def _synced(io: FileIO, directory: str) -> None:
    """A local directory's entries made durable (stores make each request durable)."""
    if is_local(directory):
        fsync_dir(Path(io.path(directory)))


def _finish(plan: RewindPlan) -> None:
    """The moves after the intent, each skipped when done: log entries newest first, then
    data files, then the intent becomes the record."""
    io = file_io(plan.output)
    log_dir = join(plan.output, SINK_LOG_DIR)
    abandoned_log = join(plan.directory, ABANDONED_LOG_DIR)
    for n, name in enumerate(plan.log_entries):
        _move(io, join(log_dir, name), join(abandoned_log, name))
        _synced(io, log_dir)
        if n == 0:
            crash_point("rewind.log_entry_moved")
    crash_point("rewind.log_rewound")
    for n, relative in enumerate(plan.files):
        _move(io, join(plan.output, relative), join(plan.directory, relative))
        if n == 0:
            crash_point("rewind.file_moved")
    _synced(io, plan.output)
    crash_point("rewind.files_moved")
    # A rename locally and on HDFS; on S3 a copy then a delete, and a cut-off there leaves
    # both files: the intent is found again, every move is already made, and this is redone.
    io.move(join(plan.directory, INTENT_FILE), join(plan.directory, RECORD_FILE))
    _synced(io, plan.directory)


def rewind(plan: RewindPlan) -> None:
    """Record the intent, then make every move it lists."""
    text = json.dumps(plan.model_dump(mode="json"), indent=2) + "\n"
    io = file_io(plan.output)
    io.makedirs(plan.directory)
    io.write_bytes(join(plan.directory, INTENT_FILE), text.encode("utf-8"))
    _synced(io, join(plan.output, REWOUND_DIR))
    crash_point("rewind.intent_recorded")
    _finish(plan)


def pending(output: Location) -> list[RewindPlan]:
    """Rewinds of ``output`` that a cut-off process left unfinished, oldest first."""
    return _plans(output, INTENT_FILE)


def finished(output: Location) -> list[RewindPlan]:
    """Rewinds of ``output`` that were completed, oldest first."""
    return _plans(output, RECORD_FILE)


def _plans(output: Location, file_name: str) -> list[RewindPlan]:
    location = output_location(output)
    io = file_io(location)
    root = join(location, REWOUND_DIR)
    plans = []
    for rewind_id in io.list_names(root):
        intent = join(root, rewind_id, file_name)
        try:
            data = io.read_bytes(intent)
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            continue  # a rewind with the other kind of record (intent or record)
        try:
            plan = RewindPlan.model_validate(json.loads(data.decode("utf-8")))
        except (OSError, ValueError, PydanticValidationError) as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise CorruptRecordError(
                f"{intent}: expected the record of an interrupted rewind of the output, found "
                f"unreadable content ({first}); nothing was changed: compare the output's "
                f"{SINK_LOG_DIR} with the files beside the record, then remove it to go on"
            ) from exc
        plans.append(plan)
    return sorted(plans, key=lambda p: p.recorded_at)


def finish_pending(output: Location, echo: Echo) -> list[RewindPlan]:
    """Complete every rewind of ``output`` a cut-off process left; return them."""
    done = []
    for plan in pending(output):
        _finish(plan)
        echo(f"finished an interrupted rewind: {plan.summary()}")
        done.append(plan)
    return done
