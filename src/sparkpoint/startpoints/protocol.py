"""Applying pending startpoints at a job's start: the protocol, its intent and its recovery.

Startpoints are set at any time, from any machine (``startpoints/store.py``: one file per
set, never rewritten). Under the job's lock, before its query starts, every pending set is
resolved against the checkpoint and the resolution recorded in the home (a
``StartpointIntent``, naming exactly the sets it consumes); then the checkpoint's offsets are
moved (``startpoints/apply.py``), the consumed sets removed (a set made meanwhile stays
pending) and the application recorded in the job record. A start cut off after the intent
is finished from it by the next command, never resolved again: each startpoint is applied
exactly once. The top-level recovery (``sparkpoint/recovery.py``) calls ``recover``.
"""

from __future__ import annotations

import base64
import uuid
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from sparkpoint.checkpoint.layout import Checkpoint
from sparkpoint.checkpoint.sink_log import latest_batch
from sparkpoint.checkpoint.source_log import DEFAULT_SOURCE_COMPACT_INTERVAL
from sparkpoint.crash_points import crash_point
from sparkpoint.errors import (
    KafkaOffsetsDeletedError,
    NoCommittedBatchError,
    PreconditionError,
    UnknownSourceError,
)
from sparkpoint.losses import ACCEPT_OPTION, AcceptedLoss
from sparkpoint.runtime.registry import AppliedStartpoint, JobRecord, JobRegistry, now_iso
from sparkpoint.runtime.runner import RunOptions, run_job
from sparkpoint.sources.input_gaps import SourceToCheck, check
from sparkpoint.sources.kafka import KAFKA_KINDS
from sparkpoint.sources.positions import SourceDescription
from sparkpoint.startpoints.apply import apply, require_applicable
from sparkpoint.startpoints.resolve import Resolved
from sparkpoint.startpoints.resolve import resolve as resolve_startpoints
from sparkpoint.startpoints.store import WHOLE_SOURCE, PositionKind, Startpoint, StartpointStore
from sparkpoint.storage.home import Home
from sparkpoint.storage.location import Location, remove_checksum_sibling
from sparkpoint.storage.records import read_record, remove_record, write_record

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

Echo = Callable[[str], None]
SOURCE_COMPACT_CONF = "spark.sql.streaming.fileSource.log.compactInterval"
STARTPOINT_INTENT = "startpoint-intent.json"


class ResolvedSource(BaseModel):
    """One source's resolved startpoints, as applied (log entries kept base64-encoded)."""

    model_config = ConfigDict(extra="forbid")
    source: str
    offset_before: str | None
    offset_after: str | None
    log_files: list[tuple[str, str]] = Field(default_factory=list)
    lines: list[str] = Field(default_factory=list)

    @classmethod
    def of(cls, resolved: Resolved) -> ResolvedSource:
        return cls(source=resolved.source, offset_before=resolved.offset_before,
                   offset_after=resolved.offset_after, lines=list(resolved.lines),
                   log_files=[(name, base64.b64encode(data).decode("ascii"))
                              for name, data in resolved.log_files])

    def to_resolved(self) -> Resolved:
        return Resolved(self.source, self.offset_before, self.offset_after,
                        [(name, base64.b64decode(data)) for name, data in self.log_files],
                        list(self.lines))


class StartpointIntent(BaseModel):
    """Startpoints being applied to committed batch ``batch`` of the job's checkpoint."""

    model_config = ConfigDict(extra="forbid")
    format_version: Literal[1] = 1
    intent_id: str
    batch: int
    recorded_at: str
    pending: dict[str, list[Startpoint]]
    resolved: list[ResolvedSource]
    # The sets (startpoint files) folded into ``pending``, per source: exactly what is
    # removed once applied (none recorded by an earlier version: compared instead).
    consumed: dict[str, list[str]] | None = None
    # Kafka offsets the broker no longer held, gone without with --accept-data-loss (their
    # partitions moved up to the earliest offset held): for the job's lineage.
    accepted_loss: list[AcceptedLoss] = Field(default_factory=list)


def _intent_path(home: Home, job: str) -> Location:
    return home.job_dir(job) / STARTPOINT_INTENT


def load_intent(home: Home, job: str) -> StartpointIntent | None:
    """The startpoint application a cut-off start left, if any."""
    return read_record(
        _intent_path(home, job), StartpointIntent,
        "the record of an interrupted startpoint application",
        "nothing was changed: inspect the job's checkpoint, then remove the file to go on")


def source_description(record: JobRecord, source: str) -> SourceDescription:
    for known in record.sources:
        if known.name == source:
            return SourceDescription(known.name, known.kind, known.path, dict(known.options))
    names = ", ".join(s.name for s in record.sources) or "none recorded; run the job once"
    raise UnknownSourceError(f"job '{record.name}' has no source '{source}' (sources: {names})")


def compact_interval(record: JobRecord) -> int:
    return int(record.conf.get(SOURCE_COMPACT_CONF, DEFAULT_SOURCE_COMPACT_INTERVAL))


