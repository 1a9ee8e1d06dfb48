"""The Python API behind the CLI: run jobs, snapshot them, drain them, inspect snapshots and
jobs."""

from __future__ import annotations

import contextlib
import datetime as dt
import shutil
import tempfile
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sparkpoint.checkpoint.layout import Checkpoint
from sparkpoint.checkpoint.retained import RetainedBatch, iso_utc, snapshottable_batches
from sparkpoint.checkpoint.sink_log import (
    DEFAULT_COMPACT_INTERVAL,
    latest_batch,
    seed_empty_history,
)
from sparkpoint.checkpoint.source_log import (
    DEFAULT_SOURCE_COMPACT_INTERVAL,
    file_source_log_offset,
    read_source_log,
)
from sparkpoint.crash_points import crash_point
from sparkpoint.drain.synthetic import (
    plan_drain_batch,
    remove_unrun_drain_offsets,
    write_drain_offsets,
)
from sparkpoint.errors import (
    JobFileError,
    JobRunningError,
    NameTakenError,
    NoCommittedBatchError,
    PreconditionError,
    SinkAheadError,
    SnapshotDamagedError,
    SparkpointError,
    SparkQueryError,
    UnknownOperatorError,
    UnknownSourceError,
    UsageError,
    ValidationError,
)
from sparkpoint.rehearse.run import Rehearsal as Rehearsal
from sparkpoint.rehearse.run import rehearse as rehearse
from sparkpoint.runtime.intents import DrainIntent
from sparkpoint.runtime.intents import load as load_intent
from sparkpoint.runtime.intents import remove as remove_intent
from sparkpoint.runtime.intents import save as save_intent
from sparkpoint.runtime.lock import held_lease, job_lock, lock_holder
from sparkpoint.runtime.progress import ProgressSummary, read_progress
from sparkpoint.runtime.recovery import (
    finish_drain,
    finish_startpoints,
    record_startpoints,
    recover,
    snapshot_job,
)
from sparkpoint.runtime.registry import (
    JOBS_LOOKED_AT_ONCE,
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
from sparkpoint.sinks.gaps import fill_gap, find_gap, is_repartition_batch
from sparkpoint.sinks.ownership import (
    refuse_output_with_history,
    refuse_start_outside_lineage,
    start_outside_lineage,
    writers_of,
)
from sparkpoint.sinks.rewind import finished as finished_rewinds
from sparkpoint.sinks.rewind import pending as pending_rewinds
from sparkpoint.sinks.rewind import plan_rewind
from sparkpoint.sinks.rewind import rewind as rewind_output_to
from sparkpoint.snapshot.export import JobInfo
from sparkpoint.snapshot.inspect import InspectReport, inspect_checkpoint, operator_checks
from sparkpoint.snapshot.manifest import Manifest
from sparkpoint.snapshot.past import batch_at, parse_time, require_held
from sparkpoint.snapshot.prune import PruneResult, check_prunable, prune_snapshot
from sparkpoint.snapshot.store import Problem, Sharing, SnapshotStore, open_snapshot_store
from sparkpoint.sources.file_input import input_files, local_directory
from sparkpoint.sources.positions import SourceDescription
from sparkpoint.spark.session import DEFAULT_MASTER
from sparkpoint.spark.version import installed_pyspark_version, require_supported_pyspark
from sparkpoint.startpoints.resolve import Resolved
from sparkpoint.startpoints.resolve import resolve as resolve_startpoints
from sparkpoint.startpoints.store import WHOLE_SOURCE, PositionKind, Startpoint, StartpointStore
from sparkpoint.storage.home import Home, validate_name
from sparkpoint.storage.location import Location, tree_bytes
from sparkpoint.upgrade.adopt import adopt
from sparkpoint.upgrade.assemble import used_snapshots
from sparkpoint.upgrade.batches import BatchChoice, check_first_batch
from sparkpoint.upgrade.interrupted import (
    clear_intent,
    is_own_orphan,
    record_sink_fill,
    roll_back,
)
from sparkpoint.upgrade.restore import build_new_checkpoint, job_shape, resolve
from sparkpoint.upgrade.resume_point import flow_mapping, load_resume_point, read_resume_point
from sparkpoint.upgrade.validate import UpgradePlan, default_resume_point

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming.query import StreamingQuery

Echo = Callable[[str], None]
CANCEL_TIMEOUT_S = 300.0
COMPACT_INTERVAL_CONF = "spark.sql.streaming.fileSink.log.compactInterval"


def _quiet(_message: str) -> None:
    pass


def _needs_spark(spark: SparkSession | None) -> None:
    """Refuse an untested pyspark before anything changes, when sparkpoint will start Spark
    itself (a session lent by the caller is the caller's choice)."""
    if spark is None:
        require_supported_pyspark()


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
    registry.remove_deleted_leftovers()
    params, conf = dict(params or {}), dict(conf or {})
    check_output: Callable[[PlannedJob], Lineage | None] | None = None
    if from_snapshot is None and resume_point is None and registry.exists(job):
        record = registry.get(job)
        params = _merged(record.params, params, "param", echo)
        conf = _merged(record.conf, conf, "conf", echo)
        if master is None:
            master = record.master
        elif master != (record.master or DEFAULT_MASTER):
            # A record without a master ran on the default one: the same master given
            # explicitly (spark-submit always gives one) is no change.
            echo(f"master: {record.master or DEFAULT_MASTER} -> {master}")
        check_output = _output_of_existing_job(registry, job, conf, echo)
    elif from_snapshot is None and resume_point is None:
        check_output = _output_of_new_job(registry, job)
    options = RunOptions(
        job=job, job_file=job_file.absolute() if build is None else job_file, params=params,
        conf=conf, master=master, until_caught_up=until_caught_up, max_batches=max_batches,
        ui=ui, build=build,
    )
    if from_snapshot is not None or resume_point is not None:
        store = open_snapshot_store(home)
        point = load_resume_point(resume_point) if resume_point is not None else None
        if from_snapshot is not None:
            check_first_batch(first_batch, store.get(from_snapshot).batch_id)
        target = registry.checkpoint(job).root
        # A checkpoint that an interrupted start built and no record owns is rolled back
        # below, under the job's lock; any other makes the name taken.
        if registry.exists(job) or (target.exists() and not is_own_orphan(target)):
            raise NameTakenError(
                f"job '{job}' already exists; a job started from snapshots must be new: choose "
                "another --job name (or drop --from-snapshot/--resume-point to continue it)"
            )
        _check_snapshots_intact(store, point.snapshots() if point else [from_snapshot or ""])

        def prepare(planned: PlannedJob) -> Lineage:
            crash_point("restore.job_locked")
            # A checkpoint left by a cut-off start goes whole.
            roll_back(target, registry.exists(job), lambda line: echo(f"job '{job}': {line}"))
            resolution = resolve(store, planned, point, from_snapshot, choice)
            refuse_start_outside_lineage(registry, store, job, planned.file_sink,
                                         used_snapshots(resolution.plan))
            for warning in resolution.plan.warnings:
                echo(f"warning: {warning}")
            if resolution.sink_problem is not None and \
                    resolution.plan.problems == [resolution.sink_problem]:
                raise SinkAheadError(f"job '{job}' not started, nothing was created: "
                                     f"{resolution.sink_problem}")
            if not resolution.plan.ok:
                raise ValidationError(
                    f"the job cannot resume ({len(resolution.plan.problems)} problem(s)); "
                    "nothing was created:\n  " + "\n  ".join(resolution.plan.problems))
            numbering = resolution.plan.batches
            rewind_to = numbering.rewind_to_batch if numbering is not None else None
            with contextlib.ExitStack() as writers:
                rewind_plan = None
                if rewind_to is not None and planned.file_sink is not None:
                    # Nobody may write the output from here until its files are moved.
                    snapshot_jobs = {s.manifest.job for s in resolution.snapshots.values()}
                    _lock_writers(writers, home, planned.file_sink, snapshot_jobs, echo)
                    rewind_plan = plan_rewind(
                        planned.file_sink, rewind_to,
                        f"job '{job}' started from {from_snapshot or resume_point} "
                        "with --rewind-output")
                result = build_new_checkpoint(
                    planned, resolution, target, echo,
                    spark_location=home.checkpoint_location(job) if home.remote else None)
                if rewind_plan is not None and result.batch_id is not None:
                    rewind_output_to(rewind_plan)
                    echo(f"job '{job}': {rewind_plan.summary()}")
            used = sorted(resolution.snapshots)
            if result.batch_id is not None:
                echo(f"built checkpoint for job '{job}' from {', '.join(used)} "
                     f"(batch {result.batch_id})")
                if numbering is not None and numbering.renumbered:
                    echo(f"batch ids renumbered: snapshot batch {numbering.snapshot_batch} "
                         f"continues as batch {numbering.checkpoint_batch}")
                if planned.file_sink is not None:
                    _close_sink_gap(planned, target, result.batch_id, echo)
            first = resolution.snapshots[used[0]].manifest if used else None
            return Lineage(
                from_snapshot=from_snapshot or (",".join(used) or None),
                snapshot_job=first.job if first else None,
                snapshot_batch=result.batch_id,
                resume_point=str(resume_point) if resume_point is not None else None,
            )

        def on_recorded() -> None:
            clear_intent(target)

        return run_job(home, options, spark=spark, prepare=prepare, echo=echo,
                       on_recorded=on_recorded)
    target = registry.checkpoint(job).root
    if not registry.exists(job) and is_own_orphan(target):
        raise PreconditionError(
            f"job '{job}': {target} was built by a start from a snapshot that was "
            "interrupted before the job was recorded; run the same command with "
            "--from-snapshot/--resume-point again to roll it back and rebuild it")
    # Held from recovery to the end of the run, so nothing comes in between.
    with job_lock(home, job, echo, wait=False):
        if registry.exists(job):
            recover(home, job, echo)
            _apply_startpoints(home, options, spark, echo)
        return run_job(home, options, spark=spark, prepare=check_output, echo=echo,
                       on_started=on_started)


def _close_sink_gap(planned: PlannedJob, target: Location, batch: int,
                    echo: Echo) -> None:
    """Give the new job's output the sink log entries of every batch up to the new
    checkpoint's ``batch`` that it lacks (Spark's repartition batch, batch ids skipped by
    --first-batch, a new output's history), before Spark writes the next one; they are named
    in the start's intent first, so that a cut-off start takes them back."""
    assert planned.file_sink is not None
    interval = int(planned.conf.get(COMPACT_INTERVAL_CONF, DEFAULT_COMPACT_INTERVAL))
    gap = find_gap(planned.file_sink, batch, interval)
    if not gap.batches:
        return
    record_sink_fill(target, gap)
    crash_point("sink_gap.recorded")
    fill_gap(gap, lambda: crash_point("sink_gap.entry_written"))
    first, last = gap.batches[0], gap.batches[-1]
    echo(f"gave the output {planned.file_sink} empty sink log entries for batches "
         f"{first}..{last}, which write nothing to it (so that it has no hole)")
    crash_point("restore.sink_seeded")


# How a job record names a build function given by a Python caller instead of a job file.
PYTHON_BUILD_PREFIX = "python:"


def _merged(stored: Mapping[str, str], given: Mapping[str, str], what: str,
            echo: Echo) -> dict[str, str]:
    """Stored values updated by the given ones; each change is reported."""
    for key, value in given.items():
        if stored.get(key) != value:
            echo(f"{what} {key}: {stored.get(key, '(unset)')} -> {value}")
    return {**stored, **given}


def _lock_writers(stack: contextlib.ExitStack[Any], home: Home, output: Path,
                  snapshot_jobs: set[str], echo: Echo) -> None:
    """Hold, on ``stack``, the lock of every job of the home that may write ``output``: the
    snapshots' jobs and every job whose latest run wrote it. A running one refuses the rewind
    (its query would go on writing files and log entries beside the moved ones)."""
    registry = JobRegistry(home)
    writers = set(writers_of(registry, output)) | (snapshot_jobs & set(registry.names()))
    for writer in sorted(writers):
        holder = lock_holder(home, writer)
        if holder is not None:
            raise JobRunningError(
                f"job '{writer}' writes the output {output} and is running (pid {holder}); "
                f"its files cannot be moved aside under it: stop it first ('sparkpoint jobs "
                f"stop {writer} --wait'), then start again with --rewind-output; nothing was "
                "changed")
        stack.enter_context(job_lock(home, writer, echo))


def _output_of_existing_job(
    registry: JobRegistry, job: str, conf: Mapping[str, str], echo: Echo
) -> Callable[[PlannedJob], None]:
    """Check, before the query starts, that a file sink's log matches the job's checkpoint.

    Spark's file sink skips every batch its log already has and compacts from the entries of
    earlier batches. An output directory without a log (the job was given a new, empty
    output) gets an empty history up to the job's last batch, as a job started from a
    snapshot does. A log that ends before the job's last batch, or more than one batch after
    it, is another job's output (or an older one of this job): the run is refused, since
    Spark would fail at its next compaction or silently skip batches.
    """

    def prepare(planned: PlannedJob) -> None:
        if planned.file_sink is None:
            return
        last = registry.checkpoint(job).latest_committed_batch()
        ours = -1 if last is None else last
        _refuse_rewound_history(registry.get(job), planned.file_sink, ours)
        sink_last = latest_batch(planned.file_sink)
        if sink_last is None:
            interval = int(conf.get(COMPACT_INTERVAL_CONF, DEFAULT_COMPACT_INTERVAL))
            if last is not None and seed_empty_history(planned.file_sink, last, interval):
                echo(f"gave the new output {planned.file_sink} an empty sink history up to "
                     f"batch {last}")
            return
        # Batches Spark's offline repartition committed write nothing to the sink: their
        # entries are owed, not another run's.
        if sink_last < ours and all(is_repartition_batch(registry.checkpoint(job), b)
                                    for b in range(sink_last + 1, ours + 1)):
            interval = int(conf.get(COMPACT_INTERVAL_CONF, DEFAULT_COMPACT_INTERVAL))
            gap = find_gap(planned.file_sink, ours, interval)
            fill_gap(gap)
            echo(f"gave the output {planned.file_sink} empty sink log entries for Spark's "
                 f"repartition batches {gap.batches[0]}..{gap.batches[-1]}")
            return
        # The sink writes its log entry just before the batch commits: one batch ahead is a
        # run stopped in between, whose offsets entry for that batch is there. Without it the
        # entry is another job's (a start into this output cut off after filling its log).
        in_between = sink_last == ours + 1 and \
            registry.checkpoint(job).uncommitted_batch() == sink_last
        if not (sink_last == ours or in_between):
            raise PreconditionError(
                f"job '{job}': output {planned.file_sink} holds batches up to {sink_last} of "
                f"another run, but the job's last committed batch is "
                f"{'none' if last is None else last}; each job needs an output directory of "
                "its own: pass a new, empty directory (or the job's previous output)")

    return prepare


def _refuse_rewound_history(record: JobRecord, output: Path, ours: int) -> None:
    """A rewind that moved this job's batches out of the output, after its last run, gave
    the table to the job that rewound it: this job running on would write into that job's
    history (and Spark's sink would skip whichever batch ids they share)."""
    last_run = record.runs[-1].started_at if record.runs else ""
    for done in finished_rewinds(output):
        if done.to_batch < ours <= done.latest_batch and done.recorded_at > last_run:
            raise PreconditionError(
                f"job '{record.name}': its batches after {done.to_batch} in the output {output} "
                f"were moved aside to {done.directory} ({done.reason}); the table now "
                f"continues from batch {done.to_batch} without them: run this job into a new, "
                "empty output directory (--param of its output), or delete it ('sparkpoint "
                f"jobs delete {record.name}'); nothing was changed")


def _output_of_new_job(registry: JobRegistry, job: str) -> Callable[[PlannedJob], None]:
    """A job new to the home runs batches from 0: an output whose sink log holds batches
    would skip them all, so it is refused (most often the name is a typo)."""

    def prepare(planned: PlannedJob) -> None:
        if planned.file_sink is not None:
            refuse_output_with_history(registry, job, planned.file_sink)

    return prepare


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
    _check_snapshots_intact(store, point.snapshots() if point else [from_snapshot or ""])
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
        resolution = resolve(store, planned, point, from_snapshot, choice, read)
        for unfinished in pending_rewinds(planned.file_sink) if planned.file_sink else []:
            resolution.plan.warnings.append(
                f"the output {unfinished.output} has an interrupted rewind to batch "
                f"{unfinished.to_batch}; the next run into it finishes it (the sink checks "
                "here read its log as it is now)")
        if resolution.plan.ok:
            scratch = Path(tempfile.mkdtemp(prefix="sparkpoint-plan-")) / "checkpoint"
            try:
                build_new_checkpoint(planned, resolution, scratch, echo, publish=False)
            except ValidationError:
                pass  # the problem is in the plan already
            finally:
                shutil.rmtree(scratch.parent, ignore_errors=True)
        # A precondition of the start, not of the checkpoint it builds: listed after the
        # dry-run build, which it does not change.
        outside = start_outside_lineage(JobRegistry(home), store, planned.file_sink,
                                        used_snapshots(resolution.plan))
        if outside is not None:
            resolution.plan.problems.append(outside)
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
    meaning local time, or a datetime) the newest batch committed at or before it; either
    must still be held by the checkpoint (BatchNotHeldError names the batches it holds)."""
    validate_name(snapshot, "snapshot")
    if batch is not None and at is not None:
        raise UsageError("use either --batch or --at, not both")
    if batch is not None and batch < 0:
        raise UsageError(f"--batch: expected a batch id >= 0, found {batch}")
    moment = parse_time(at) if isinstance(at, str) else at
    registry = JobRegistry(home)
    record = registry.get(job)
    store = open_snapshot_store(home)
    if store.exists(snapshot):
        raise NameTakenError(
            f"snapshot '{snapshot}' already exists; choose another name or delete it first"
        )
    if cancel and (batch is not None or moment is not None):
        # Refused before the job is stopped: a refusal changes nothing.
        _past_batch(job, registry.checkpoint(job), batch, moment)
    if cancel:
        if record.effective_status() == "running":
            echo(f"asking job '{job}' (pid {record.pid}) to stop after its last committed batch")
            registry.request_stop(job)
            record = wait_until_stopped(registry, job, CANCEL_TIMEOUT_S, record)
            echo(f"job '{job}' is {record.effective_status()}")
        else:
            echo(f"job '{job}' is not running ({record.effective_status()}); snapshotting it")
    checkpoint = registry.checkpoint(job)
    if not checkpoint.exists():
        raise PreconditionError(
            f"job '{job}' has no checkpoint yet at {checkpoint.root}; run it first"
        )
    if record.effective_status() != "running":
        # An interrupted drain may have left the maximal watermark in the last batch: it
        # must not reach a snapshot. Held by another process (a run, or another snapshot
        # recovering it right now): that holder completes or rolls back what was left.
        try:
            with job_lock(home, job):
                recover(home, job, echo)
        except JobRunningError:
            pass
    if moment is not None:
        batch = _past_batch(job, checkpoint, batch, moment)
        echo(f"batch {batch} is the newest committed at or before {iso_utc(moment)}")
    elif batch is not None:
        _past_batch(job, checkpoint, batch, moment)
    return snapshot_job(home, job, snapshot, echo, batch)


def _past_batch(job: str, checkpoint: Checkpoint, batch: int | None,
                moment: dt.datetime | None) -> int:
    if not checkpoint.exists():
        raise PreconditionError(
            f"job '{job}' has no checkpoint yet at {checkpoint.root}; run it first")
    if moment is not None:
        return batch_at(job, checkpoint, moment)
    assert batch is not None
    return require_held(job, checkpoint, batch)


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
) -> PruneResult:
    """Write NEW_SNAPSHOT: SNAPSHOT without the keys of OPERATOR that match WHERE (Spark SQL
    on the key columns). SNAPSHOT is only read; the new one holds the same batch."""
    from sparkpoint.runtime.runner import new_log_file
    from sparkpoint.spark.session import create_session

    validate_name(snapshot, "snapshot")
    store = open_snapshot_store(home)
    manifest = store.get(snapshot)
    check_prunable(store, manifest, new_snapshot, operator)
    _check_snapshots_intact(store, [snapshot])
    _needs_spark(spark)
    session = spark or create_session(None, {}, "sparkpoint:prune",
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


def snapshot_verify(home: Home, snapshot: str) -> list[Problem]:
    return open_snapshot_store(home).verify(snapshot)


def snapshot_delete(home: Home, snapshot: str) -> None:
    open_snapshot_store(home).delete(snapshot)


@dataclass(frozen=True)
class JobView:
    record: JobRecord
    status: str
    batch: int | None
    # The last batch the latest run processed, as Spark reported it (None before any).
    progress: ProgressSummary | None = None
    # Input files of each file source the job has not read yet (None: not a local file source).
    files_behind: Mapping[str, int | None] = field(default_factory=dict)
    # Committed batches 'snapshot create --batch' can still take (None: not asked for, as
    # in 'jobs list', or the checkpoint could not be read).
    snapshottable: list[RetainedBatch] | None = None
    # Per stateful operator: can its state grow without bound (see checkpoint/boundedness).
    state_checks: list[dict[str, Any]] | None = None

    def to_dict(self) -> dict[str, Any]:
        data = self.record.model_dump(mode="json")
        data["status"] = self.status
        data["batch"] = self.batch
        data["progress"] = None if self.progress is None else asdict(self.progress)
        data["files_behind"] = dict(self.files_behind)
        if self.snapshottable is not None:
            data["snapshottable_batches"] = [entry.to_dict() for entry in self.snapshottable]
        if self.state_checks is not None:
            data["state_checks"] = self.state_checks
        return data


def _files_behind(home: Home, record: JobRecord) -> dict[str, int | None]:
    """Per local file source: files in its directory that no committed batch read (None when
    that cannot be told: a remote path, a glob, a log sparkpoint cannot read)."""
    checkpoint = Checkpoint(home.checkpoint_dir(record.name))
    behind: dict[str, int | None] = {}
    for source in record.sources:
        if source.kind != "file" or source.path is None:
            continue
        try:
            behind[source.name] = _unread_files(checkpoint, source.name, source.path)
        except (SparkpointError, OSError):
            behind[source.name] = None  # a reading command reports what it can
    return behind


def _unread_files(checkpoint: Checkpoint, source: str, path: str) -> int:
    directory = local_directory(path, source)
    committed = checkpoint.latest_committed_batch()
    offsets = checkpoint.offsets(committed).sources if committed is not None else ()
    # Entries past the committed batch's log offset belong to a batch planned, not done.
    done = next((file_source_log_offset(s.offset) for s in offsets if s.name == source), None)
    read = {str(entry["path"]) for log_id, entries in
            read_source_log(checkpoint.root / "sources" / source).items()
            if done is not None and log_id <= done for entry in entries}
    return sum(1 for f in input_files(directory) if f.uri not in read)


def job_view(home: Home, job: str, details: bool = True) -> JobView:
    """What 'jobs show' reports; ``details``: also the batches that can be snapshotted."""
    registry = JobRegistry(home)
    record = registry.get(job)
    checkpoint = Checkpoint(home.checkpoint_dir(job))
    batch = checkpoint.latest_committed_batch()
    progress = read_progress(home.job_dir(job))
    summary = None if progress is None else ProgressSummary.of(progress)
    if summary is not None and record.effective_status() == "drained":
        summary = _watermark_now(summary, checkpoint, batch)
    return JobView(record, record.effective_status(), batch, summary,
                   _files_behind(home, record),
                   _snapshottable(checkpoint) if details else None,
                   _state_checks(checkpoint, record) if details else None)


def _watermark_now(summary: ProgressSummary, checkpoint: Checkpoint,
                   batch: int | None) -> ProgressSummary:
    """A drained job's last progress is the drain batch's, whose watermark was the maximal
    one; the drain then put the job's own watermark back into that batch's commit entry,
    which is where the next run takes its watermark from: show that one."""
    if summary.watermark is None or batch is None:
        return summary
    try:
        ms = checkpoint.commit(batch).next_batch_watermark_ms
    except (SparkpointError, OSError):
        return summary  # a reading command reports what it can
    moment = dt.datetime.fromtimestamp(ms / 1000, dt.UTC)
    return replace(summary, watermark=iso_utc(moment))


def _state_checks(checkpoint: Checkpoint, record: JobRecord) -> list[dict[str, Any]]:
    if not checkpoint.exists():
        return []
    try:
        return operator_checks(checkpoint, record.operator_names())
    except (SparkpointError, OSError):
        return []  # a reading command reports what it can; 'snapshot inspect' says why


def _snapshottable(checkpoint: Checkpoint) -> list[RetainedBatch]:
    if not checkpoint.exists():
        return []
    try:
        return snapshottable_batches(checkpoint)
    except (SparkpointError, OSError):
        return []  # a reading command reports what it can; 'snapshot create' says why


def jobs_list(home: Home) -> list[JobView]:
    registry = JobRegistry(home)
    registry.remove_deleted_leftovers()
    # Each job is a few reads, each a round trip in a store: several jobs at once.
    with ThreadPoolExecutor(max_workers=JOBS_LOOKED_AT_ONCE) as pool:
        return list(pool.map(lambda name: job_view(home, name, details=False),
                             registry.names()))


def jobs_stop(home: Home, job: str, wait: bool = False, echo: Echo = _quiet) -> dict[str, Any]:
    """Ask a running job to stop after its last committed batch; with ``wait``, until it has."""
    registry = JobRegistry(home)
    record = registry.get(job)
    status = record.effective_status()
    if status != "running":
        raise PreconditionError(f"job '{job}' is not running ({status}); there is nothing to "
                                "stop")
    registry.request_stop(job)
    echo(f"asked job '{job}' (pid {record.pid}) to stop after its last committed batch")
    if wait:
        record = wait_until_stopped(registry, job, CANCEL_TIMEOUT_S, record)
        status = record.effective_status()
    return {"job": job, "status": status, "stopped": status != "running",
            "batch": registry.checkpoint(job).latest_committed_batch()}


def jobs_delete(home: Home, job: str) -> dict[str, Any]:
    """Remove a job that is not running: its record, checkpoint and pending startpoints.
    Snapshots of it are kept."""
    registry = JobRegistry(home)
    registry.remove_deleted_leftovers()
    record = registry.get(job)
    holder = lock_holder(home, job)
    if record.effective_status() == "running" or holder is not None:
        raise JobRunningError(
            f"job '{job}' is running (pid {record.pid or holder}); stop it first with "
            f"'sparkpoint jobs stop {job} --wait'")
    checkpoint_bytes = tree_bytes(home.checkpoint_dir(job))
    with job_lock(home, job):  # no run can start while the job goes
        lease = held_lease(home, job)
        if lease is not None:
            lease.check()  # a fence: only the holder deletes
        registry.delete(job)
        if lease is not None:
            lease.gone_with_job()
    return {"job": job, "deleted": True, "checkpoint_bytes": checkpoint_bytes}


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
    off before is rolled back (``runtime/recovery.py``).
    """
    _needs_spark(spark)
    registry = JobRegistry(home)
    record = registry.get(job)
    if snapshot is not None:
        validate_name(snapshot, "snapshot")
        interrupted = load_intent(home, job, DrainIntent)
        finishing = interrupted is not None and interrupted.snapshot == snapshot
        if open_snapshot_store(home).exists(snapshot) and not finishing:
            raise NameTakenError(
                f"snapshot '{snapshot}' already exists; choose another name or delete it first")
    if record.effective_status() == "running":
        echo(f"asking job '{job}' (pid {record.pid}) to stop: no new input from here")
        registry.request_stop(job)
        wait_until_stopped(registry, job, CANCEL_TIMEOUT_S, record)
    with job_lock(home, job):
        recovered = recover(home, job, echo)
        if recovered.drain is not None:
            if snapshot is not None and recovered.drain.snapshot is None:
                snapshot_job(home, job, snapshot, echo)
                recovered.drain.snapshot = snapshot
                record = registry.get(job)
                record.drain = recovered.drain
                registry.save(record)
            return recovered.drain
        return _drain_locked(home, job, snapshot, spark, echo, build)


