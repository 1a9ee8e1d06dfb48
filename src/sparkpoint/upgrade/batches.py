"""Which batch id a job started from a snapshot continues at, checked against its sink.

A job started from a snapshot of batch N runs batch N+1 next. The snapshot's job may have
gone on past N into the same output: a sink that is idempotent by batch id then takes the new
job's batches N+1.. for ones it already has. Spark's file sink skips them (its log holds them),
so the new version's rows would be lost silently. For a file sink sparkpoint reads the log and
refuses, or, when asked, takes the output back to the snapshot's batch (``--rewind-output``,
see ``sinks/rewind.py``) or numbers the new job's batches past the log's latest (the old
run's rows then stay in the table beside the new ones, and a warning says so). For a sink it
cannot read it warns, and the user may choose the first batch id.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sparkpoint.checkpoint.sink_log import Location, latest_batch
from sparkpoint.errors import TopicNotRewindableError, UsageError

RENUMBER_OPTION = "--renumber-batches"
FIRST_BATCH_OPTION = "--first-batch"
REWIND_OPTION = "--rewind-output"


@dataclass(frozen=True)
class BatchChoice:
    """What the user asked for: nothing, renumbering past the sink, a first batch id, or
    taking the sink back to the snapshot's batch."""

    renumber: bool = False
    first_batch: int | None = None
    rewind: bool = False

    def __post_init__(self) -> None:
        asked = [name for name, given in ((RENUMBER_OPTION, self.renumber),
                                          (FIRST_BATCH_OPTION, self.first_batch is not None),
                                          (REWIND_OPTION, self.rewind)) if given]
        if len(asked) > 1:
            together = "not both" if len(asked) == 2 else "not all three"
            raise UsageError(f"use only one of {', '.join(asked)}, {together}: each decides "
                             "the new job's batch ids in its own way")

    @property
    def asked(self) -> bool:
        return self.renumber or self.first_batch is not None or self.rewind


@dataclass(frozen=True)
class SinkInfo:
    """The new job's sink: its format and, for a file sink, its output directory (a local
    path or a URL)."""

    format: str
    file_path: Location | None


@dataclass(frozen=True)
class BatchNumbering:
    snapshot_batch: int
    first_batch: int  # the first batch id the new job runs
    renumbered: bool
    sink_latest_batch: int | None = None
    # --rewind-output: the output's sink log is taken back to this batch before the start.
    rewind_to_batch: int | None = None

    @property
    def checkpoint_batch(self) -> int:
        """The batch the new checkpoint holds as committed."""
        return self.first_batch - 1

    def to_dict(self) -> dict[str, Any]:
        return {"snapshot_batch": self.snapshot_batch, "first_batch": self.first_batch,
                "renumbered": self.renumbered, "sink_latest_batch": self.sink_latest_batch,
                "rewind_to_batch": self.rewind_to_batch}


@dataclass(frozen=True)
class SinkCheck:
    numbering: BatchNumbering
    problem: str | None = None  # the sink already holds batches the new job would run
    warning: str | None = None


def check_first_batch(first_batch: int | None, snapshot_batch: int) -> None:
    """``--first-batch K`` must come after the snapshot's batch: a batch id goes forward."""
    if first_batch is not None and first_batch <= snapshot_batch:
        raise UsageError(
            f"{FIRST_BATCH_OPTION} {first_batch}: expected a batch id after the snapshot's "
            f"batch {snapshot_batch}, i.e. at least {snapshot_batch + 1}; choose a larger one")


