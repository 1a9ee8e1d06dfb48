"""Adopting a checkpoint that plain Spark wrote: its sources and operators matched with those
of the sparkpoint version of the same query, so that a snapshot of it carries their names.

Spark identifies sources by position (offsets log v1) unless they were named, and stateful
operators by position (ids assigned top-down from the sink): the match is by position, then
checked against everything the checkpoint tells: the kind of each source (from the shape of
its offset), each operator's kind and key and value schemas, and the window its keys hold
(``checkpoint/state_windows``: length, slide, session gap as far as the state shows them).
Every mismatch is reported at once; nothing is guessed.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field

from sparkpoint.checkpoint.layout import Checkpoint, OperatorDir
from sparkpoint.checkpoint.sink_log import Location, latest_batch
from sparkpoint.checkpoint.state_windows import (
    StoredWindows,
    session_gap_mismatch,
    stored_windows,
    time_window_mismatch,
)
from sparkpoint.errors import CheckpointFormatError, SparkpointError
from sparkpoint.snapshot.manifest import Manifest, OperatorEntry, StoreEntry, operator_kind
from sparkpoint.sources.kafka import KAFKA_KINDS
from sparkpoint.storage.location import location_at
from sparkpoint.upgrade.batches import RENUMBER_OPTION, REWIND_OPTION
from sparkpoint.upgrade.validate import JobShape, NewOperator, NewSource, incompatibilities
from sparkpoint.windows import WindowSpec

# Source kinds whose offsets have a shape of their own (the job's kind names, Kafka's two
# formats as one).
KNOWN_SOURCE_KINDS = ("file", "kafka", "rate", "rate-micro-batch")
# The job a snapshot made by 'snapshot import' names: this prefix and the checkpoint's path.
IMPORTED_JOB_PREFIX = "import:"


@dataclass
class Adoption:
    """Names for the checkpoint's sources and operators, or the problems that prevent it."""

    source_names: dict[str, str] = field(default_factory=dict)
    operator_names: dict[int, str] = field(default_factory=dict)
    # The window each operator's keys were checked against (None: could not be read).
    operator_windows: dict[int, WindowSpec | None] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _offset_kind(offset: str | None) -> str | None:
    """The kind of source an offset belongs to, where its shape tells; None when unknown."""
    if offset is None:
        return None
    try:
        value = json.loads(offset)
    except ValueError:
        return None
    if isinstance(value, int) and not isinstance(value, bool):
        return "rate"  # the rate source's offset: seconds since its start
    if isinstance(value, dict) and set(value) == {"logOffset"}:
        return "file"
    if isinstance(value, dict) and set(value) == {"offset", "timestamp"}:
        return "rate-micro-batch"
    if isinstance(value, dict) and value and all(
            isinstance(parts, dict) and all(str(p).isdigit() for p in parts)
            for parts in value.values()):
        return "kafka"
    return None


def _job_source_kind(source: NewSource) -> str:
    return "kafka" if source.kind in KAFKA_KINDS else source.kind


def _match_sources(checkpoint: Checkpoint, batch: int, sources: tuple[NewSource, ...],
                   adoption: Adoption) -> None:
    offsets = checkpoint.offsets(batch).source_offsets()
    keys = list(offsets)
    if len(keys) != len(sources):
        adoption.problems.append(
            f"sources: the checkpoint has {len(keys)} source(s) ({', '.join(keys) or 'none'}), "
            f"the job has {len(sources)} ({', '.join(s.name for s in sources) or 'none'}); "
            "give the job file of the query that wrote the checkpoint")
        return
    by_name = {source.name: source for source in sources}
    named = all(key in by_name for key in keys)
    for index, key in enumerate(keys):
        # Sources the plain job named keep their names; positional ones take the job's.
        source = by_name[key] if named else sources[index]
        found = _offset_kind(offsets[key])
        kind = _job_source_kind(source)
        if found is not None and kind in KNOWN_SOURCE_KINDS and found != kind:
            adoption.problems.append(
                f"source {index} of the checkpoint holds a {found} offset ({offsets[key]}), "
                f"the job's source {index} '{source.name}' is a {kind} source; the "
                "job's sources must be those of the query, in the same order")
            continue
        adoption.source_names[key] = source.name


