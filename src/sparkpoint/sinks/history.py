"""A new, empty output for a job that has run batches: the empty history Spark's sink needs,
given in steps that a cut-off start finishes on the next one.

A job of the home that ran batches 0..N and is given a new output directory continues at
batch N+1; Spark's file sink then compacts its log at its next compaction batch from the
entries before it, which a new output lacks (BATCH_METADATA_NOT_FOUND). Before the query
starts, the output gets the entries a sink that received no files would hold: those Spark
reads from that compaction's window up to N (``sink_log.batches_to_seed``).

Those are several files. A start cut off among them leaves a log ending before the job's
batch, which the next start would take for another run's output and refuse, so the steps are:

1. the entries to write are recorded in ``<output>/_sparkpoint_seeding.json`` (Spark's
   readers skip names starting with ``_``, as for the rewind records beside it);
2. the entries are written in batch order, each in one atomic step (``sinks/gaps.fill_gap``);
3. the record is removed.

The next start of the same job finds a record left by step 1 or 2 and writes what is
missing (an entry already there is kept: it is the same empty entry), then goes on as if
the first start had finished. It works alike on a local directory, S3 and HDFS.
"""

from __future__ import annotations

import json
from typing import Literal

from pydantic import BaseModel, ConfigDict
from pydantic import ValidationError as PydanticValidationError

from sparkpoint.checkpoint.sink_log import output_location
from sparkpoint.crash_points import crash_point
from sparkpoint.errors import CorruptRecordError
from sparkpoint.sinks.gaps import Gap, fill_gap, find_gap
from sparkpoint.storage.fileio import join
from sparkpoint.storage.stores import file_io

SEEDING_FILE = "_sparkpoint_seeding.json"


class Seeding(BaseModel):
    """The empty history a start gives a new output, recorded before any entry is written."""

    model_config = ConfigDict(extra="forbid")
    format_version: Literal[1] = 1
    job: str
    through: int
    interval: int
    batches: list[int]

    def gap(self, output: str) -> Gap:
        return Gap(output, self.through, self.interval, tuple(self.batches))


def _record_location(output: str) -> str:
    return join(output, SEEDING_FILE)


def pending_seeding(output: str) -> Seeding | None:
    """The seeding a cut-off start left in ``output``, or None."""
    location = _record_location(output_location(output))
    try:
        data = file_io(location).read_bytes(location)
    except FileNotFoundError:
        return None
    try:
        return Seeding.model_validate(json.loads(data.decode("utf-8")))
    except (ValueError, PydanticValidationError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise CorruptRecordError(
            f"{location}: expected the record of an interrupted start giving the output an "
            f"empty sink history, found unreadable content ({first}); nothing was changed: "
            "if no job is starting into this output, remove the file to go on") from exc


def seed_history(output: str, job: str, through: int, interval: int) -> Gap | None:
    """Give ``job``'s new output (its sink log has no entries) the empty history up to its
    last batch ``through``; the gap written, or None when there was nothing to write."""
    output = output_location(output)
    gap = find_gap(output, through, interval)
    if not gap.batches:
        return None
    location = _record_location(output)
    record = Seeding(job=job, through=through, interval=gap.interval, batches=list(gap.batches))
    file_io(location).write_bytes(location, record.model_dump_json(indent=2).encode("utf-8"))
    crash_point("sink_seed.recorded")
    _write(output, record)
    return gap


def finish_seeding(output: str, job: str) -> Gap | None:
    """Write what a start of ``job`` cut off while seeding ``output`` left unwritten; the gap
    it had recorded, or None when there was none (or it was another job's: that job's next
    start finishes it, and this one is refused the output by its sink log)."""
    output = output_location(output)
    record = pending_seeding(output)
    if record is None or record.job != job:
        return None
    _write(output, record)
    return record.gap(output)


def _write(output: str, record: Seeding) -> None:
    fill_gap(record.gap(output), lambda: crash_point("sink_seed.entry_written"))
    location = _record_location(output)
    file_io(location).delete(location)
