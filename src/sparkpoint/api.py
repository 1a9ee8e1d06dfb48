"""The Python API behind the CLI: run jobs, snapshot them, drain them, inspect snapshots and
jobs."""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from importlib.metadata import version as package_version
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sparkpoint.checkpoint.layout import Checkpoint
from sparkpoint.checkpoint.sink_log import DEFAULT_COMPACT_INTERVAL, seed_empty_history
from sparkpoint.checkpoint.source_log import DEFAULT_SOURCE_COMPACT_INTERVAL
from sparkpoint.drain.residual import state_rows
from sparkpoint.drain.synthetic import (
    DrainBatch,
    remove_unrun_drain_offsets,
    restore_watermark,
    write_drain_offsets,
)
from sparkpoint.errors import (
    JobRunningError,
    NameTakenError,
    NoCommittedBatchError,
    PreconditionError,
    SnapshotDamagedError,
    SparkQueryError,
    UnknownSourceError,
    UsageError,
    ValidationError,
)
from sparkpoint.runtime.registry import (
    AppliedStartpoint,
    DrainedOperator,
    DrainRecord,
    JobRecord,
    JobRegistry,
    Lineage,
    now_iso,
)
from sparkpoint.runtime.runner import (
    PlannedJob,
    RunOptions,
    RunResult,
    plan_job,
    run_job,
    wait_until_stopped,
)
from sparkpoint.snapshot.export import JobInfo
from sparkpoint.snapshot.manifest import Manifest
from sparkpoint.snapshot.store import Problem, SnapshotStore
from sparkpoint.sources.positions import SourceDescription
from sparkpoint.startpoints.apply import apply as apply_startpoints
from sparkpoint.startpoints.resolve import Resolved
from sparkpoint.startpoints.resolve import resolve as resolve_startpoints
from sparkpoint.startpoints.store import WHOLE_SOURCE, PositionKind, Startpoint, StartpointStore
from sparkpoint.storage.home import Home, validate_name
from sparkpoint.upgrade.restore import build_new_checkpoint, job_shape, resolve
from sparkpoint.upgrade.resume_point import flow_mapping, load_resume_point
from sparkpoint.upgrade.validate import UpgradePlan, default_resume_point

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

Echo = Callable[[str], None]
CANCEL_TIMEOUT_S = 300.0
COMPACT_INTERVAL_CONF = "spark.sql.streaming.fileSink.log.compactInterval"


def _quiet(_message: str) -> None:
    pass


def _check_snapshots_intact(store: SnapshotStore, names: list[str]) -> None:
    """Refuse damaged snapshots before any JVM starts (unknown ones are validation's job)."""
    for name in names:
        if not store.exists(name):
            continue
        problems = store.verify(name)
        if problems:
            raise SnapshotDamagedError(
                f"snapshot '{name}' is damaged: {problems[0].path}: {problems[0].message}; "
                f"run 'sparkpoint snapshot verify {name}'"
            )


def run(
    home: Home,
    job_file: Path,
    job: str,
    params: Mapping[str, str] | None = None,
    conf: Mapping[str, str] | None = None,
    master: str | None = None,
    from_snapshot: str | None = None,
    resume_point: Path | None = None,
    until_caught_up: bool = False,
    max_batches: int | None = None,
    spark: SparkSession | None = None,
    echo: Echo = _quiet,
) -> RunResult:
    """Run a job. With ``from_snapshot`` or ``resume_point`` it starts as a new job whose
    checkpoint is built from snapshots; validation failures change nothing (exit 3)."""
    validate_name(job, "job")
    if from_snapshot is not None and resume_point is not None:
        raise UsageError("use either --from-snapshot or --resume-point, not both")
    options = RunOptions(
        job=job, job_file=job_file.absolute(), params=dict(params or {}), conf=dict(conf or {}),
        master=master, until_caught_up=until_caught_up, max_batches=max_batches,
    )
    registry = JobRegistry(home)
    prepare = None
    if from_snapshot is not None or resume_point is not None:
        store = SnapshotStore(home)
        point = load_resume_point(resume_point) if resume_point is not None else None
        if from_snapshot is not None:
            store.get(from_snapshot)
        if registry.exists(job) or registry.checkpoint(job).exists():
            raise NameTakenError(
                f"job '{job}' already exists; a job started from snapshots must be new: choose "
                "another --job name (or drop --from-snapshot/--resume-point to continue it)"
            )
        _check_snapshots_intact(store, point.snapshots() if point else [from_snapshot or ""])
        target = registry.checkpoint(job).root

        def prepare(planned: PlannedJob) -> Lineage:
            resolution = resolve(store, planned, point, from_snapshot)
            for warning in resolution.plan.warnings:
                echo(f"warning: {warning}")
            if not resolution.plan.ok:
                raise ValidationError(
                    f"the job cannot resume ({len(resolution.plan.problems)} problem(s)); "
                    "nothing was created:\n  " + "\n  ".join(resolution.plan.problems))
            result = build_new_checkpoint(planned, resolution, target, echo)
            used = sorted(resolution.snapshots)
            if result.batch_id is not None:
                echo(f"built checkpoint for job '{job}' from {', '.join(used)} "
                     f"(batch {result.batch_id})")
                if planned.file_sink is not None:
                    interval = int(planned.conf.get(COMPACT_INTERVAL_CONF,
                                                    DEFAULT_COMPACT_INTERVAL))
                    if seed_empty_history(planned.file_sink, result.batch_id, interval):
                        echo(f"gave the new output {planned.file_sink} an empty sink history "
                             f"up to batch {result.batch_id}")
            first = resolution.snapshots[used[0]].manifest if used else None
            return Lineage(
                from_snapshot=from_snapshot or (",".join(used) or None),
                snapshot_job=first.job if first else None,
                snapshot_batch=result.batch_id,
                resume_point=str(resume_point) if resume_point is not None else None,
            )

    else:
        _apply_startpoints(home, options, spark, echo)
    return run_job(home, options, spark=spark, prepare=prepare, echo=echo)