def _checkpoint_operator(checkpoint: Checkpoint, batch: int,
                         operator_id: int) -> OperatorEntry | None:
    for operator in checkpoint.operators(batch):
        if operator.operator_id != operator_id:
            continue
        stores = []
        for store in operator.stores():
            schema = operator.schema(store)
            stores.append(StoreEntry(name=store.name,
                                     key_schema=schema.key_schema if schema else None,
                                     value_schema=schema.value_schema if schema else None))
        return OperatorEntry(
            name=f"{operator.operator_name}_{operator.operator_id}",
            operator_id=operator.operator_id, kind=operator_kind(operator.operator_name),
            spark_operator_name=operator.operator_name, stores=stores,
            partitions=operator.partitions, rows=None, bytes=0)
    return None


# Reads the windows an operator's state holds as of a committed batch.
WindowReader = Callable[[OperatorDir, int], StoredWindows | None]


def windows_in_files(checkpoint: Checkpoint) -> WindowReader:
    """Read from the checkpoint's state files, in this process."""
    def read(operator: OperatorDir, batch: int) -> StoredWindows | None:
        return stored_windows(operator, batch + 1, checkpoint.state_provider(batch),
                              checkpoint.commit(batch))
    return read


def _check_window(batch: int, operator: OperatorDir, new: NewOperator, adoption: Adoption,
                  windows: WindowReader) -> None:
    """Compare the window the job computes for ``new`` with the bounds its state's keys
    hold; the window recorded for the snapshot is the job's once the state agrees."""
    job = new.window
    adoption.operator_windows[new.operator_id] = job
    if job is None or job.kind == "none":
        return
    try:
        found = windows(operator, batch)
    except CheckpointFormatError as exc:
        adoption.operator_windows[new.operator_id] = None
        adoption.notes.append(
            f"operator '{new.name}': its window could not be checked against the state ({exc}); "
            "the snapshot records it as unknown")
        return
    if found is None:
        return
    if job.kind == "time" and job.duration_us is not None:
        mismatch = time_window_mismatch(found, job)
        held = found.describe()
    elif job.kind == "session" and job.gap_us is not None:
        mismatch = session_gap_mismatch(found, job)
        held = mismatch or ""
    else:
        return
    if mismatch is not None:
        adoption.problems.append(
            f"operator '{new.name}' (id {new.operator_id}): the state holds {held} (read "
            f"from the bounds of its {found.rows} stored windows), the job file has "
            f"{job.describe()}; give the job file of the query that wrote the checkpoint")


def adopt(checkpoint: Checkpoint, shape: JobShape,
          windows: WindowReader | None = None) -> Adoption:
    """Match a plain Spark checkpoint's latest committed batch with a planned job.
    ``windows``: how the window bounds of the state are read (default: from its files
    here)."""
    adoption = Adoption()
    windows = windows or windows_in_files(checkpoint)
    batch = checkpoint.require_latest_committed_batch()
    _match_sources(checkpoint, batch, shape.sources, adoption)
    planned_ids = {op.operator_id for op in shape.operators}
    operators = {op.operator_id: op for op in checkpoint.operators(batch)}
    for operator in operators.values():
        if operator.operator_id not in planned_ids:
            adoption.problems.append(
                f"operator {operator.operator_id} of the checkpoint "
                f"({operator_kind(operator.operator_name)}) has no counterpart in the job: the "
                "job has fewer stateful operators than the query that wrote the checkpoint")
    for new in shape.operators:
        old = _checkpoint_operator(checkpoint, batch, new.operator_id)
        if old is None:
            adoption.problems.append(
                f"operator '{new.name}' (id {new.operator_id}, {new.kind}): the checkpoint has "
                "no state for this id; the job has a stateful operator the query lacked")
            continue
        reasons = incompatibilities(old, new)
        for reason in reasons:
            adoption.problems.append(
                f"operator '{new.name}' (id {new.operator_id}): {reason}; the job must be the "
                "same query as the one that wrote the checkpoint")
        if old.spark_operator_name == new.spark_operator_name:
            # The window of the checkpoint's keys is read whatever else differs: every
            # mismatch is listed in one go.
            _check_window(batch, operators[new.operator_id], new, adoption, windows)
        if not reasons:
            adoption.operator_names[new.operator_id] = new.name
    return adoption