def apply_pending(home: Home, options: RunOptions, spark: SparkSession | None,
                       echo: Echo) -> None:
    """Apply pending startpoints to the job's checkpoint, once, before the job starts.

    The caller holds the job's lock. What is applied is recorded first (an intent), so a
    crash at any step is finished by the next start from the record, never resolved twice.
    """
    registry = JobRegistry(home)
    store = StartpointStore(home)
    job = options.job
    pending, consumed = store.all_with_ids(job)
    if not pending:
        return
    record = registry.get(job)
    checkpoint = registry.checkpoint(job)
    in_flight = checkpoint.uncommitted_batch()
    if checkpoint.latest_committed_batch() is not None and in_flight is not None:
        echo(f"completing batch {in_flight}, planned before the startpoints were set")
        try:
            run_job(home, replace(options, max_batches=1, until_caught_up=False,
                                  pending_batch_only=True), spark=spark, echo=echo)
        except KafkaOffsetsDeletedError:
            _drop_unreadable_batch(checkpoint, in_flight, record, echo)
        record = registry.get(job)
    batch = checkpoint.require_latest_committed_batch()
    resolved = [resolve_startpoints(source_description(record, source), entries, checkpoint,
                                    compact_interval(record))
                for source, entries in pending.items()]
    accepted = _prove_sources(record, checkpoint, batch, pending, consumed, resolved,
                              options.accept_data_loss, echo)
    intent = record_startpoints(home, job, batch, pending, resolved, consumed, accepted)
    finish_startpoints(home, job, intent, echo)


def _prove_sources(record: JobRecord, checkpoint: Checkpoint, batch: int,
                   pending: dict[str, list[Startpoint]], consumed: dict[str, list[str]],
                   resolved: list[Resolved], accept: bool, echo: Echo) -> list[AcceptedLoss]:
    """Before anything is recorded: every Kafka source of the job still holds the offsets
    the start resumes at (a startpoint's, else the committed ones); a gap refuses the start
    unless accepted. Accepted, each lost partition moves up to the earliest offset held, as
    part of the application (a source without a startpoint gets an entry of its own), so
    that it is recorded and applied exactly once with the rest."""
    by_source = {r.source: r for r in resolved}
    committed = checkpoint.offsets(batch).source_offsets()
    sources = []
    for known in record.sources:
        if known.kind not in KAFKA_KINDS:
            continue  # file startpoints resolve against the files present now
        result = by_source.get(known.name)
        offset = (result.offset_after or result.offset_before) if result is not None \
            else committed.get(known.name)
        sources.append(SourceToCheck(known.name, known.kind, dict(known.options), offset))
    found = check(sources)
    if not found.refuse_unless_accepted(
            accept, f"job '{record.name}' not started, nothing was changed",
            f"set the startpoints of those partitions to what the broker holds "
            f"('sparkpoint startpoint set {record.name} SOURCE --earliest "
            f"--partition TOPIC:P'), or start with {ACCEPT_OPTION} to go on from "
            "the earliest offsets held (recorded in the job's lineage)", echo):
        return []
    for source, offset in found.raised_offsets().items():
        lines = [f"{g.topic}-{g.partition}: {g.resume} -> {g.earliest} ({g.lost} record(s) "
                 f"deleted from the broker, accepted with {ACCEPT_OPTION})"
                 for g in found.by_source()[source]]
        result = by_source.get(source)
        if result is None:
            resolved.append(Resolved(source, committed.get(source), offset, [], lines))
            pending[source], consumed[source] = [], []
        else:
            result.offset_after = offset
            result.lines.extend(lines)
    for line in found.source_lines():
        echo(f"warning: accepted ({ACCEPT_OPTION}): {line}")
    return found.accepted(now_iso(), "run (startpoints)")


def _drop_unreadable_batch(checkpoint: Checkpoint, batch: int, record: JobRecord,
                           echo: Echo) -> None:
    """A planned batch whose Kafka offsets the broker deleted can never complete, and the
    startpoints that would go on cannot apply while it is planned: it committed nothing, so
    its offsets entry goes and the startpoints decide what the re-planned batch reads. Spark
    writes that batch's state version again when it runs; a file sink that already holds the
    batch (committed there, not in the checkpoint) would skip the re-planned one, so then
    nothing is dropped."""
    if record.output is not None:
        sink_last = latest_batch(record.output)
        if sink_last is not None and sink_last >= batch:
            raise PreconditionError(
                f"job '{record.name}': batch {batch} reads Kafka offsets the broker deleted, "
                f"but the output {record.output} already committed it; its input cannot be "
                "read again and it cannot be planned anew: start from a snapshot or a new "
                "output")
    entry = checkpoint.root / "offsets" / str(batch)
    entry.unlink(missing_ok=True)  # one step: the batch is planned, or it is not
    remove_checksum_sibling(entry)
    echo(f"batch {batch} cannot be completed: Kafka offsets it was planned to read are gone "
         "from the broker; it committed nothing, so the startpoints replace it")


