"""The Python API behind the CLI: run jobs, snapshot them, drain them, inspect snapshots and
jobs."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sparkpoint.checkpoint.layout import Checkpoint
from sparkpoint.drain import protocol as draining
from sparkpoint.errors import (
    JobFileError,
    JobRunningError,
    NameTakenError,
    NoCommittedBatchError,
    PreconditionError,
    UnknownOperatorError,
    UsageError,
    ValidationError,
)
from sparkpoint.recovery import recover
from sparkpoint.rehearse.run import Rehearsal as Rehearsal
from sparkpoint.rehearse.run import rehearse as rehearse
from sparkpoint.runtime import deletion
from sparkpoint.runtime.lock import job_lock
from sparkpoint.runtime.registry import (
    DrainRecord,
    JobRegistry,
    now_iso,
)
from sparkpoint.runtime.runner import (
    CANCEL_TIMEOUT_S,
    RunOptions,
    RunResult,
    held_run,
    plan_job,
    wait_until_stopped,
)
from sparkpoint.snapshot import take
from sparkpoint.snapshot.export import JobInfo
from sparkpoint.snapshot.inspect import InspectReport, inspect_checkpoint
from sparkpoint.snapshot.manifest import Manifest
from sparkpoint.snapshot.past import parse_time
from sparkpoint.snapshot.prune import PruneResult, check_prunable, prune_snapshot
from sparkpoint.snapshot.store import Problem, Sharing, open_snapshot_store
from sparkpoint.spark.session import DEFAULT_MASTER
from sparkpoint.spark.version import installed_pyspark_version, require_supported_pyspark
from sparkpoint.startpoints.protocol import apply_pending, compact_interval, source_description
from sparkpoint.startpoints.resolve import Resolved
from sparkpoint.startpoints.resolve import resolve as resolve_startpoints
from sparkpoint.startpoints.store import WHOLE_SOURCE, PositionKind, Startpoint, StartpointStore
from sparkpoint.storage.home import Home, validate_name
from sparkpoint.upgrade.adopt import adopt, import_warning, sink_ahead
from sparkpoint.upgrade.batches import BatchChoice, check_first_batch
from sparkpoint.upgrade.interrupted import (
    is_own_orphan,
)
from sparkpoint.upgrade.output_check import check_output_of_existing_job, check_output_of_new_job
from sparkpoint.upgrade.pipeline import Mode, StartPipeline
from sparkpoint.upgrade.restore import job_shape
from sparkpoint.upgrade.resume_point import flow_mapping, read_resume_point
from sparkpoint.upgrade.start import check_snapshots_intact, start_from_snapshots
from sparkpoint.upgrade.validate import UpgradePlan, default_resume_point
from sparkpoint.views import JobView as JobView
from sparkpoint.views import job_view as job_view
from sparkpoint.views import jobs_list as jobs_list

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming.query import StreamingQuery

Echo = Callable[[str], None]


def _quiet(_message: str) -> None:
    pass


def _needs_spark(spark: SparkSession | None) -> None:
    """Refuse an untested pyspark before anything changes, when sparkpoint will start Spark
    itself (a session lent by the caller is the caller's choice)."""
    if spark is None:
        require_supported_pyspark()


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
    ui: bool = False,
    spark: SparkSession | None = None,
    echo: Echo = _quiet,
    renumber_batches: bool = False,
    first_batch: int | None = None,
    build: Callable[..., Any] | None = None,
    on_started: Callable[[StreamingQuery], None] | None = None,
    rewind_output: bool = False,
) -> RunResult:
    """Run a job. With ``from_snapshot`` or ``resume_point`` it starts as a new job whose
    checkpoint is built from snapshots; validation failures change nothing (exit 3), nor
    does an output whose sink log is ahead of the snapshot (exit 4) unless ``rewind_output``
    takes that output back to the snapshot's batch first (its later batches moved aside,
    ``sinks/rewind.py``). A job that exists runs again with its stored params, conf and
    master, updated by those given.

    ``build`` (with ``job_file`` naming it, e.g. ``python:module.function``) replaces the job
    file for Python callers; ``on_started`` receives the query once it runs."""
    validate_name(job, "job")
    _needs_spark(spark)
    if from_snapshot is not None and resume_point is not None:
        raise UsageError("use either --from-snapshot or --resume-point, not both")
    choice = BatchChoice(renumber_batches, first_batch, rewind_output)
    if choice.asked and from_snapshot is None and resume_point is None:
        raise UsageError("--renumber-batches, --first-batch and --rewind-output apply to a "
                         "new job started with --from-snapshot or --resume-point")
    registry = JobRegistry(home)
    deletion.remove_renamed_aside(home)
    params, conf = dict(params or {}), dict(conf or {})
    existing = from_snapshot is None and resume_point is None and registry.exists(job)
    if existing:
        record = registry.get(job)
        params = _merged(record.params, params, "param", echo)
        conf = _merged(record.conf, conf, "conf", echo)
        if master is None:
            master = record.master
        elif master != (record.master or DEFAULT_MASTER):
            # A record without a master ran on the default one: the same master given
            # explicitly (spark-submit always gives one) is no change.
            echo(f"master: {record.master or DEFAULT_MASTER} -> {master}")
    options = RunOptions(
        job=job, job_file=job_file.absolute() if build is None else job_file, params=params,
        conf=conf, master=master, until_caught_up=until_caught_up, max_batches=max_batches,
        ui=ui, build=build,
    )
    if from_snapshot is not None or resume_point is not None:
        return start_from_snapshots(home, options, from_snapshot, resume_point, choice,
                                    first_batch, spark, echo)
    target = registry.checkpoint(job).root
    if not registry.exists(job) and is_own_orphan(target) and not registry.tombstoned(job):
        raise PreconditionError(
            f"job '{job}': {target} was built by a start from a snapshot that was "
            "interrupted before the job was recorded; run the same command with "
            "--from-snapshot/--resume-point again to roll it back and rebuild it")
    # Held from recovery to the end of the run, so nothing comes in between.
    with job_lock(home, job, echo, wait=False):
        if registry.exists(job):
            recover(home, job, echo)
            apply_pending(home, options, spark, echo)
        with held_run(home, options, spark=spark, echo=echo) as held:
            output = held.planned.sink.location if held.planned.sink is not None else None
            if output is not None and existing:
                check_output_of_existing_job(registry, job, conf, output, echo)
            elif output is not None:
                check_output_of_new_job(registry, job, output)
            return held.execute(on_started)