def _drain_locked(home: Home, job: str, snapshot: str | None, spark: SparkSession | None,
                  echo: Echo, build: Callable[..., Any] | None) -> DrainRecord:
    registry = JobRegistry(home)
    record = registry.get(job)
    if record.effective_status() == "drained" and record.drain is not None:
        raise PreconditionError(
            f"job '{job}' is already drained (batch {record.drain.batch}, "
            f"{record.drain.drained_at}); run it again to process new input, or snapshot it")
    checkpoint = registry.checkpoint(job)
    if not checkpoint.exists() or checkpoint.latest_committed_batch() is None:
        raise NoCommittedBatchError(
            f"job '{job}' has no committed batch in {checkpoint.root}; there is nothing to drain")
    if build is None and record.job_file.startswith(PYTHON_BUILD_PREFIX):
        raise UsageError(
            f"job '{job}' was started from a Python function ({record.job_file}), not a job "
            "file: drain it from Python with sparkpoint.drain_job(spark, job, build=...)")
    options = RunOptions(job=job, job_file=Path(record.job_file), params=record.params,
                         conf=record.conf, master=record.master, max_batches=1,
                         pending_batch_only=True, build=build)
    in_flight = checkpoint.uncommitted_batch()
    if in_flight is not None:
        echo(f"completing in-flight batch {in_flight}")
        run_job(home, options, spark=spark, echo=echo)
    intent = DrainIntent(
        drain=plan_drain_batch(checkpoint, checkpoint.require_latest_committed_batch()),
        snapshot=snapshot, started_at=now_iso())
    batch = intent.drain
    save_intent(home, job, intent)
    crash_point("drain.intent_recorded")

    def prepare(_planned: PlannedJob) -> None:
        write_drain_offsets(checkpoint, batch)
        crash_point("drain.offsets_written")
        echo(f"drain batch {batch.batch_id}: watermark and clock at their maximum, "
             "no new input")

    try:
        run_job(home, options, spark=spark, prepare=prepare, echo=echo)
    finally:
        if checkpoint.latest_committed_batch() != batch.batch_id:
            if remove_unrun_drain_offsets(checkpoint, batch):
                echo("the drain batch did not complete; its offsets entry was removed")
            remove_intent(home, job, DrainIntent)
    if checkpoint.latest_committed_batch() != batch.batch_id:
        raise SparkQueryError(f"job '{job}': the drain batch did not complete; nothing changed")
    crash_point("drain.batch_committed")
    return finish_drain(home, job, intent, echo)


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
    validate_name(source, "source")
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
        _source_description(record, source)  # an unknown source says so first
        raise PreconditionError(
            f"job '{job}' has no startpoint for source '{source}' (pending: {pending})")


def _apply_startpoints(home: Home, options: RunOptions, spark: SparkSession | None,
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
        run_job(home, replace(options, max_batches=1, until_caught_up=False,
                              pending_batch_only=True), spark=spark, echo=echo)
        record = registry.get(job)
    batch = checkpoint.require_latest_committed_batch()
    resolved = [resolve_startpoints(_source_description(record, source), entries, checkpoint,
                                    _compact_interval(record))
                for source, entries in pending.items()]
    intent = record_startpoints(home, job, batch, pending, resolved, consumed)
    finish_startpoints(home, job, intent, echo)