def record_startpoints(home: Home, job: str, batch: int, pending: dict[str, list[Startpoint]],
                       resolved: list[Resolved], consumed: dict[str, list[str]],
                       accepted: list[AcceptedLoss] | None = None) -> StartpointIntent:
    """Record what is about to be applied; from here on it is applied exactly once."""
    require_applicable(JobRegistry(home).checkpoint(job), batch)
    intent = StartpointIntent(intent_id=uuid.uuid4().hex, batch=batch, recorded_at=now_iso(),
                              pending=pending, consumed=consumed,
                              resolved=[ResolvedSource.of(r) for r in resolved],
                              accepted_loss=list(accepted or []))
    write_record(_intent_path(home, job), intent)
    crash_point("startpoint.intent_recorded")
    return intent


def finish_startpoints(home: Home, job: str, intent: StartpointIntent, echo: Echo) -> None:
    """Apply a recorded intent: checkpoint, pending startpoints, job record, in that order."""
    registry = JobRegistry(home)
    resolved = [source.to_resolved() for source in intent.resolved]
    apply(registry.checkpoint(job), resolved, intent.batch)
    crash_point("startpoint.offsets_moved")
    store = StartpointStore(home)
    for source, entries in intent.pending.items():
        if intent.consumed is None:
            store.clear_if_unchanged(job, source, entries)
        else:
            # Exactly the sets applied: one made meanwhile (anywhere) stays pending.
            store.remove_applied(job, source, intent.consumed.get(source, []))
    crash_point("startpoint.cleared")
    record = registry.get(job)
    if not any(a.intent_id == intent.intent_id for a in record.startpoints_applied):
        for result in resolved:
            audit = result.to_dict()
            record.startpoints_applied.append(AppliedStartpoint(
                source=result.source, intent_id=intent.intent_id,
                startpoints=[s.model_dump(mode="json") for s in intent.pending[result.source]],
                set_ids=(intent.consumed or {}).get(result.source, []),
                applied_at=now_iso(), batch=intent.batch,
                offset_before=audit["offset_before"], offset_after=audit["offset_after"],
                positions=audit["positions"]))
            echo(f"startpoint applied to source '{result.source}': " + "; ".join(result.lines))
        record.lineage.accepted_loss.extend(intent.accepted_loss)
        registry.save(record)
    remove_record(_intent_path(home, job))


def recover(home: Home, job: str, echo: Echo) -> bool:
    """Finish an application of startpoints a start left, as it was resolved then (never
    resolved again); True when there was one. The caller holds the job."""
    intent = load_intent(home, job)
    if intent is None:
        return False
    echo(f"job '{job}': finishing the startpoints interrupted at {intent.recorded_at} (as "
         "resolved then)")
    finish_startpoints(home, job, intent, echo)
    return True


@dataclass(frozen=True)
class StartpointPreview:
    job: str
    source: str
    startpoints: list[Startpoint]
    resolved: Resolved
    stored: bool
    stateful_operators: list[str]

    def to_dict(self) -> dict[str, Any]:
        return {"job": self.job, "source": self.source, "stored": self.stored,
                "startpoints": [s.model_dump(mode="json") for s in self.startpoints],
                "resolves_to": self.resolved.to_dict(),
                "state_not_rewound": self.stateful_operators}


def set_startpoint(home: Home, job: str, source: str, kind: PositionKind, value: str | None,
                   partition: str | None, dry_run: bool) -> StartpointPreview:
    """Store where ``source`` starts at the job's next start (once), after resolving it now
    to refuse positions the source cannot take; ``dry_run`` stores nothing."""
    registry = JobRegistry(home)
    record = registry.get(job)
    info = source_description(record, source)
    checkpoint = registry.checkpoint(job)
    if not checkpoint.exists() or checkpoint.latest_committed_batch() is None:
        raise NoCommittedBatchError(
            f"job '{job}' has no committed batch yet; a new job starts where its source options "
            "say (e.g. startingOffsets); set startpoints once it has run")
    store = StartpointStore(home)
    new = Startpoint(source=source, partition=partition or WHOLE_SOURCE, kind=kind,
                     value=value, set_at=now_iso())
    kept = [] if new.partition == WHOLE_SOURCE else [
        s for s in store.get(job, source) if s.partition != new.partition]
    merged = [*kept, new]
    resolved = resolve_startpoints(info, merged, checkpoint, compact_interval(record))
    if not dry_run:
        # At the home's URL: no lease needed, see startpoints/store.py.
        merged[-1] = store.set(job, new)
    return StartpointPreview(job, source, merged, resolved, not dry_run,
                             [op.name for op in record.operators])


def clear_startpoint(home: Home, job: str, source: str) -> None:
    """Remove the pending startpoints of ``source``; none pending is refused, naming those
    that are."""
    record = JobRegistry(home).get(job)
    store = StartpointStore(home)
    if not store.clear(job, source):
        pending = ", ".join(store.all(job)) or "none"
        source_description(record, source)  # an unknown source says so first
        raise PreconditionError(
            f"job '{job}' has no startpoint for source '{source}' (pending: {pending})")
