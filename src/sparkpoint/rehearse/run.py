"""``sparkpoint rehearse``: a new version of a job, started from a snapshot in scratch space,
replays exactly the input the old job read after the snapshot's batch; its output is then
compared with what the old job wrote for those batches.

Everything the rehearsal writes lives in one scratch directory (``rehearse/scratch.py``: in
the home's local scratch space, or in the store of a home on S3 or HDFS, where executors on
other hosts reach it), a home of its own, so the rehearsal is never a user job: its
checkpoint, its output, its job record. The old job's checkpoint, output and the snapshots
are only read; the new version's sink is redirected to scratch before its query starts,
whatever sink it is.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sparkpoint.checkpoint.layout import Checkpoint
from sparkpoint.checkpoint.replay import replay_batch, replayable_batches, require_source_log
from sparkpoint.checkpoint.sink_log import (
    COMPACT_INTERVAL_CONF,
    DEFAULT_COMPACT_INTERVAL,
    committed_files,
    files_up_to,
    latest_batch,
)
from sparkpoint.checkpoint.source_log import file_source_log_offset
from sparkpoint.crash_points import crash_point
from sparkpoint.errors import (
    JobFileError,
    NothingToRehearseError,
    PreconditionError,
    SnapshotDamagedError,
    SparkQueryError,
    UsageError,
    ValidationError,
)
from sparkpoint.progress import track
from sparkpoint.rehearse.compare import (
    EXAMPLES_PER_KIND,
    Comparison,
    Output,
    compare,
    compare_rest,
    json_value,
)
from sparkpoint.rehearse.in_spark import match_exactly
from sparkpoint.rehearse.match import DEFAULT_FLOAT_TOLERANCE, check_float_tolerance
from sparkpoint.rehearse.scratch import open_scratch
from sparkpoint.runtime.context import JobContext
from sparkpoint.runtime.jobfile import (
    build_writer,
    check_job_file,
    check_required_params,
    load_build,
)
from sparkpoint.runtime.recorded import with_recorded_conf
from sparkpoint.runtime.registry import JobRegistry
from sparkpoint.runtime.runner import PlannedJob, RunOptions, held_run, new_log_file
from sparkpoint.snapshot.store import SnapshotStore, open_snapshot_store
from sparkpoint.sources.kafka import KAFKA_KINDS
from sparkpoint.sources.positions import SourceDescription, kafka_position_at
from sparkpoint.spark.driver_disk import require_driver_disk
from sparkpoint.spark.job_session import session_for_job
from sparkpoint.spark.output import (
    BATCH_DIR_PREFIX,
    format_of_files,
    numeric_columns,
    output_format,
    output_frame,
    redirect_output,
    writer_options,
)
from sparkpoint.spark.session import apply_query_conf, create_session
from sparkpoint.spark.sink import file_sink_path
from sparkpoint.spark.version import require_supported_pyspark
from sparkpoint.storage.fileio import spark_url
from sparkpoint.storage.home import Home, validate_name
from sparkpoint.storage.location import Location, local_path
from sparkpoint.upgrade.batches import BatchChoice
from sparkpoint.upgrade.interrupted import clear_intent
from sparkpoint.upgrade.pipeline import Mode, StartPipeline
from sparkpoint.upgrade.resume_point import ResumePoint, ResumeSource, load_resume_point

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

Echo = Callable[[str], None]
SCRATCH_JOB = "rehearsal"


def _quiet(_message: str) -> None:
    pass


@dataclass(frozen=True)
class Rehearsal:
    """What a rehearsal found. ``comparison`` is None when the old job's output cannot be
    read (not a file sink, or its log no longer lists those batches): then only the new
    output is shown, and ``note`` says why."""

    job: str
    snapshots: list[str]
    batches: tuple[int, int]
    new_rows: int
    comparison: Comparison | None
    new_examples: list[dict[str, Any]] = field(default_factory=list)
    note: str | None = None
    scratch: str | None = None  # kept with --keep

    @property
    def equal(self) -> bool | None:
        return None if self.comparison is None else self.comparison.equal

    def to_dict(self) -> dict[str, Any]:
        c = self.comparison
        if c is None:
            examples: dict[str, Any] = {"new": self.new_examples, "note": self.note}
        else:
            examples = {**c.examples, "compared_columns": c.compared_columns,
                        "columns_only_old": c.columns_only_old,
                        "columns_only_new": c.columns_only_new}
        return {"equal": self.equal, "batches": list(self.batches),
                "old_rows": None if c is None else c.old_rows, "new_rows": self.new_rows,
                "only_old": None if c is None else c.only_old,
                "only_new": None if c is None else c.only_new, "examples": examples}


@dataclass
class _NewVersion:
    """What the scratch job learns while it runs."""

    output: Location
    file_format: str | None = None
    options: dict[str, str] = field(default_factory=dict)
    operator_keys: list[list[str]] = field(default_factory=list)
    sources: dict[str, str] = field(default_factory=dict)
    # Kafka sources the old job did not have, read over the replayed batches' time.
    added: dict[str, SourceDescription] = field(default_factory=dict)
    shift: int = 0

    def added_offsets(self, old: Checkpoint, batch: int) -> dict[str, str]:
        """Where each added source's replay of the old job's ``batch`` ends: its records
        before that batch's time (the old offsets entry is read only when there are some)."""
        if not self.added:
            return {}
        batch_time_ms = old.offsets(batch).batch_timestamp_ms
        return {name: kafka_position_at(source, batch_time_ms, f"sources.{name}").offset_json
                for name, source in self.added.items()}