def _merged(stored: Mapping[str, str], given: Mapping[str, str], what: str,
            echo: Echo) -> dict[str, str]:
    """Stored values updated by the given ones; each change is reported."""
    for key, value in given.items():
        if stored.get(key) != value:
            echo(f"{what} {key}: {stored.get(key, '(unset)')} -> {value}")
    return {**stored, **given}


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
    renumber_batches: bool = False,
    first_batch: int | None = None,
    rewind_output: bool = False,
) -> UpgradePlan:
    """Dry run: what would resume, initialize or be dropped, the batch ids the job would
    continue with, and every problem. Starts no query and writes only scratch files,
    including Spark's own restart check."""
    if (from_snapshot is None) == (resume_point is None):
        raise UsageError("give exactly one of --from-snapshot SNAP or --resume-point FILE")
    choice = BatchChoice(renumber_batches, first_batch, rewind_output)
    _needs_spark(spark)
    # Entries that do not parse are problems of the plan, not a reason to stop: the rest of
    # the file is still checked against the job and the snapshots in this run.
    read = read_resume_point(resume_point) if resume_point is not None else None
    point = read.point if read is not None else None
    store = open_snapshot_store(home)
    if from_snapshot is not None:
        check_first_batch(first_batch, store.get(from_snapshot).batch_id)
    check_snapshots_intact(store, point.snapshots() if point else [from_snapshot or ""])
    try:
        planned = plan_job("plan", job_file.absolute(), dict(params or {}), dict(conf or {}),
                           master, spark, log_dir=home.logs_dir, command="plan")
    except JobFileError as exc:
        if read is None or not read.problems:
            raise
        # The job cannot be checked against: still report the file's own problems with it.
        problems = [*read.problems, str(exc)]
        raise ValidationError(f"{len(problems)} problems:\n  " + "\n  ".join(problems),
                              problems=problems) from exc
    try:
        return StartPipeline(Mode.PLAN, home, store, planned, point, from_snapshot, choice,
                             read=read).dry_run(echo)
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
    _needs_spark(spark)
    store = open_snapshot_store(home)
    manifest = store.get(snapshot)
    planned = plan_job("resume-point", job_file.absolute(), dict(params or {}),
                       dict(conf or {}), master, spark, log_dir=home.logs_dir,
                       command="resume-point build")
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
    home: Home, job: str, snapshot: str, cancel: bool = False, echo: Echo = _quiet,
    batch: int | None = None, at: str | dt.datetime | None = None,
) -> Manifest:
    """Snapshot the latest committed batch; with ``cancel`` stop a running job first.

    ``batch`` snapshots that earlier committed batch instead, ``at`` (ISO 8601 text, naive
    meaning local time, or a datetime) the newest batch whose time (Spark's
    ``batchTimestampMs``, as 'jobs show' lists it) is at or before it; either
    must still be held by the checkpoint (BatchNotHeldError names the batches it holds)."""
    validate_name(snapshot, "snapshot")
    if batch is not None and at is not None:
        raise UsageError("use either --batch or --at, not both")
    if batch is not None and batch < 0:
        raise UsageError(f"--batch: expected a batch id >= 0, found {batch}")
    moment = parse_time(at) if isinstance(at, str) else at
    record = take.refusals(home, job, snapshot, batch, moment, cancel)
    if cancel:
        record = take.stop_for_snapshot(JobRegistry(home), job, record, echo)
    take.require_checkpoint(home, job)
    if record.effective_status() != "running":
        # An interrupted drain may have left the maximal watermark in the last batch: it
        # must not reach a snapshot. Held by another process (a run, or another snapshot
        # recovering it right now): that holder completes or rolls back what was left.
        try:
            with job_lock(home, job):
                recover(home, job, echo)
        except JobRunningError:
            pass
    return take.take(home, job, snapshot, echo, batch, moment)


