"""Starting a new job from snapshots (``run --from-snapshot`` / ``--resume-point``): the
protocol, its intent and its recovery.

Under the new job's lock: what a cut-off start left is rolled back (``upgrade/interrupted.py``),
the resume point is resolved and validated, the output's writers are locked when the output
is taken back (``--rewind-output``), the checkpoint is built and published
(``upgrade/restore.py``: an intent first, naming its query id), the output gets the sink log
entries it lacks (named in the intent first), and the job record is written; the intent goes
once the record owns the checkpoint. Nothing is created when validation refuses the start.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sparkpoint.checkpoint.sink_log import (
    COMPACT_INTERVAL_CONF,
    DEFAULT_COMPACT_INTERVAL,
    latest_batch,
)
from sparkpoint.crash_points import crash_point
from sparkpoint.errors import (
    JobFileError,
    JobRunningError,
    NameTakenError,
    SnapshotDamagedError,
    SparkpointError,
    ValidationError,
)
from sparkpoint.runtime.lock import holder_of, job_lock
from sparkpoint.runtime.registry import (
    JobRegistry,
    Lineage,
)
from sparkpoint.runtime.runner import (
    PlannedJob,
    RunOptions,
    RunResult,
    held_run,
    plan_job,
)
from sparkpoint.sinks.base import Sink
from sparkpoint.sinks.rewind import plan_rewind
from sparkpoint.snapshot.store import SnapshotStore, open_snapshot_store
from sparkpoint.spark.s3a import s3a_conf
from sparkpoint.storage.home import Home
from sparkpoint.storage.location import Location
from sparkpoint.upgrade.batches import BatchChoice, check_first_batch
from sparkpoint.upgrade.interrupted import (
    clear_intent,
    is_own_orphan,
    record_sink_fill,
    roll_back,
)
from sparkpoint.upgrade.output_ownership import (
    lineage_of,
    same_output,
    writers_of,
)
from sparkpoint.upgrade.pipeline import Mode, StartPipeline
from sparkpoint.upgrade.plan_scratch import plan_target
from sparkpoint.upgrade.resume_point import (
    ResumePoint,
    ResumeSource,
    ResumeState,
    load_resume_point,
    read_resume_point,
)
from sparkpoint.upgrade.validate import UpgradePlan

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming.query import StreamingQuery

Echo = Callable[[str], None]


def check_snapshots_intact(store: SnapshotStore, names: list[str]) -> None:
    """Refuse damaged snapshots before any JVM starts (unknown ones are validation's job)."""
    for name in names:
        if not store.exists(name):
            continue
        problems = store.check_before_start(name)
        if problems:
            raise SnapshotDamagedError(
                f"snapshot '{name}' is damaged: {problems[0].path}: {problems[0].message}; "
                f"run 'sparkpoint snapshot verify {name}'"
            )


def start_from_snapshots(home: Home, options: RunOptions, from_snapshot: str | None,
                         resume_point: Path | None, choice: BatchChoice,
                         first_batch: int | None, spark: SparkSession | None,
                         echo: Echo,
                         on_started: Callable[[StreamingQuery], None] | None = None,
                         ) -> RunResult:
    """Run ``options.job`` as a new job whose checkpoint is built from snapshots;
    ``on_started`` receives its query once it runs (``sparkpoint.start`` hands it over)."""
    job = options.job
    registry = JobRegistry(home)
    store = open_snapshot_store(home)
    point = load_resume_point(resume_point) if resume_point is not None else None
    if from_snapshot is not None:
        check_first_batch(first_batch, store.get(from_snapshot).batch_id)
    target = registry.checkpoint(job).root
    # A checkpoint that an interrupted start built and no record owns is rolled back
    # below, under the job's lock; any other makes the name taken.
    # A deleted job's leftovers (a cut-off delete) do not take the name: the run removes
    # them first (runner.run_job).
    if registry.exists(job) or (target.exists() and not is_own_orphan(target)
                                and not registry.tombstoned(job)):
        raise NameTakenError(
            f"job '{job}' already exists; a job started from snapshots must be new: choose "
            "another --job name (or drop --from-snapshot/--resume-point to continue it)"
        )
    check_snapshots_intact(store, point.snapshots() if point else [from_snapshot or ""])
    rewind_batch = _rewind_batch(store, point, from_snapshot) if choice.rewind else None
    if rewind_batch is not None:
        # What the files decide is refused before Spark starts: the output the snapshots'
        # lineage wrote, when a --param names it (the job's sink is known only once built).
        for output in _lineage_outputs_named(registry, store, point, from_snapshot,
                                             options.params):
            _refuse_unrewindable(home, output, rewind_batch, _snapshot_jobs(store, point,
                                                                            from_snapshot))

    def build(planned: PlannedJob) -> Lineage:
        """The steps between planning the new job and its record: the checkpoint built and
        published, the output rewound or filled; the job's lineage."""
        crash_point("restore.job_locked")
        sink = planned.sink
        if rewind_batch is not None and sink is not None:
            # Before the resume point is checked with Spark: the output alone decides.
            _refuse_unrewindable(home, sink.location, rewind_batch,
                                 _snapshot_jobs(store, point, from_snapshot))
        # A checkpoint left by a cut-off start goes whole.
        roll_back(target, registry.exists(job), lambda line: echo(f"job '{job}': {line}"))
        pipeline = StartPipeline(Mode.RUN, home, store, planned, point, from_snapshot, choice,
                                 job=job, target=target,
                                 accept_data_loss=options.accept_data_loss)
        resolution = pipeline.resolve(echo)
        numbering = resolution.plan.batches
        rewind_to = numbering.rewind_to_batch if numbering is not None else None
        with contextlib.ExitStack() as writers:
            rewind_plan = None
            if rewind_to is not None and sink is not None:
                # Nobody may write the output from here until its files are moved.
                snapshot_jobs = {s.manifest.job for s in resolution.snapshots.values()}
                _lock_writers(writers, home, sink.location, snapshot_jobs, echo)
                rewind_plan = sink.plan_rewind(
                    rewind_to,
                    f"job '{job}' started from {from_snapshot or resume_point} "
                    "with --rewind-output")
            result = pipeline.build(
                resolution, echo,
                spark_location=home.checkpoint_location(job) if home.remote else None)
            assert result is not None
            if sink is not None and rewind_plan is not None and result.batch_id is not None:
                sink.rewind(rewind_plan)
                echo(f"job '{job}': {rewind_plan.summary()}")
        used = sorted(resolution.snapshots)
        if result.batch_id is not None:
            echo(f"built checkpoint for job '{job}' from {', '.join(used)} "
                 f"(batch {result.batch_id})")
            if numbering is not None and numbering.renumbered:
                echo(f"batch ids renumbered: snapshot batch {numbering.snapshot_batch} "
                     f"continues as batch {numbering.checkpoint_batch}")
            if sink is not None:
                _close_sink_gap(sink, planned, target, result.batch_id, echo)
        first = resolution.snapshots[used[0]].manifest if used else None
        return Lineage(
            from_snapshot=from_snapshot or (",".join(used) or None),
            snapshot_job=first.job if first else None,
            snapshot_batch=result.batch_id,
            resume_point=str(resume_point) if resume_point is not None else None,
            accepted_loss=resolution.accepted_loss,
            kafka_replays=resolution.plan.kafka_replays,
        )

    with held_run(home, options, spark=spark, echo=echo) as held:
        held.record.lineage = build(held.planned)
        # The job is recorded before the start's intent goes: from here the checkpoint is
        # the job's own, and a cut-off start is no longer rolled back.
        held.registry.save(held.record)
        clear_intent(target)
        return held.execute(on_started)


def _close_sink_gap(sink: Sink, planned: PlannedJob, target: Location, batch: int,
                    echo: Echo) -> None:
    """Give the new job's output the sink log entries of every batch up to the new
    checkpoint's ``batch`` that it lacks (Spark's repartition batch, batch ids skipped by
    --first-batch, a new output's history), before Spark writes the next one; they are named
    in the start's intent first, so that a cut-off start takes them back."""
    interval = int(planned.conf.get(COMPACT_INTERVAL_CONF, DEFAULT_COMPACT_INTERVAL))
    gap = sink.gap(batch, interval)
    if not gap.batches:
        return
    record_sink_fill(target, gap)
    crash_point("sink_gap.recorded")
    sink.fill(gap, lambda: crash_point("sink_gap.entry_written"))
    first, last = gap.batches[0], gap.batches[-1]
    echo(f"gave the output {sink.location} empty sink log entries for batches "
         f"{first}..{last}, which write nothing to it (so that it has no hole)")
    crash_point("restore.sink_seeded")


def _writers(home: Home, output: str, snapshot_jobs: set[str]) -> list[str]:
    """The jobs of the home that may write ``output``: the snapshots' jobs and every job
    whose latest run wrote it."""
    registry = JobRegistry(home)
    return sorted(set(writers_of(registry, output)) | (snapshot_jobs & set(registry.names())))


def _refuse_running_writer(home: Home, writer: str, output: str) -> None:
    holder = holder_of(home, writer)
    if holder is not None:
        raise JobRunningError(
            f"job '{writer}' writes the output {output} and is running "
            f"({holder.describe()}); "
            f"its files cannot be moved aside under it: stop it first ('sparkpoint jobs "
            f"stop {writer} --wait'), then start again with --rewind-output; nothing was "
            "changed")


def _lock_writers(stack: contextlib.ExitStack[Any], home: Home, output: str,
                  snapshot_jobs: set[str], echo: Echo) -> None:
    """Hold, on ``stack``, the lock of every job of the home that may write ``output``. A
    running one refuses the rewind (its query would go on writing files and log entries
    beside the moved ones)."""
    for writer in _writers(home, output, snapshot_jobs):
        _refuse_running_writer(home, writer, output)
        stack.enter_context(job_lock(home, writer, echo))


def _refuse_unrewindable(home: Home, output: str, to_batch: int,
                         snapshot_jobs: set[str]) -> None:
    """Refuse, from the files alone, a --rewind-output of ``output`` to ``to_batch`` that
    the rewind itself would refuse: a writer of the output running, a sink log that names
    files outside the output or lost the entries the batch needs. Reads only."""
    latest = latest_batch(output)
    if latest is None or latest <= to_batch:
        return  # nothing to take back
    for writer in _writers(home, output, snapshot_jobs):
        _refuse_running_writer(home, writer, output)
    plan_rewind(output, to_batch, "checked before the start")


def _resumed_snapshots(point: ResumePoint | None, from_snapshot: str | None) -> list[str]:
    if point is None:
        return [from_snapshot] if from_snapshot is not None else []
    return sorted({entry.snapshot for entry in [*point.sources.values(), *point.state.values()]
                   if isinstance(entry, ResumeSource | ResumeState)})


def _rewind_batch(store: SnapshotStore, point: ResumePoint | None,
                  from_snapshot: str | None) -> int | None:
    """The batch --rewind-output takes the output back to: the newest resumed snapshot's."""
    batches = [store.get(name).batch_id for name in _resumed_snapshots(point, from_snapshot)
               if store.exists(name)]
    return max(batches, default=None)


def _snapshot_jobs(store: SnapshotStore, point: ResumePoint | None,
                   from_snapshot: str | None) -> set[str]:
    return {store.get(name).job for name in _resumed_snapshots(point, from_snapshot)
            if store.exists(name)}


def _lineage_outputs_named(registry: JobRegistry, store: SnapshotStore,
                           point: ResumePoint | None, from_snapshot: str | None,
                           params: Mapping[str, str]) -> list[str]:
    """The file sink outputs the snapshots' lineage wrote (as its job records say) that a
    --param of the new job names: the table a rollback takes back. Only a job built in
    Spark tells its sink for certain; an output of the lineage handed to the new job is
    that table, unless the job reads its own predecessor's table."""
    known = set(registry.names())
    family: set[str] = set()
    for job in _snapshot_jobs(store, point, from_snapshot) & known:
        family |= lineage_of(registry, store, job)
    outputs: list[str] = []
    for job in sorted(family & known):
        try:
            output = registry.get(job).output
        except SparkpointError:
            continue  # a damaged record names no output here; the start reports it
        if output is not None and output not in outputs and any(
                value and same_output(value, output) for value in params.values()):
            outputs.append(output)
    return outputs




def plan_start(home: Home, job_file: Path, params: Mapping[str, str], conf: Mapping[str, str],
               master: str | None, from_snapshot: str | None, resume_point: Path | None,
               choice: BatchChoice, spark: SparkSession | None, echo: Echo,
               accept_data_loss: bool = False) -> UpgradePlan:
    """The start's dry run: what would resume, initialize or be dropped, the batch ids the job
    would continue with, and every problem. Starts no query and writes only scratch files,
    including Spark's own restart check."""
    # Entries that do not parse are problems of the plan, not a reason to stop: the rest of
    # the file is still checked against the job and the snapshots in this run.
    read = read_resume_point(resume_point) if resume_point is not None else None
    point = read.point if read is not None else None
    store = open_snapshot_store(home)
    if from_snapshot is not None:
        check_first_batch(choice.first_batch, store.get(from_snapshot).batch_id)
    check_snapshots_intact(store, point.snapshots() if point else [from_snapshot or ""])
    try:
        # A home on S3: the dry run writes its checkpoint there, with the settings a run's
        # Spark writes it with (the user's win).
        session_conf = {**s3a_conf(home.location, conf), **conf}
        planned = plan_job("plan", job_file.absolute(), dict(params), session_conf, master,
                           spark, log_dir=home.logs_dir, command="plan")
    except JobFileError as exc:
        if read is None or not read.problems:
            raise
        # The job cannot be checked against: still report the file's own problems with it.
        problems = [*read.problems, str(exc)]
        raise ValidationError(f"{len(problems)} problems:\n  " + "\n  ".join(problems),
                              problems=problems) from exc
    try:
        with plan_target(home, echo) as target:
            return StartPipeline(Mode.PLAN, home, store, planned, point, from_snapshot, choice,
                                 target=target, read=read,
                                 accept_data_loss=accept_data_loss).dry_run(echo)
    finally:
        planned.release()
