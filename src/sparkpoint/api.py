"""The Python API behind the CLI: run jobs, snapshot them, drain them, inspect snapshots and
jobs."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sparkpoint.drain import protocol as draining
from sparkpoint.errors import (
    JobRunningError,
    PreconditionError,
    SparkpointError,
    UsageError,
)
from sparkpoint.losses import ACCEPT_OPTION
from sparkpoint.recovery import recover
from sparkpoint.rehearse.run import Rehearsal as Rehearsal
from sparkpoint.rehearse.run import rehearse as rehearse
from sparkpoint.runtime import deletion
from sparkpoint.runtime.lock import job_lock
from sparkpoint.runtime.recorded import job_of_snapshots, with_recorded_conf
from sparkpoint.runtime.registry import (
    DrainRecord,
    JobRegistry,
)
from sparkpoint.runtime.runner import (
    RunOptions,
    RunResult,
    held_run,
    stop_job,
)
from sparkpoint.snapshot import take
from sparkpoint.snapshot.diff import SnapshotDiff, check_operator, diff_snapshots
from sparkpoint.snapshot.inspect import InspectReport, inspect_snapshot
from sparkpoint.snapshot.manifest import Manifest
from sparkpoint.snapshot.past import parse_time
from sparkpoint.snapshot.prune import PruneResult, check_prunable, prune_snapshot
from sparkpoint.snapshot.store import Problem, Sharing, open_snapshot_store
from sparkpoint.spark.session import DEFAULT_MASTER
from sparkpoint.spark.version import require_supported_pyspark
from sparkpoint.startpoints.protocol import StartpointPreview as StartpointPreview
from sparkpoint.startpoints.protocol import apply_pending, clear_startpoint, set_startpoint
from sparkpoint.startpoints.store import PositionKind, Startpoint, StartpointStore
from sparkpoint.storage.home import Home, validate_name
from sparkpoint.upgrade.batches import BatchChoice
from sparkpoint.upgrade.import_plain import import_plain_checkpoint
from sparkpoint.upgrade.interrupted import (
    is_own_orphan,
)
from sparkpoint.upgrade.output_check import check_output_of_existing_job, check_output_of_new_job
from sparkpoint.upgrade.resume_point import read_resume_point
from sparkpoint.upgrade.resume_point_draft import draft_resume_point
from sparkpoint.upgrade.start import check_snapshots_intact, plan_start, start_from_snapshots
from sparkpoint.upgrade.validate import UpgradePlan
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
    accept_data_loss: bool = False,
) -> RunResult:
    """Run a job. With ``from_snapshot`` or ``resume_point`` it starts as a new job whose
    checkpoint is built from snapshots; validation failures change nothing (exit 3), nor
    does an output whose sink log is ahead of the snapshot (exit 4) unless ``rewind_output``
    takes that output back to the snapshot's batch first (its later batches moved aside,
    ``sinks/rewind.py``). A job that exists runs again with its stored params, conf and
    master, updated by those given.

    ``build`` (with ``job_file`` naming it, e.g. ``python:module.function``) replaces the job
    file for Python callers; ``on_started`` receives the query once it runs.

    A start from snapshots or with pending startpoints first checks that every source still
    holds what it resumes at (Kafka offsets on the broker, input files); a gap refuses the
    start (SourceDataLostError, exit 4) unless ``accept_data_loss`` accepts it: Kafka
    partitions then resume at the earliest offset held, and the loss is recorded in the
    job's lineage."""
    validate_name(job, "job")
    _needs_spark(spark)
    if from_snapshot is not None and resume_point is not None:
        raise UsageError("use either --from-snapshot or --resume-point, not both")
    choice = BatchChoice(renumber_batches, first_batch, rewind_output)
    if choice.asked and from_snapshot is None and resume_point is None:
        raise UsageError("--renumber-batches, --first-batch and --rewind-output apply to a "
                         "new job started with --from-snapshot or --resume-point")
    registry = JobRegistry(home)
    if accept_data_loss and from_snapshot is None and resume_point is None and not (
            registry.exists(job) and StartpointStore(home).all(job)):
        raise UsageError(f"{ACCEPT_OPTION} applies to a start that checks its sources: one "
                         "with --from-snapshot or --resume-point, or of a job with pending "
                         "startpoints ('sparkpoint startpoint list JOB')")
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
        ui=ui, build=build, accept_data_loss=accept_data_loss,
    )
    if from_snapshot is not None or resume_point is not None:
        return start_from_snapshots(home, options, from_snapshot, resume_point, choice,
                                    first_batch, spark, echo, on_started)
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