def snapshot_import(
    home: Home,
    checkpoint_dir: Path,
    snapshot: str,
    job_file: Path,
    params: Mapping[str, str] | None = None,
    conf: Mapping[str, str] | None = None,
    master: str | None = None,
    spark: SparkSession | None = None,
    echo: Echo = _quiet,
) -> Manifest:
    """Snapshot a checkpoint that plain Spark wrote, its sources and operators named after
    those of JOB_FILE (the sparkpoint version of the same query). The checkpoint is only
    read; on any mismatch nothing is created."""
    validate_name(snapshot, "snapshot")
    store = open_snapshot_store(home)
    if store.exists(snapshot):
        raise NameTakenError(
            f"snapshot '{snapshot}' already exists; choose another name or delete it first")
    checkpoint = Checkpoint(checkpoint_dir.absolute())
    if not checkpoint.exists():
        raise UsageError(
            f"{checkpoint.root}: expected a Spark streaming checkpoint (a directory with "
            "'metadata', 'offsets/', 'commits/'), found none; give the checkpointLocation "
            "of the query")
    checkpoint.require_latest_committed_batch()
    _needs_spark(spark)
    planned = plan_job("import", job_file.absolute(), dict(params or {}), dict(conf or {}),
                       master, spark, log_dir=home.logs_dir,
                       command="snapshot import")
    try:
        shape, _layouts = job_shape(planned)
    finally:
        planned.release()
    adoption = adopt(checkpoint, shape)
    if adoption.problems:
        raise ValidationError(
            f"the checkpoint does not match {job_file.name} ({len(adoption.problems)} "
            "problem(s)); nothing was created:\n  " + "\n  ".join(adoption.problems),
            problems=adoption.problems)
    for note in adoption.notes:
        echo(f"warning: {note}")
    ahead = sink_ahead(checkpoint, planned.sink.location if planned.sink is not None else None)
    if ahead is not None:
        echo(f"warning: {import_warning(ahead, checkpoint, snapshot)}")
    info = JobInfo(job=f"import:{checkpoint.root}", operator_names=adoption.operator_names,
                   operator_windows=adoption.operator_windows, job_file=str(job_file.absolute()),
                   params=dict(params or {}), spark_version=installed_pyspark_version(),
                   source_names=adoption.source_names)
    echo(f"importing {checkpoint.root} as snapshot '{snapshot}': sources "
         + ", ".join(f"{k} -> {v}" for k, v in adoption.source_names.items())
         + "; operators " + ", ".join(f"{k} -> {v}" for k, v in adoption.operator_names.items()))
    return store.create(snapshot, checkpoint, info, progress=echo)