def plan(
    home: Home,
    job_file: Path,
    params: Mapping[str, str] | None = None,
    conf: Mapping[str, str] | None = None,
    master: str | None = None,
    from_snapshot: str | None = None,
    resume_point: Path | None = None,
    spark: SparkSession | None = None,
    echo: Echo = _quiet,
) -> UpgradePlan:
    """Dry run: what would resume, initialize or be dropped, and every problem. Starts no
    query and writes only scratch files, including Spark's own restart check."""
    if (from_snapshot is None) == (resume_point is None):
        raise UsageError("give exactly one of --from-snapshot SNAP or --resume-point FILE")
    point = load_resume_point(resume_point) if resume_point is not None else None
    store = SnapshotStore(home)
    if from_snapshot is not None:
        store.get(from_snapshot)
    _check_snapshots_intact(store, point.snapshots() if point else [from_snapshot or ""])
    planned = plan_job("plan", job_file.absolute(), dict(params or {}), dict(conf or {}),
                       master, spark, log_dir=home.logs_dir)
    try:
        resolution = resolve(store, planned, point, from_snapshot)
        if resolution.plan.ok:
            scratch = Path(tempfile.mkdtemp(prefix="sparkpoint-plan-")) / "checkpoint"
            try:
                build_new_checkpoint(planned, resolution, scratch, echo, publish=False)
            except ValidationError:
                pass  # the problem is in the plan already
            finally:
                shutil.rmtree(scratch.parent, ignore_errors=True)
        return resolution.plan
    finally:
        planned.release()


def resume_point_build(
    home: Home,
    job_file: Path,
    snapshot: str,
    params: Mapping[str, str] | None = None,
    conf: Mapping[str, str] | None = None,
    master: str | None = None,
    spark: SparkSession | None = None,
) -> str:
    """The default resume point as YAML: same names resume, new ones initialize; snapshot
    operators the job lacks are listed in comments, to drop deliberately."""
    store = SnapshotStore(home)
    manifest = store.get(snapshot)
    planned = plan_job("resume-point", job_file.absolute(), dict(params or {}),
                       dict(conf or {}), master, spark, log_dir=home.logs_dir)
    try:
        shape, _layouts = job_shape(planned)
    finally:
        planned.release()
    point = default_resume_point(shape, snapshot, manifest)
    names = {op.name for op in shape.operators}
    left = [op for op in manifest.operators if op.name not in names]
    text = f"# resume point for {job_file.name} from snapshot '{snapshot}' (job " \
           f"'{manifest.job}', batch {manifest.batch_id})\n" + point.to_yaml(bool(left))
    if left:
        text += ("# state of the snapshot that no operator of the job resumes; drop it "
                 "deliberately, or resume it under another name in state:\n# drop:\n")
        text += "".join(f"#   - {flow_mapping(snapshot=snapshot, operator=op.name)}  "
                        f"# {op.kind}, {op.rows} rows\n" for op in left)
    return text