def rehearse(
    home: Home,
    job_file: Path,
    against: str,
    from_snapshot: str | None = None,
    resume_point: Path | None = None,
    params: Mapping[str, str] | None = None,
    conf: Mapping[str, str] | None = None,
    master: str | None = None,
    keep: bool = False,
    spark: SparkSession | None = None,
    echo: Echo = _quiet,
    float_tolerance: float = DEFAULT_FLOAT_TOLERANCE,
) -> Rehearsal:
    """Rehearse ``job_file`` from a snapshot (or resume point) against job ``against``.

    Params, conf and master default to the old job's; those given replace them. Float and
    double values are equal within ``float_tolerance``, relative (0: bit for bit)."""
    validate_name(against, "job")
    float_tolerance = check_float_tolerance(float_tolerance, "float_tolerance")
    if (from_snapshot is None) == (resume_point is None):
        raise UsageError("give exactly one of --from-snapshot SNAP or --resume-point FILE")
    job_file = job_file.absolute()
    # A home on S3 or HDFS: the old job's record and logs as the home holds them now.
    record = JobRegistry(home).get(against)
    old = JobRegistry(home).checkpoint(against)
    store = open_snapshot_store(home)
    point = load_resume_point(resume_point) if resume_point is not None else None
    names = point.snapshots() if point is not None else [from_snapshot or ""]
    snapshot_batch = max(store.get(name).batch_id for name in names)
    _check_intact(store, names)
    batches = _batches_to_replay(old, against, snapshot_batch, names)
    # What the files alone decide is refused before Spark starts (a JVM is most of a
    # refusal's time otherwise): each resumed source's history, the source logs to replay.
    resumed = _resumed_sources(store, point, from_snapshot)
    _check_same_history(store, old, resumed)
    _check_source_logs(store, old, batches, resumed)
    params = {**record.params, **(params or {})}
    conf = with_recorded_conf(home, against, conf or {}, echo)
    check_required_params(check_job_file(job_file), SCRATCH_JOB, params)
    if spark is None:
        require_supported_pyspark()
    scratch = open_scratch(home, echo)
    try:
        session = spark or create_session(master or record.master, conf, "sparkpoint:rehearse",
                                          log_file=new_log_file(home.logs_dir, "rehearse"))
        if not scratch.in_store:
            # The scratch job's checkpoint and output are on this machine's disk, written
            # by the executors (in the store, they reach them as they reach the home).
            require_driver_disk(session, local_path(scratch.root))
        user_build = load_build(job_file)
        old_output = _old_output(session, user_build, job_file, against, record.params, conf)
        new = _NewVersion(output=scratch.output)
        _replay(session, home, scratch.home, job_file, user_build, old, batches,
                snapshot_batch, new, store, point, from_snapshot, params, conf,
                master or record.master, names, echo)
        result = _summarize(session, against, names, (batches[0], batches[-1]), old_output,
                            snapshot_batch, new, float_tolerance)
        if keep:
            scratch.keep()
            echo(f"scratch kept: {scratch.root}")
            return Rehearsal(**{**result.__dict__, "scratch": str(scratch.root)})
        return result
    finally:
        if not keep:
            scratch.remove()