def snapshot_prune(
    home: Home,
    snapshot: str,
    new_snapshot: str,
    operator: str,
    where: str,
    spark: SparkSession | None = None,
    echo: Echo = _quiet,
    master: str | None = None,
) -> PruneResult:
    """Write NEW_SNAPSHOT: SNAPSHOT without the keys of OPERATOR that match WHERE (Spark SQL
    on the key columns). SNAPSHOT is only read; the new one holds the same batch.
    ``master``: the Spark master of the session made when ``spark`` is not given."""
    from sparkpoint.runtime.runner import new_log_file
    from sparkpoint.spark.session import create_session

    validate_name(snapshot, "snapshot")
    store = open_snapshot_store(home)
    manifest = store.get(snapshot)
    check_prunable(store, manifest, new_snapshot, operator)
    check_snapshots_intact(store, [snapshot])
    _needs_spark(spark)
    session = spark or create_session(master, {}, "sparkpoint:prune",
                                      log_file=new_log_file(home.logs_dir, "prune"))
    return prune_snapshot(home, store, session, snapshot, new_snapshot, operator, where, echo)


def snapshot_list(home: Home, job: str | None = None) -> list[Manifest]:
    return open_snapshot_store(home).manifests(job)


def snapshot_show(home: Home, snapshot: str) -> Manifest:
    return open_snapshot_store(home).get(snapshot)


def snapshot_sharing(home: Home, snapshot: str) -> Sharing:
    """Bytes of the snapshot other snapshots hold too, and its own (from manifests only)."""
    return open_snapshot_store(home).sharing(snapshot)


def snapshot_inspect(home: Home, snapshot: str, operator: str | None = None,
                     rows: int = 0) -> InspectReport:
    """What the snapshot's state holds per operator and partition, whether it can grow
    without bound, and with ``rows`` a sample of that many decoded rows per operator.
    Reads the snapshot's files only (no JVM); the snapshot is not changed."""
    if rows < 0:
        raise UsageError(f"--rows: expected a number of rows >= 0, found {rows}")
    store = open_snapshot_store(home)
    manifest = store.get(snapshot)
    if operator is not None and manifest.operator(operator) is None:
        names = ", ".join(op.name for op in manifest.operators) or "none"
        raise UnknownOperatorError(
            f"snapshot '{snapshot}' has no operator '{operator}' (operators: {names}); see "
            f"'sparkpoint snapshot show {snapshot}'")
    checkpoint = Checkpoint(store.checkpoint_path(snapshot))
    report = inspect_checkpoint(checkpoint, manifest.batch_id,
                                {op.operator_id: op.name for op in manifest.operators},
                                only=operator, sample_rows=rows)
    report.snapshot, report.job = manifest.name, manifest.job
    return report