def snapshot_create(
    home: Home, job: str, snapshot: str, cancel: bool = False, echo: Echo = _quiet
) -> Manifest:
    """Snapshot the latest committed batch; with ``cancel`` stop a running job first."""
    validate_name(snapshot, "snapshot")
    registry = JobRegistry(home)
    record = registry.get(job)
    store = SnapshotStore(home)
    if store.path(snapshot).exists():
        raise NameTakenError(
            f"snapshot '{snapshot}' already exists; choose another name or delete it first"
        )
    if cancel:
        if record.effective_status() == "running":
            echo(f"asking job '{job}' (pid {record.pid}) to stop after its last committed batch")
            registry.request_stop(job)
            record = wait_until_stopped(registry, job, CANCEL_TIMEOUT_S)
            echo(f"job '{job}' is {record.effective_status()}")
        else:
            echo(f"job '{job}' is not running ({record.effective_status()}); snapshotting it")
    checkpoint = registry.checkpoint(job)
    if not checkpoint.exists():
        raise PreconditionError(
            f"job '{job}' has no checkpoint yet at {checkpoint.root}; run it first"
        )
    info = JobInfo(
        job=job,
        operator_names=record.operator_names(),
        operator_windows=record.operator_windows(),
        job_file=record.job_file,
        params=record.params,
        spark_version=package_version("pyspark"),
    )
    return store.create(snapshot, checkpoint, info, progress=echo)


def snapshot_list(home: Home, job: str | None = None) -> list[Manifest]:
    return SnapshotStore(home).manifests(job)


def snapshot_show(home: Home, snapshot: str) -> Manifest:
    return SnapshotStore(home).get(snapshot)


def snapshot_verify(home: Home, snapshot: str) -> list[Problem]:
    return SnapshotStore(home).verify(snapshot)


def snapshot_delete(home: Home, snapshot: str) -> None:
    SnapshotStore(home).delete(snapshot)


@dataclass(frozen=True)
class JobView:
    record: JobRecord
    status: str
    batch: int | None

    def to_dict(self) -> dict[str, Any]:
        data = self.record.model_dump(mode="json")
        data["status"] = self.status
        data["batch"] = self.batch
        return data


def job_view(home: Home, job: str) -> JobView:
    registry = JobRegistry(home)
    record = registry.get(job)
    batch = Checkpoint(home.checkpoint_dir(job)).latest_committed_batch()
    return JobView(record, record.effective_status(), batch)


def jobs_list(home: Home) -> list[JobView]:
    return [job_view(home, name) for name in JobRegistry(home).names()]


def drain(
    home: Home,
    job: str,
    snapshot: str | None = None,
    spark: SparkSession | None = None,
    echo: Echo = _quiet,
) -> DrainRecord:
    """Stop the job (if running), complete an in-flight batch, run one synthetic batch that
    fires every event-time window and timer, put the job's watermark back, and optionally
    snapshot the drained state. Refusals (unknown, drained, nothing committed) change nothing.
    """
    registry = JobRegistry(home)
    record = registry.get(job)
    if snapshot is not None:
        validate_name(snapshot, "snapshot")
        if SnapshotStore(home).path(snapshot).exists():
            raise NameTakenError(
                f"snapshot '{snapshot}' already exists; choose another name or delete it first")
    if record.effective_status() == "drained" and record.drain is not None:
        raise PreconditionError(
            f"job '{job}' is already drained (batch {record.drain.batch}, "
            f"{record.drain.drained_at}); run it again to process new input, or snapshot it")
    checkpoint = registry.checkpoint(job)
    if not checkpoint.exists() or checkpoint.latest_committed_batch() is None:
        raise NoCommittedBatchError(
            f"job '{job}' has no committed batch in {checkpoint.root}; there is nothing to drain")
    if record.effective_status() == "running":
        echo(f"asking job '{job}' (pid {record.pid}) to stop: no new input from here")
        registry.request_stop(job)
        wait_until_stopped(registry, job, CANCEL_TIMEOUT_S)
    options = RunOptions(job=job, job_file=Path(record.job_file), params=record.params,
                         conf=record.conf, master=record.master, max_batches=1,
                         pending_batch_only=True)
    last = checkpoint.require_latest_committed_batch()
    in_flight = checkpoint.uncommitted_batch()
    if in_flight is not None:
        echo(f"completing in-flight batch {in_flight}")
        run_job(home, options, spark=spark, echo=echo)
        last = checkpoint.require_latest_committed_batch()
    written: list[DrainBatch] = []

    def prepare(_planned: PlannedJob) -> None:
        written.append(write_drain_offsets(checkpoint, last))
        echo(f"drain batch {last + 1}: watermark and clock at their maximum, no new input")

    try:
        run_job(home, options, spark=spark, prepare=prepare, echo=echo)
    finally:
        if written and remove_unrun_drain_offsets(checkpoint, written[0]):
            echo("the drain batch did not complete; its offsets entry was removed")
    if not written or checkpoint.latest_committed_batch() != written[0].batch_id:
        raise SparkQueryError(f"job '{job}': the drain batch did not complete; nothing changed")
    batch = written[0]
    restore_watermark(checkpoint, batch, int(time.time() * 1000))
    record = registry.get(job)
    names = record.operator_names()
    operators = [
        DrainedOperator(name=names.get(op.operator_id, str(op.operator_id)),
                        operator_id=op.operator_id, spark_operator_name=op.spark_operator_name,
                        rows=op.rows)
        for op in state_rows(checkpoint, batch.batch_id)
    ]
    record.drain = DrainRecord(batch=batch.batch_id, drained_at=now_iso(),
                               watermark_ms=batch.watermark_before_ms, operators=operators,
                               snapshot=snapshot)
    record.status = "drained"
    registry.save(record)
    if snapshot is not None:
        snapshot_create(home, job, snapshot, echo=echo)
    return record.drain