def _job_started_from(home: Home, from_snapshot: str | None,
                      resume_point: Path | None) -> str | None:
    """The job whose recorded settings a start from these snapshots reuses."""
    if from_snapshot is not None:
        return job_of_snapshots(home, [from_snapshot])
    if resume_point is None:
        return None
    try:
        point = read_resume_point(resume_point).point
    except (SparkpointError, OSError):
        return None  # the plan reports the file's problems itself
    return job_of_snapshots(home, point.snapshots()) if point is not None else None


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
    accept_data_loss: bool = False,
) -> UpgradePlan:
    """Dry run: what would resume, initialize or be dropped, the batch ids the job would
    continue with, and every problem. Starts no query and writes only scratch files,
    including Spark's own restart check. Input the sources no longer hold is a problem
    (a warning with ``accept_data_loss``). Conf not given is the recorded conf of the job
    the snapshots were taken of (``runtime/recorded.py``)."""
    if (from_snapshot is None) == (resume_point is None):
        raise UsageError("give exactly one of --from-snapshot SNAP or --resume-point FILE")
    choice = BatchChoice(renumber_batches, first_batch, rewind_output)
    _needs_spark(spark)
    conf = with_recorded_conf(home, _job_started_from(home, from_snapshot, resume_point),
                              conf or {}, echo)
    return plan_start(home, job_file, params or {}, conf, master, from_snapshot,
                      resume_point, choice, spark, echo, accept_data_loss)


def resume_point_build(
    home: Home,
    job_file: Path,
    snapshot: str,
    params: Mapping[str, str] | None = None,
    conf: Mapping[str, str] | None = None,
    master: str | None = None,
    spark: SparkSession | None = None,
    echo: Echo = _quiet,
) -> str:
    """The default resume point as YAML: same names resume, new ones initialize; snapshot
    operators the job lacks are listed in comments, to drop deliberately. Conf not given is
    the snapshot's job's recorded conf (``runtime/recorded.py``)."""
    _needs_spark(spark)
    conf = with_recorded_conf(home, job_of_snapshots(home, [snapshot]), conf or {}, echo)
    return draft_resume_point(home, job_file, snapshot, params or {}, conf, master, spark)


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
    checkpoint_dir: Path | str,
    snapshot: str,
    job_file: Path,
    params: Mapping[str, str] | None = None,
    conf: Mapping[str, str] | None = None,
    master: str | None = None,
    spark: SparkSession | None = None,
    echo: Echo = _quiet,
    accept_data_loss: bool = False,
) -> Manifest:
    """Snapshot a checkpoint that plain Spark wrote (``checkpoint_dir``: a local directory
    or a URL, ``s3a://bucket/path`` or ``hdfs://namenode:port/path``), its sources and
    operators named after those of JOB_FILE (the sparkpoint version of the same query). The
    checkpoint is only read, where it is; on any mismatch nothing is created, nor when its
    sources no longer hold what a start from it reads (SourceDataLostError) unless
    ``accept_data_loss`` (then the loss is recorded in the snapshot's manifest)."""
    validate_name(snapshot, "snapshot")
    return import_plain_checkpoint(home, checkpoint_dir, snapshot, job_file, params or {},
                                   conf or {}, master, spark, echo, accept_data_loss)