def _check_intact(store: SnapshotStore, names: list[str]) -> None:
    for name in names:
        problems = store.verify(name)
        if problems:
            raise SnapshotDamagedError(
                f"snapshot '{name}' is damaged: {problems[0].path}: {problems[0].message}; "
                f"run 'sparkpoint snapshot verify {name}'")


def _batches_to_replay(old: Checkpoint, job: str, snapshot_batch: int,
                       names: list[str]) -> list[int]:
    latest = old.latest_committed_batch() if old.exists() else None
    if latest is None or latest <= snapshot_batch:
        raise NothingToRehearseError(
            f"job '{job}' has no committed batch after batch {snapshot_batch} of snapshot "
            f"{', '.join(repr(n) for n in names)} (its latest: "
            f"{'none' if latest is None else latest}); there is no input to replay: run the "
            "old job further, or rehearse from an older snapshot")
    batches = replayable_batches(old, snapshot_batch)
    wanted = list(range(snapshot_batch + 1, latest + 1))
    if batches != wanted:
        held = ", ".join(str(b) for b in batches) or "none"
        raise PreconditionError(
            f"job '{job}': expected the offsets of batches {wanted[0]}..{latest} in "
            f"{old.root / 'offsets'}, found those of {held} (Spark keeps the last "
            "spark.sql.streaming.minBatchesToRetain batches); rehearse from a newer snapshot")
    return batches


def _old_output(session: SparkSession, user_build: Any, job_file: Path, job: str,
                params: Mapping[str, str], conf: Mapping[str, str]) -> str | None:
    """Where the old job wrote: the file sink the job file builds with the old job's params
    (None when it is no file sink, or no sink log is there)."""
    # Named sources need the query confs, as for any run; set in a copy of the session, so
    # a caller's session keeps its own (spark/job_session.py).
    session = session_for_job(session)
    apply_query_conf(session, conf)
    try:
        writer = build_writer(user_build, job_file, session, JobContext(job=job,
                                                                         params=dict(params)))
    except JobFileError:
        return None  # the new version needs other params: the run below says what
    path = file_sink_path(writer)
    if path is None or latest_batch(path) is None:
        return None
    return path