@dataclass(frozen=True)
class SinkAhead:
    """An output whose file sink log holds batches its checkpoint did not commit."""

    output: str
    committed: int  # the checkpoint's latest committed batch
    latest: int  # the newest batch of the sink log
    # The checkpoint planned ``latest`` (offsets entry, no commit): the query stopped after
    # its sink wrote the batch and before its commit log did (Spark commits the sink first).
    unfinished: bool


def sink_ahead(checkpoint: Checkpoint, output: Location | None) -> SinkAhead | None:
    """Whether ``output``'s sink log holds batches after the checkpoint's last commit."""
    committed = checkpoint.latest_committed_batch()
    latest = latest_batch(output) if output is not None else None
    if output is None or committed is None or latest is None or latest <= committed:
        return None
    unfinished = latest == committed + 1 and checkpoint.uncommitted_batch() == latest
    return SinkAhead(str(output), committed, latest, unfinished)


def import_warning(ahead: SinkAhead, checkpoint: Checkpoint, snapshot: str) -> str:
    """What ``snapshot import`` says of an output ahead of the checkpoint it imports: the
    snapshot holds the committed batch, and a start from it into that output is refused
    (SINK_AHEAD) until the output is taken back."""
    if ahead.unfinished:
        return (f"the output {ahead.output} holds batch {ahead.latest} in its sink log, which "
                f"{checkpoint.root} planned and did not commit (the query stopped after its "
                "sink wrote the batch and before its commit): snapshot "
                f"'{snapshot}' holds batch {ahead.committed}, so a job started from it into "
                f"{ahead.output} needs {REWIND_OPTION} (batch {ahead.latest}'s files move "
                "aside under the output and the new job reads its input again), or a new "
                "output directory; without either the start is refused (SINK_AHEAD)")
    return (f"the output {ahead.output} holds batches up to {ahead.latest} in its sink log, "
            f"after {checkpoint.root}'s last committed batch {ahead.committed}: snapshot "
            f"'{snapshot}' holds batch {ahead.committed}, so a job started from it into "
            f"{ahead.output} needs {REWIND_OPTION} (batches {ahead.committed + 1}.."
            f"{ahead.latest} move aside under the output) or {RENUMBER_OPTION} (they stay "
            "in the table), or a new output directory; without one the start is refused "
            "(SINK_AHEAD)")


def unfinished_import_problem(name: str, manifest: Manifest,
                              output: Location) -> str | None:
    """The start's refusal in the terms of the import, when the output's sink log is one
    batch ahead of an imported snapshot because the checkpoint it was imported from planned
    that batch and did not commit it (read there, if the checkpoint is still there)."""
    if not manifest.job.startswith(IMPORTED_JOB_PREFIX):
        return None
    try:
        root = location_at(manifest.job.removeprefix(IMPORTED_JOB_PREFIX))
        ahead = sink_ahead(Checkpoint(root), output) if (root / "commits").is_dir() else None
    except (SparkpointError, OSError):
        return None  # the checkpoint changed or went: the general refusal stands
    if ahead is None or not ahead.unfinished or ahead.committed != manifest.batch_id:
        return None
    return (f"the output {output} already holds batch {ahead.latest} in its sink log "
            f"(_spark_metadata), which the checkpoint imported as snapshot '{name}' ({root}) "
            "planned and did not commit (the query stopped after its sink wrote the batch and "
            f"before its commit): Spark's file sink would skip the new job's batch "
            f"{ahead.latest} and its rows would be lost. Pass {REWIND_OPTION} to take the "
            f"output back to batch {ahead.committed} (batch {ahead.latest}'s files move aside "
            "under the output and the new job reads its input again), or write to a new "
            "output directory")