def number_batches(snapshot_batch: int, sink: SinkInfo, choice: BatchChoice) -> SinkCheck:
    """Decide the new job's first batch id and what to tell the user about its sink."""
    check_first_batch(choice.first_batch, snapshot_batch)
    if sink.file_path is None:
        return _unreadable_sink(snapshot_batch, sink, choice)
    latest = latest_batch(sink.file_path)
    first = choice.first_batch if choice.first_batch is not None else snapshot_batch + 1
    if choice.rewind:
        ahead = latest is not None and latest > snapshot_batch
        return SinkCheck(BatchNumbering(snapshot_batch, first, False, latest,
                                        rewind_to_batch=snapshot_batch if ahead else None))
    if choice.renumber and latest is not None and latest >= first:
        first = latest + 1
    numbering = BatchNumbering(snapshot_batch, first, first != snapshot_batch + 1, latest)
    if latest is None or latest < first:
        kept = latest is not None and latest > snapshot_batch
        return SinkCheck(numbering, warning=_kept_rows_warning(
            sink.file_path, snapshot_batch, latest) if kept and latest is not None else None)
    return SinkCheck(numbering, problem=(
        f"the output {sink.file_path} already holds batches up to {latest} in its sink log "
        f"(_spark_metadata), after the snapshot's batch {snapshot_batch}: Spark's file sink "
        f"would skip the new job's batches {first}..{latest} and their rows would be lost. "
        "Three ways out: write to a new output directory; or pass "
        f"{REWIND_OPTION} to take the output back to batch {snapshot_batch} (the old run's "
        f"batches {snapshot_batch + 1}..{latest} leave the table, moved aside under the "
        f"output); or pass {RENUMBER_OPTION} to number the new job's batches from "
        f"{latest + 1}, which keeps the old run's rows of batches "
        f"{snapshot_batch + 1}..{latest} in the table beside the new job's rows for the same "
        "input"))


def _kept_rows_warning(output: Location, snapshot_batch: int, latest: int) -> str:
    return (f"the output {output} keeps the old run's batches {snapshot_batch + 1}..{latest} "
            "(after the snapshot's batch): the table will hold their rows and the new job's "
            "rows for the same input, both; pass "
            f"{REWIND_OPTION} instead to move them out of the table")


def _unreadable_sink(snapshot_batch: int, sink: SinkInfo, choice: BatchChoice) -> SinkCheck:
    kafka = sink.format.lower() == "kafka"
    if choice.rewind and kafka:
        raise TopicNotRewindableError(
            f"{REWIND_OPTION} takes a file sink's table back, and this job writes with "
            "Spark's Kafka sink: a topic cannot be rewound (its records stay until the "
            f"topic's retention deletes them); start without {REWIND_OPTION}: the batches "
            "after the snapshot's are written to the topic again, and the start names the "
            "offsets of the records the old run wrote for them, for the topic's readers to "
            "skip; nothing was changed")
    if choice.rewind:
        raise UsageError(
            f"{REWIND_OPTION} takes a file sink's output back to the snapshot's batch, "
            f"and this job's sink ({sink.format}) is not one sparkpoint can read; write to a "
            f"new output, or choose the first batch id with {FIRST_BATCH_OPTION} K")
    if choice.renumber:
        raise UsageError(
            f"{RENUMBER_OPTION} reads the batches a file sink already holds, and this job's "
            f"sink ({sink.format}) is not a file sink sparkpoint can read; choose the first "
            f"batch id with {FIRST_BATCH_OPTION} K instead")
    if choice.first_batch is not None or kafka:
        # Spark's Kafka sink writes every batch it is given, whatever its id (at least
        # once): no id is skipped. A rollback into its topic is said by
        # upgrade/kafka_rollback.py, with the records written again.
        first = choice.first_batch if choice.first_batch is not None else snapshot_batch + 1
        return SinkCheck(BatchNumbering(snapshot_batch, first, first != snapshot_batch + 1))
    return SinkCheck(BatchNumbering(snapshot_batch, snapshot_batch + 1, False), warning=(
        f"the job's sink ({sink.format}) is one sparkpoint cannot read: its batch ids "
        f"{snapshot_batch + 1}.. repeat ids the snapshot's job may already have used after "
        f"batch {snapshot_batch}, and a sink idempotent by batch id (foreachBatch keyed by "
        f"batch id, for one) would skip them; set the first batch id with "
        f"{FIRST_BATCH_OPTION} K if so"))