def snapshot_prune(
    home: Home,
    snapshot: str,
    new_snapshot: str,
    operator: str,
    where: str,
    spark: SparkSession | None = None,
    echo: Echo = _quiet,
    master: str | None = None,
    conf: Mapping[str, str] | None = None,
) -> PruneResult:
    """Write NEW_SNAPSHOT: SNAPSHOT without the keys of OPERATOR that match WHERE (Spark SQL
    on the key columns). SNAPSHOT is only read; the new one holds the same batch.
    ``master`` and ``conf``: of the session made when ``spark`` is not given (a home on S3
    adds its s3a settings; a caller's session is used through a copy with them)."""
    from sparkpoint.runtime.runner import new_log_file
    from sparkpoint.spark.job_session import session_for_job
    from sparkpoint.spark.local_fs import FILE_MANAGER_CONF
    from sparkpoint.spark.s3a import s3a_conf
    from sparkpoint.spark.session import apply_query_conf, create_session

    validate_name(snapshot, "snapshot")
    store = open_snapshot_store(home)
    manifest = store.get(snapshot)
    check_prunable(store, manifest, new_snapshot, operator)
    check_snapshots_intact(store, [snapshot])
    _needs_spark(spark)
    # A prune in the snapshots' store reads it through Spark's s3a, with the settings a
    # job of a home there gets.
    settings = {**s3a_conf(store.location, conf or {}), **(conf or {})}
    session = session_for_job(spark) if spark is not None else create_session(
        master, settings, "sparkpoint:prune", log_file=new_log_file(home.logs_dir, "prune"))
    apply_query_conf(session, {key: value for key, value in settings.items()
                               if key.startswith("spark.hadoop.") or key == FILE_MANAGER_CONF})
    return prune_snapshot(home, store, session, snapshot, new_snapshot, operator, where, echo)


def snapshot_diff(
    home: Home,
    a: str,
    b: str,
    operator: str | None = None,
    rows: int = 0,
    spark: SparkSession | None = None,
    echo: Echo = _quiet,
    master: str | None = None,
) -> SnapshotDiff:
    """Per operator (matched by name): the keys only in snapshot A, only in B, and in both
    with other values, counted by Spark's state reader, with up to ``rows`` examples of each.
    Both snapshots are only read. ``master``: the Spark master of the session made when
    ``spark`` is not given."""
    from sparkpoint.runtime.runner import new_log_file
    from sparkpoint.spark.session import create_session

    validate_name(a, "snapshot")
    validate_name(b, "snapshot")
    if rows < 0:
        raise UsageError(f"--rows: expected a number of rows >= 0, found {rows}")
    store = open_snapshot_store(home)
    check_operator(store.get(a), store.get(b), operator)
    check_snapshots_intact(store, [a, b])
    _needs_spark(spark)
    session = spark or create_session(master, {}, "sparkpoint:diff",
                                      log_file=new_log_file(home.logs_dir, "diff"))
    return diff_snapshots(store, session, a, b, operator, rows, echo)


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
    return inspect_snapshot(open_snapshot_store(home), snapshot, operator, rows)


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
    return stop_job(home, job, wait, echo)


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


def startpoint_set(
    home: Home, job: str, source: str, kind: PositionKind, value: str | None = None,
    partition: str | None = None, dry_run: bool = False,
) -> StartpointPreview:
    """Store where ``source`` starts at the job's next start (once), after resolving it now
    to refuse positions the source cannot take; ``dry_run`` stores nothing."""
    validate_name(source, "source")
    return set_startpoint(home, job, source, kind, value, partition, dry_run)


def startpoint_list(home: Home, job: str) -> dict[str, list[Startpoint]]:
    JobRegistry(home).get(job)
    return StartpointStore(home).all(job)


def startpoint_clear(home: Home, job: str, source: str) -> None:
    validate_name(source, "source")
    clear_startpoint(home, job, source)