def _replay(session: SparkSession, home: Home, scratch_home: Home, job_file: Path,
            user_build: Any, old: Checkpoint, batches: list[int], snapshot_batch: int,
            new: _NewVersion, store: SnapshotStore, point: Any, from_snapshot: str | None,
            params: Mapping[str, str], conf: Mapping[str, str], master: str | None,
            names: list[str], echo: Echo) -> None:
    """Restore the new version from the snapshot in scratch space, then run it once per old
    batch, each time with that batch's offsets as its pending batch."""
    target = scratch_home.checkpoint_dir(SCRATCH_JOB)

    def build(spark: SparkSession, ctx: JobContext) -> Any:
        writer = build_writer(user_build, job_file, spark, ctx)
        new.file_format = output_format(writer)
        new.options = writer_options(writer) if new.file_format is not None else {}
        return redirect_output(writer, new.output)

    def restore(planned: PlannedJob) -> None:
        pipeline = StartPipeline(Mode.REHEARSE, scratch_home, store, planned, point,
                                 from_snapshot, BatchChoice(), target=target)
        resolution = pipeline.resolve(echo)
        # A Kafka source the old job did not have is read over the time the replayed
        # batches cover: from the snapshot's batch time to each batch's own.
        initialized = {row.name for row in resolution.plan.sources
                       if row.action == "initialize"}
        new.added = {
            source.name: SourceDescription(source.name, source.kind, None, dict(source.options))
            for source in resolution.shape.sources
            if source.name in initialized and source.kind in KAFKA_KINDS}
        fresh = [row.name for row in resolution.plan.sources
                 if (row.action != "resume" or row.origin is None) and row.name not in new.added]
        if fresh:
            raise ValidationError(
                f"{job_file}: source(s) {', '.join(fresh)} do not resume from the snapshot; a "
                f"rehearsal replays only what the old job read (and a new Kafka source over "
                f"the same time): map each source to one of the old job's in a resume point")
        if new.added:
            snapshot_time_ms = old.offsets(snapshot_batch).batch_timestamp_ms
            for name, source in new.added.items():
                resolution.positions[name] = kafka_position_at(source, snapshot_time_ms,
                                                               f"sources.{name}")
        new.sources = {row.name: row.origin["source"] for row in resolution.plan.sources
                       if row.origin is not None}
        _check_same_history(store, old, [(row.origin["snapshot"], row.origin["source"])
                                         for row in resolution.plan.sources
                                         if row.origin is not None])
        new.operator_keys = [
            [str(f["name"]) for f in (op.stores[0].key_schema or {}).get("fields", [])]
            for op in resolution.shape.operators if op.stores]
        result = pipeline.build(resolution, echo)
        assert result is not None
        if result.batch_id is None:
            raise ValidationError(f"{job_file}: the new version resumes nothing from "
                                  f"{', '.join(names)}; there is nothing to rehearse from")
        new.shift = result.batch_id - snapshot_batch
        if planned.sink is not None:
            interval = int(conf.get(COMPACT_INTERVAL_CONF, DEFAULT_COMPACT_INTERVAL))
            planned.sink.seed_empty_history(result.batch_id, interval)
        replay_batch(old, batches[0], Checkpoint(target), batches[0] + new.shift, new.sources,
                     new.added_offsets(old, batches[0]))

    options = RunOptions(job=SCRATCH_JOB, job_file=job_file, params=params, conf=conf,
                         master=master, max_batches=1, pending_batch_only=True, build=build,
                         commit_to_groups=False)
    for batch in track(batches, "rehearse: replaying", unit="batch"):
        with held_run(scratch_home, options, spark=session, echo=_quiet) as held:
            if batch == batches[0]:
                restore(held.planned)
                held.registry.save(held.record)  # the scratch job owns its checkpoint
                clear_intent(target)
            else:
                replay_batch(old, batch, Checkpoint(target), batch + new.shift, new.sources,
                             new.added_offsets(old, batch))
            held.execute()
        done = Checkpoint(target).latest_committed_batch()
        if done != batch + new.shift:
            raise SparkQueryError(
                f"the rehearsal's replay of batch {batch} did not complete (its checkpoint's "
                f"latest batch is {done}); see the Spark log in {home.logs_dir}")
        echo(f"replayed batch {batch}")
        crash_point("rehearse.batch_replayed")


def _resumed_sources(store: SnapshotStore, point: ResumePoint | None,
                     from_snapshot: str | None) -> list[tuple[str, str]]:
    """(snapshot, source) of each source the rehearsal resumes, as far as the files tell:
    a resume point's resumed entries; with --from-snapshot every source of the snapshot
    (its default resume point resumes each under its own name)."""
    if point is None:
        assert from_snapshot is not None
        return [(from_snapshot, source.name) for source in store.get(from_snapshot).sources]
    return [(entry.snapshot, entry.source or name) for name, entry in point.sources.items()
            if isinstance(entry, ResumeSource)]


def _check_same_history(store: SnapshotStore, old: Checkpoint,
                        resumed: list[tuple[str, str]]) -> None:
    """Each snapshot's offsets must be the old job's at that batch: else the old job's later
    batches do not continue the snapshot, and replaying them would mix two histories."""
    for name, source in resumed:
        batch = store.get(name).batch_id
        if not (old.root / "offsets" / str(batch)).is_file():
            continue  # Spark no longer holds it; nothing to compare with
        theirs = Checkpoint(store.logs_path(name)).offsets(batch).source_offsets()
        ours = old.offsets(batch).source_offsets()
        if theirs.get(source) != ours.get(source):
            raise PreconditionError(
                f"snapshot '{name}' (batch {batch}) is not in the history of the job to "
                f"compare with: its offset of source '{source}' is {theirs.get(source)}, the "
                f"job's at batch {batch} is {ours.get(source)}; rehearse against the job the "
                "snapshot was taken of")