def snapshot_count_rows(home: Home, snapshot: str) -> dict[str, int]:
    """Each operator's rows in the snapshot, counted by reading its state (the manifest's
    rows come from Spark's progress of the batch when the job recorded one)."""
    report = snapshot_inspect(home, snapshot)
    return {op.name: op.rows for op in report.operators}


def snapshot_verify(home: Home, snapshot: str) -> list[Problem]:
    return open_snapshot_store(home).verify(snapshot)


def snapshot_delete(home: Home, snapshot: str) -> None:
    open_snapshot_store(home).delete(snapshot)


def jobs_stop(home: Home, job: str, wait: bool = False, echo: Echo = _quiet) -> dict[str, Any]:
    """Ask a running job to stop after its last committed batch; with ``wait``, until it has."""
    registry = JobRegistry(home)
    record = registry.get(job)
    status = record.effective_status()
    if status != "running":
        raise PreconditionError(f"job '{job}' is not running ({status}); there is nothing to "
                                "stop")
    registry.request_stop(job)
    echo(f"asked job '{job}' ({record.describe_process()}) to stop after its last committed "
         "batch")
    if wait:
        record = wait_until_stopped(registry, job, CANCEL_TIMEOUT_S, record)
        status = record.effective_status()
    return {"job": job, "status": status, "stopped": status != "running",
            "batch": registry.checkpoint(job).latest_committed_batch()}


def jobs_delete(home: Home, job: str) -> dict[str, Any]:
    """Remove a job that is not running: its record, checkpoint and pending startpoints.
    Snapshots of it are kept."""
    deletion.remove_renamed_aside(home)
    held = deletion.refusals(home, job)
    with job_lock(home, job):  # no run can start while the job goes
        deletion.delete(home, job)  # the lease goes with the job
    return {"job": job, "deleted": True, **held}


def drain(
    home: Home,
    job: str,
    snapshot: str | None = None,
    spark: SparkSession | None = None,
    echo: Echo = _quiet,
    build: Callable[..., Any] | None = None,
) -> DrainRecord:
    """Stop the job (if running), complete an in-flight batch, run one synthetic batch that
    fires every event-time window and timer, put the job's watermark back, and optionally
    snapshot the drained state. Refusals (unknown, drained, nothing committed) change nothing.

    Crash-safe: the drain batch is recorded in the home before the checkpoint changes; a
    drain cut off after its batch committed is finished by the next drain or run, one cut
    off before is rolled back (``drain/protocol.py``).
    """
    _needs_spark(spark)
    record = draining.refusals(home, job, snapshot)
    draining.stop_running(home, job, record, echo)
    with job_lock(home, job):
        recovered = recover(home, job, echo)
        return draining.drain_held(home, job, snapshot, spark, echo, build, recovered.drain)


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


def startpoint_set(
    home: Home, job: str, source: str, kind: PositionKind, value: str | None = None,
    partition: str | None = None, dry_run: bool = False,
) -> StartpointPreview:
    """Store where ``source`` starts at the job's next start (once), after resolving it now
    to refuse positions the source cannot take; ``dry_run`` stores nothing."""
    validate_name(source, "source")
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


def startpoint_list(home: Home, job: str) -> dict[str, list[Startpoint]]:
    JobRegistry(home).get(job)
    return StartpointStore(home).all(job)


def startpoint_clear(home: Home, job: str, source: str) -> None:
    validate_name(source, "source")
    record = JobRegistry(home).get(job)
    cleared = StartpointStore(home).clear(job, source)
    if not cleared:
        pending = ", ".join(StartpointStore(home).all(job)) or "none"
        source_description(record, source)  # an unknown source says so first
        raise PreconditionError(
            f"job '{job}' has no startpoint for source '{source}' (pending: {pending})")