SOURCE_COMPACT_CONF = "spark.sql.streaming.fileSource.log.compactInterval"


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


def _source_description(record: JobRecord, source: str) -> SourceDescription:
    for known in record.sources:
        if known.name == source:
            return SourceDescription(known.name, known.kind, known.path, dict(known.options))
    names = ", ".join(s.name for s in record.sources) or "none recorded; run the job once"
    raise UnknownSourceError(f"job '{record.name}' has no source '{source}' (sources: {names})")


def _compact_interval(record: JobRecord) -> int:
    return int(record.conf.get(SOURCE_COMPACT_CONF, DEFAULT_SOURCE_COMPACT_INTERVAL))


def startpoint_set(
    home: Home, job: str, source: str, kind: PositionKind, value: str | None = None,
    partition: str | None = None, dry_run: bool = False,
) -> StartpointPreview:
    """Store where ``source`` starts at the job's next start (once), after resolving it now
    to refuse positions the source cannot take; ``dry_run`` stores nothing."""
    registry = JobRegistry(home)
    record = registry.get(job)
    info = _source_description(record, source)
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
    resolved = resolve_startpoints(info, merged, checkpoint, _compact_interval(record))
    if not dry_run:
        store.set(job, new)
    return StartpointPreview(job, source, merged, resolved, not dry_run,
                             [op.name for op in record.operators])


def startpoint_list(home: Home, job: str) -> dict[str, list[Startpoint]]:
    JobRegistry(home).get(job)
    return StartpointStore(home).all(job)


def startpoint_clear(home: Home, job: str, source: str) -> None:
    record = JobRegistry(home).get(job)
    if not StartpointStore(home).clear(job, source):
        pending = ", ".join(StartpointStore(home).all(job)) or "none"
        _source_description(record, source)  # an unknown source says so first
        raise PreconditionError(
            f"job '{job}' has no startpoint for source '{source}' (pending: {pending})")


def _apply_startpoints(home: Home, options: RunOptions, spark: SparkSession | None,
                       echo: Echo) -> None:
    """Apply pending startpoints to the job's checkpoint, once, before the job starts."""
    registry = JobRegistry(home)
    store = StartpointStore(home)
    job = options.job
    if not registry.exists(job):
        return
    pending = store.all(job)
    if not pending:
        return
    record = registry.get(job)
    if record.effective_status() == "running":
        raise JobRunningError(f"job '{job}' is already running (pid {record.pid})")
    checkpoint = registry.checkpoint(job)
    in_flight = checkpoint.uncommitted_batch()
    if checkpoint.latest_committed_batch() is not None and in_flight is not None:
        echo(f"completing batch {in_flight}, planned before the startpoints were set")
        run_job(home, replace(options, max_batches=1, until_caught_up=False,
                              pending_batch_only=True), spark=spark, echo=echo)
        record = registry.get(job)
    resolved = [resolve_startpoints(_source_description(record, source), entries, checkpoint,
                                    _compact_interval(record))
                for source, entries in pending.items()]
    # Cleared before the checkpoint changes: a crash in between loses the startpoint rather
    # than applying it twice.
    for source in pending:
        store.clear(job, source)
    batch = apply_startpoints(checkpoint, resolved)
    for result in resolved:
        record.startpoints_applied.append(AppliedStartpoint(
            source=result.source,
            startpoints=[s.model_dump(mode="json") for s in pending[result.source]],
            applied_at=now_iso(), batch=batch, **{
                k: v for k, v in result.to_dict().items()
                if k in ("offset_before", "offset_after", "positions")}))
        echo(f"startpoint applied to source '{result.source}': "
             + "; ".join(result.lines))
    registry.save(record)