def _check_source_logs(store: SnapshotStore, old: Checkpoint, batches: list[int],
                       resumed: list[tuple[str, str]]) -> None:
    """The old job's file-source log entries that the replayed batches read, after those the
    snapshot holds, must still be there (Spark removes entries after a later compaction)."""
    for name, source in resumed:
        read = [file_source_log_offset(old.offsets(batch).source_offsets().get(source))
                for batch in batches]
        up_to = max((offset for offset in read if offset is not None), default=None)
        if up_to is not None:
            require_source_log(old, source, store.logs_path(name) / "sources" / source, up_to)


def _summarize(session: SparkSession, job: str, names: list[str], batches: tuple[int, int],
               old_output: str | None, snapshot_batch: int, new: _NewVersion,
               float_tolerance: float) -> Rehearsal:
    if new.file_format is not None:
        new_files = sorted(committed_files(str(new.output)))
        new_format = format_of_files(new_files, new.file_format)
        new_frame = _frame(session, new_format, new_files, new.output, new.options)
    else:
        dirs = _batch_dirs(new.output)
        new_frame = _frame(session, "parquet", dirs, None, {})
    old_files = None
    note = None
    if old_output is None:
        note = (f"job '{job}' does not write to a file sink sparkpoint can read: only the "
                "new output is shown")
    else:
        after = files_up_to(old_output, batches[1])
        before = files_up_to(old_output, snapshot_batch)
        if after is None or before is None:
            note = (f"the sink log of {old_output} no longer lists the files of batches "
                    f"{batches[0]}..{batches[1]} (Spark compacted it): only the new output "
                    "is shown")
        else:
            old_files = sorted(after - before)
    if old_output is None or old_files is None:
        if new_frame is None:
            return Rehearsal(job, names, batches, 0, None, [], note)
        shown = new_frame.limit(EXAMPLES_PER_KIND).collect()
        return Rehearsal(job, names, batches, new_frame.count(), None,
                         [{c: json_value(v) for c, v in zip(new_frame.columns, row, strict=True)}
                          for row in shown], note)
    fmt = format_of_files(old_files, new.file_format or "parquet")
    old_frame = _frame(session, fmt, old_files, old_output, new.options)
    if old_frame is not None and new_frame is not None:
        # Spark takes out the rows both outputs hold alike: only the rest comes here.
        matched = match_exactly(old_frame, new_frame)
        if matched is not None:
            return Rehearsal(job, names, batches, matched.new_total,
                             compare_rest(matched, new.operator_keys, float_tolerance))
    old_side, new_side = _collected(old_frame), _collected(new_frame)
    if not old_side.columns:
        old_side = Output(new_side.columns, [], new_side.numeric)
    if not new_side.columns:
        new_side = Output(old_side.columns, [], old_side.numeric)
    return Rehearsal(job, names, batches, len(new_side.rows),
                     compare(old_side, new_side, new.operator_keys, float_tolerance))


def _batch_dirs(output: Location) -> list[str]:
    """The parquet directories a redirected sink other than a file sink wrote, one per
    batch, as Spark reads them."""
    if not output.exists():
        return []
    return sorted(spark_url(str(path)) for path in output.iterdir()
                  if path.name.startswith(BATCH_DIR_PREFIX))


def _frame(session: SparkSession, fmt: str, paths: list[str], base: Location | str | None,
           options: dict[str, str]) -> DataFrame | None:
    return output_frame(session, fmt, paths, base, options) if paths else None


def _collected(frame: DataFrame | None) -> Output:
    """Every row of an output Spark cannot compare by grouping, in this process."""
    if frame is None:
        return Output([], [])
    return Output(list(frame.columns), [tuple(row) for row in frame.collect()],
                  numeric_columns(frame))
