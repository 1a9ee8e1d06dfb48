"""Running a job: build its writer, own its checkpoint, name and trigger, watch it.

The process that runs a job owns ``job.json`` while it runs (pid, run id, status) and polls
``control/`` for requests from other processes, so ``snapshot create --cancel`` can stop it
right after its latest committed batch.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import logging
import signal
import threading
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any

from sparkpoint.checkpoint.layout import Checkpoint
from sparkpoint.errors import (
    JobFileError,
    JobRunningError,
    KafkaOffsetsDeletedError,
    PreconditionError,
    SparkpointError,
    SparkQueryError,
)
from sparkpoint.runtime import deletion
from sparkpoint.runtime.context import JobContext
from sparkpoint.runtime.jobfile import (
    build_writer,
    check_job_file,
    check_required_params,
    described_by_command,
    load_build,
)
from sparkpoint.runtime.lock import held_lease, holds, job_lock
from sparkpoint.runtime.progress import (
    add_state_rows,
    clear_progress,
    ran_a_batch,
    read_state_rows,
    write_progress,
    write_state_rows,
)
from sparkpoint.runtime.registry import (
    JobRecord,
    JobRegistry,
    KafkaOutputRecord,
    OperatorRecord,
    RunRecord,
    SourceRecord,
    ended_dead,
    now_iso,
)
from sparkpoint.sinks.base import Sink
from sparkpoint.sinks.formats import sink_for
from sparkpoint.sources.kafka import KAFKA_KINDS
from sparkpoint.sources.kafka_groups import (
    GroupCommitter,
    groups_of_settings,
    groups_problem,
    settings_problem,
)
from sparkpoint.sources.kafka_loss import deleted_offsets, startpoint_commands
from sparkpoint.spark.errors import (
    KafkaDataLoss,
    failure_details,
    failure_summary,
    kafka_data_loss,
)
from sparkpoint.spark.inspect import PlannedSource, job_sources
from sparkpoint.spark.job_session import require_writer_of, session_for_job
from sparkpoint.spark.lease_fence import can_fence, fence_spark_writes, fenced_conf
from sparkpoint.spark.plan import PlannedOperator, stateful_operators
from sparkpoint.spark.progress_reports import NewProgress
from sparkpoint.spark.s3a import s3a_conf
from sparkpoint.spark.session import apply_query_conf, create_session, session_log_file
from sparkpoint.spark.sink import file_sink_path, kafka_output, sink_format
from sparkpoint.spark.state_stores import close_idle_state_stores
from sparkpoint.storage import fencing
from sparkpoint.storage.fileio import spark_url
from sparkpoint.storage.home import Home
from sparkpoint.storage.lease import Lease

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming.query import StreamingQuery
    from pyspark.sql.streaming.readwriter import DataStreamWriter

log = logging.getLogger(__name__)

POLL_SECONDS = 1
# How long a command waits for a job asked to stop (snapshot --cancel, drain, jobs stop --wait).
CANCEL_TIMEOUT_S = 300.0
# Processing-time triggers fire at multiples of the interval since the epoch: the first at
# once, the next one in 2070.
HOLD_TRIGGER_INTERVAL = "36500 days"

@dataclass(frozen=True)
class PlannedJob:
    """A job built and planned, its query not started."""

    spark: SparkSession
    writer: DataStreamWriter
    operators: list[PlannedOperator]
    # The sink sparkpoint reads (sinks/base.py: a file sink's output...), None for any other.
    sink: Sink | None
    conf: Mapping[str, str]
    sources: list[PlannedSource] = field(default_factory=list)
    # Kafka sources whose committed offsets also go to a consumer group (source -> group).
    offset_groups: Mapping[str, str] = field(default_factory=dict)

    def release(self) -> None:
        """Nothing to put back: a session lent by the caller was copied for the job
        (``spark/job_session.py``), and the copy goes with the job."""


def new_log_file(log_dir: Path, job: str) -> Path:
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%S.%f")[:-3]
    return log_dir / f"{job}-{stamp}Z.log"


def log_failure(log_file: Path | None, what: str, exc: BaseException) -> Path | None:
    """Append a failure's full story (tracebacks, JVM frames) to the log file; return it."""
    if log_file is None:
        return None
    log_file.parent.mkdir(parents=True, exist_ok=True)
    with open(log_file, "a", encoding="utf-8") as handle:
        handle.write(f"{now_iso()} sparkpoint: {what}\n{failure_details(exc)}\n")
    return log_file


def plan_job(
    job: str,
    job_file: Path,
    params: Mapping[str, str],
    conf: Mapping[str, str],
    master: str | None,
    spark: SparkSession | None = None,
    ui: bool = False,
    echo: Callable[[str], None] = print,
    log_dir: Path | None = None,
    build: Callable[..., Any] | None = None,
    command: str | None = None,
) -> PlannedJob:
    """Load the job file (or take ``build``, a function given by a Python caller), build
    its writer in a session and learn its stateful operators. ``command``: the command that
    reads the job file without running a job (``job`` then only labels the session and its
    log); messages name the file and that command instead of a job.

    With ``log_dir``, a JVM started here logs to a new file there, and a failing ``build``
    leaves its stack traces in that file, which the error names."""
    # A broken job file or a missing required param fails before a JVM starts.
    described = described_by_command(job_file, command) if command is not None else None
    if build is None:
        check_required_params(check_job_file(job_file), job, params, described)
    log_file = new_log_file(log_dir, job) if log_dir is not None else None
    # A caller's session keeps its own settings: the job runs in a copy of it.
    session = session_for_job(spark) if spark is not None else create_session(
        master, conf, f"sparkpoint:{job}", ui=ui, log_file=log_file)
    if ui and spark is None:
        echo(f"Spark UI: {session.sparkContext.uiWebUrl}")
    if build is None:
        build = load_build(job_file)  # after the session: module-level UDFs parse DDL with it
    apply_query_conf(session, conf)
    ctx = JobContext(job=job, params=dict(params), described=described)
    try:
        writer = build_writer(build, job_file, session, ctx)
    except JobFileError as exc:
        cause = exc.__cause__
        if cause is None:
            raise  # sparkpoint's own finding (a missing param...): the line says it all
        logged = log_failure(session_log_file() or log_file, exc.message, exc)
        if logged is None:
            raise
        raise JobFileError(
            f"{job_file}: build() raised {cause.__class__.__name__}: "
            f"{failure_summary(cause)}; stack traces in {logged}", log_file=str(logged),
        ) from exc
    if spark is not None:
        require_writer_of(session, writer, str(job_file))
    operators = stateful_operators(writer._df, ctx.declarations)
    sources = job_sources(writer._df)
    settings = groups_of_settings(conf)
    problem = settings_problem(ctx.offset_groups, settings) or groups_problem(
        sources, ctx.offset_groups, settings)
    if problem is not None:
        raise JobFileError(f"{ctx.who}: {problem}")
    return PlannedJob(session, writer, operators, sink_for(sink_format(writer),
                                                           file_sink_path(writer)),
                      dict(conf), sources,
                      {**ctx.offset_groups, **settings})


@dataclass
class RunOptions:
    job: str
    job_file: Path
    params: Mapping[str, str] = field(default_factory=dict)
    conf: Mapping[str, str] = field(default_factory=dict)
    master: str | None = None
    until_caught_up: bool = False
    max_batches: int | None = None
    # Run only the batch already in the offsets log (with max_batches=1): the next trigger
    # is put decades ahead, so Spark plans no batch of new input before the stop.
    pending_batch_only: bool = False
    # Commit offsets to the consumer groups the job names: off for a rehearsal, whose
    # replayed batches are not the job's progress.
    commit_to_groups: bool = True
    # Turn the Spark UI on and print its address.
    ui: bool = False
    # The job's build function when a Python caller gave one instead of a job file.
    build: Callable[..., Any] | None = None
    # --accept-data-loss: a start from snapshots or with startpoints goes on without the
    # input its sources no longer hold (sources/input_gaps.py), recorded in the lineage.
    accept_data_loss: bool = False


@dataclass(frozen=True)
class RunResult:
    job: str
    run_id: str
    status: str
    first_batch: int | None
    last_batch: int | None
    batches_run: int


def _query_failed(job: str, exc: BaseException, log_file: Path | None,
                  sources: Sequence[PlannedSource] = (),
                  checkpoint: Checkpoint | None = None) -> SparkpointError:
    """The one line a failed query gets; its stack traces go to the log file it names."""
    summary = failure_summary(exc)
    logged = log_failure(log_file, f"job '{job}' failed: {summary}", exc)
    loss = kafka_data_loss(exc)
    if loss is not None:
        return _kafka_offsets_deleted(job, loss, sources, checkpoint, logged)
    if logged is None:
        return SparkQueryError(f"job '{job}' failed: {summary}")
    return SparkQueryError(f"job '{job}' failed: {summary}; Spark's log and stack traces: "
                           f"{logged}", log_file=str(logged))


def _kafka_offsets_deleted(job: str, loss: KafkaDataLoss, sources: Sequence[PlannedSource],
                           checkpoint: Checkpoint | None,
                           logged: Path | None) -> KafkaOffsetsDeletedError:
    """Spark's connector found offsets deleted: the range per partition is the broker's
    (from the job's position to the earliest offset held), Spark's own words only when the
    broker cannot say."""
    losses = deleted_offsets(sources, checkpoint) if checkpoint is not None else None
    if losses is not None:
        gone = "; ".join(f"source '{loss.source}' offsets "
                         + ", ".join(d.describe() for d in loss.deleted) for loss in losses)
        commands = startpoint_commands(job, losses)
        remedy = " and ".join(commands)
    else:
        kafka = [s.name for s in sources if s.kind in KAFKA_KINDS]
        source = kafka[0] if len(kafka) == 1 else "SOURCE"
        gone = loss.describe()
        partition = "TOPIC:P" if loss.partition is None else \
            ":".join(loss.partition.rsplit("-", 1))
        remedy = f"sparkpoint startpoint set {job} {source} --earliest --partition {partition}"
    return KafkaOffsetsDeletedError(
        f"job '{job}': Spark's Kafka connector must read {gone}, which the broker no longer "
        "holds (deleted, e.g. by the topic's retention), and failOnDataLoss is on; nothing "
        f"was committed. To go on from the earliest record held: {remedy}, then run again"
        f"{'' if logged is None else f'; log: {logged}'}",
        log_file=None if logged is None else str(logged))


class _StopSignal:
    """SIGINT/SIGTERM ask the query to stop at the next poll instead of killing the JVM."""

    def __init__(self) -> None:
        self.requested = threading.Event()
        self._previous: dict[int, object] = {}

    def __enter__(self) -> _StopSignal:
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def _handle(self, signum: int, _frame: FrameType | None) -> None:
        self.requested.set()

    def __exit__(self, *_exc: object) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)  # type: ignore[arg-type]


def _progress_dict(progress: Any) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(progress.json)
    return data


class _ProgressKeeper:
    """Writes the progress of each batch that ran to the job's directory, once per batch."""

    def __init__(self, home: Home, job: str, lease: Lease | None = None,
                 on_batch: Callable[[Mapping[str, Any]], None] | None = None) -> None:
        self.home, self.job, self.lease = home, job, lease
        self.job_dir = home.job_dir(job)
        # The newest batch whose progress was written (batch ids only grow within a run).
        self.kept_through = -1
        # What this run recorded so far, on top of what earlier runs did.
        self.state_rows = read_state_rows(self.job_dir)
        # Called with each batch's progress once it is written (after the batch committed).
        self.on_batch = on_batch
        self.reports: NewProgress | None = None

    def keep(self, query: StreamingQuery) -> None:
        # Runs every poll: only the reports Spark made since the last poll are read (Spark
        # holds up to 99). Idle triggers report progress too, under the id of the next
        # (unrun) batch: only batches that ran count.
        if self.reports is None or self.reports.query is not query:
            self.reports = NewProgress(query)
        ran = [data for data in self.reports.read()
               if int(data.get("batchId", -1)) > self.kept_through and ran_a_batch(data)]
        if not ran:
            return
        newest = ran[-1]
        if self.lease is not None:
            self.lease.fence()
        # Every batch's state rows, not only the newest's: a snapshot of any batch takes
        # its operators' rows from them instead of counting the state.
        if add_state_rows(self.state_rows, ran):
            write_state_rows(self.job_dir, self.state_rows)
        # In the home itself: other machines' 'jobs show' read it there.
        write_progress(self.job_dir, newest)
        self.kept_through = int(newest.get("batchId", -1))
        if self.on_batch is not None:
            self.on_batch(newest)


def _ended(query: Any, seconds: float) -> bool:
    """Whether the query ended within ``seconds``, told the moment it ends (a run that has
    caught up exits without waiting out a poll). A failed query has ended: its exception is
    read where the run ends."""
    try:
        return bool(query.awaitTermination(seconds))
    except Exception:
        return True  # it failed: the failure itself is read from query.exception()


def _batch_counter(
    spark: SparkSession, query_name: str, limit: int
) -> tuple[threading.Event, Callable[[], None]]:
    """An event set as soon as ``limit`` batches of the named query have completed.

    Progress events reach the driver's listener within milliseconds of a batch's commit, so
    the stop that follows abandons (uncommitted) at most a batch that just started; polling
    the query would let whole batches slip through. Idle triggers report progress too; only
    progress of a batch that ran counts.
    """
    from pyspark.sql.streaming.listener import StreamingQueryListener

    reached = threading.Event()

    class Counter(StreamingQueryListener):
        def __init__(self) -> None:
            self.batches: set[int] = set()

        def onQueryStarted(self, event: object) -> None:
            pass

        def onQueryProgress(self, event: Any) -> None:
            if event.progress.name != query_name:
                return
            data = _progress_dict(event.progress)
            if ran_a_batch(data):
                self.batches.add(int(data["batchId"]))
            if len(self.batches) >= limit:
                reached.set()

        def onQueryIdle(self, event: object) -> None:
            pass

        def onQueryTerminated(self, event: Any) -> None:
            pass

    listener = Counter()
    spark.streams.addListener(listener)
    return reached, lambda: spark.streams.removeListener(listener)


@dataclass
class HeldRun:
    """A job held (its lock, its lease in a store) and planned, its query not started: what
    a protocol does between planning and running (build the checkpoint, write a drain batch,
    check the output) it does with this in hand, then ``execute`` runs the query. The runner
    calls nothing of the protocols: they call it."""

    home: Home
    options: RunOptions
    registry: JobRegistry
    record: JobRecord
    planned: PlannedJob
    lease: Lease | None
    log_file: Path
    echo: Callable[[str], None]

    @property
    def job(self) -> str:
        return self.options.job

    def execute(self, on_started: Callable[[StreamingQuery], None] | None = None) -> RunResult:
        """Record this run in the job record, run the query as the options say, watch it,
        and record how it ended; ``on_started`` receives the query once it runs
        (``sparkpoint.start`` hands it to its caller)."""
        return _execute(self, on_started)


@contextlib.contextmanager
def held_run(home: Home, options: RunOptions, spark: SparkSession | None = None,
             echo: Callable[[str], None] = print) -> Iterator[HeldRun]:
    """Hold the job, plan it and hand it over (see HeldRun). On the way: a deleted job's
    leftovers are removed (a new job of that name starts from nothing), a running job is
    refused, and a cut-off rewind of the job's output is finished."""
    registry = JobRegistry(home)
    job = options.job
    home.job_dir(job)  # validates the name before anything is written
    # A run never waits for another thread of this process: that thread runs the job.
    with job_lock(home, job, echo, wait=False):
        # A new job of a name whose deletion was cut off starts from nothing: the deleted
        # job's leftovers go first, under this lock (runtime/registry.py).
        if deletion.finish(home, job):
            echo(f"job '{job}': finished removing the files of the deleted job of that name")
        if registry.exists(job):
            record = registry.get(job)
            if record.effective_status() == "running":
                raise JobRunningError(
                    f"job '{job}' is already running ({record.describe_process()}); stop it "
                    "there first")
            record.job_file = str(options.job_file)
            record.params = dict(options.params)
            record.conf = dict(options.conf)
            record.master = options.master
        else:
            record = JobRecord(
                name=job, job_file=str(options.job_file), params=dict(options.params),
                conf=dict(options.conf), master=options.master,
            )
        registry.clear_stop_request(job)
        lease = held_lease(home, job)
        # A checkpoint on S3 needs Spark's s3a settings and connector (the user's win); under
        # a lease, Spark's own checkpoint writes are fenced by it (spark/lease_fence.py).
        wanted = {**s3a_conf(home.location, options.conf), **options.conf}
        session_conf = {**wanted, **(fenced_conf(wanted) if lease is not None
                                     and can_fence(spark) else {})}
        planned = plan_job(job, options.job_file, options.params, session_conf,
                           options.master, spark, ui=options.ui, echo=echo,
                           log_dir=home.logs_dir, build=options.build)
        log_file = session_log_file() or new_log_file(home.logs_dir, job)
        end_fences: list[Callable[[], None]] = []
        try:
            if lease is not None:
                fenced = [home.checkpoint_location(job)]
                if planned.sink is not None:
                    fenced.append(spark_url(planned.sink.location))
                    # sparkpoint's own writes into the output (rewinds, sink history).
                    end_fences.append(fencing.add_guarded([planned.sink.location],
                                                          lease.fence))
                end_fences.append(fence_spark_writes(planned.spark, lease, fenced))
            if planned.sink is not None:
                # Every run into an output first finishes a rewind of it that was cut off
                # (drain, batch completion and rehearsal included): nothing may write into
                # a half-moved table.
                planned.sink.finish_rewinds(lambda line: echo(f"job '{job}': {line}"))
            yield HeldRun(home, options, registry, record, planned, lease, log_file, echo)
        finally:
            # While the run still holds the job and its fence: nothing of its state stores
            # writes into the checkpoint after it let go (spark/state_stores.py).
            close_idle_state_stores(planned.spark)
            for end in end_fences:
                end()
            planned.release()


def run_job(
    home: Home,
    options: RunOptions,
    spark: SparkSession | None = None,
    echo: Callable[[str], None] = print,
    on_started: Callable[[StreamingQuery], None] | None = None,
) -> RunResult:
    """Run the job under its lock: a run with nothing to do between planning and running."""
    with held_run(home, options, spark, echo) as run:
        return run.execute(on_started)


def _execute(held: HeldRun, on_started: Callable[[StreamingQuery], None] | None) -> RunResult:
    home, options, registry, record, planned = (held.home, held.options, held.registry,
                                                held.record, held.planned)
    job, lease, log_file, echo = held.job, held.lease, held.log_file, held.echo
    session, writer = planned.spark, planned.writer
    checkpoint = registry.checkpoint(job)
    first_batch = checkpoint.latest_committed_batch()
    run = RunRecord(run_id=str(uuid.uuid4()), started_at=now_iso(), status="running",
                    first_batch=first_batch)
    # A run still 'running' in the record is one whose process died (this one holds
    # the job now): it failed, at the batch this run starts after.
    record.runs = [ended_dead(old, first_batch) if old.status == "running" else old
                   for old in record.runs]
    record.mark_running_here()
    record.error = None
    record.run_id = run.run_id
    record.operators = [
        OperatorRecord(name=op.name, operator_id=op.operator_id,
                       spark_operator_name=op.spark_operator_name,
                       named_by_user=op.named_by_user, window=op.window,
                       aggregates=op.aggregates)
        for op in planned.operators
    ]
    record.output = planned.sink.location if planned.sink is not None else None
    kafka = kafka_output(planned.writer)
    record.kafka_output = None if kafka is None else KafkaOutputRecord(
        bootstrap=kafka.bootstrap, topic=kafka.topic)
    record.sources = [
        SourceRecord(name=s.name, kind=s.kind, named_by_user=s.named_by_user,
                     path=s.path, options=s.options)
        for s in planned.sources
    ]
    record.runs.append(run)
    registry.save(record)
    echo(f"job '{job}' run {run.run_id} starting at batch "
         f"{0 if first_batch is None else first_batch + 1}")
    writer = writer.option("checkpointLocation", home.checkpoint_location(job)) \
        .queryName(job)
    if options.until_caught_up:
        writer = writer.trigger(availableNow=True)
    elif options.pending_batch_only:
        writer = writer.trigger(processingTime=HOLD_TRIGGER_INTERVAL)
    error: SparkpointError | None = None
    groups = planned.offset_groups if options.commit_to_groups else {}
    committer = GroupCommitter(planned.sources, groups,
                               lambda line: echo(f"job '{job}': {line}"))
    if groups and first_batch is not None:
        # Where this run resumes (moved by a startpoint or a rollback, maybe): the groups
        # follow the job now, not when its next batch commits.
        committer.commit_start([source.offset for source
                                in checkpoint.offsets(first_batch).sources])
    keeper = _ProgressKeeper(home, job, lease, committer.commit if groups else None)
    clear_progress(home.job_dir(job))
    limit_reached, remove_counter = (
        _batch_counter(session, job, options.max_batches)
        if options.max_batches is not None
        else (threading.Event(), lambda: None)
    )
    forget_lease_hook: Callable[[], None] = lambda: None  # noqa: E731
    try:
        with _StopSignal() as stop_signal:
            query = writer.start()
            if lease is not None:
                # Lost: stop at once, from the renewing thread, so that no batch
                # commits after another process may have taken the job.
                forget_lease_hook = lease.on_lost(query.stop)
            if on_started is not None:
                on_started(query)
            while query.isActive:
                if options.max_batches is not None:
                    if limit_reached.wait(POLL_SECONDS):
                        query.stop()
                        break
                elif _ended(query, POLL_SECONDS):
                    break
                if lease is not None:
                    # Past its deadline (a renewal stuck in a slow request): lost,
                    # and the query stopped at once (Lease.on_lost).
                    lease.fence()
                keeper.keep(query)
                # A run of one planned batch (a drain's, or one completed before a
                # drain or startpoints) is not cut short by a stop request: that batch
                # is the last committed one the request stops after; cut off, a drain
                # failed with nothing changed. Ctrl-C still stops it.
                if stop_signal.requested.is_set() or (
                        not options.pending_batch_only and registry.stop_requested(job)):
                    echo(f"job '{job}': stop requested, stopping after the last committed "
                         "batch")
                    query.stop()
            keeper.keep(query)
            failure = query.exception()
            if failure is not None:
                error = _query_failed(job, failure, log_file, planned.sources,
                                      checkpoint)
    except SparkpointError as exc:
        error = exc
    except Exception as exc:
        error = _query_failed(job, exc, log_file, planned.sources, checkpoint)
    finally:
        forget_lease_hook()
        remove_counter()
        committer.close()
        if lease is not None:
            # The fence before the run's record is written: a holder fenced out
            # writes nothing more (the record is the new holder's now).
            lease.check()
        registry.clear_stop_request(job)
        last = checkpoint.latest_committed_batch()
        run.ended_at, run.last_batch = now_iso(), last
        run.status = "failed" if error else "stopped"
        run.error = error.message if error else None
        record.status, record.pid, record.error = run.status, None, run.error
        record.boot_id = record.pid_namespace = record.start_ticks = None
        record.runs[-1] = run
        registry.save(record)
    if error is not None:
        raise error
    # Batches committed by this run: the commit log counts each exactly once.
    ran = 0 if last is None else last - (-1 if first_batch is None else first_batch)
    echo(f"job '{job}' stopped at batch {last} ({ran} batches in this run)")
    return RunResult(job, run.run_id, run.status, first_batch, last, ran)


def wait_until_stopped(registry: JobRegistry, job: str, timeout_s: float,
                       running: JobRecord) -> JobRecord:
    """Poll the record of a job asked to stop until its process reports it stopped and has
    let go of the job. ``running``: the record that said it runs, when the stop was asked.

    A run writes its record before it lets go of its lock (and of its lease, which in a store
    takes round trips): returning on the record alone, a drain that then takes the job is
    refused by the run it has just stopped."""
    import time

    deadline = time.monotonic() + timeout_s
    while True:
        record = registry.get(job)
        if record.effective_status() != "running" and \
                not holds(registry.home, job, running.process()):
            return record
        if time.monotonic() > deadline:
            raise JobRunningError(
                f"job '{job}' did not stop within {timeout_s:.0f}s ({record.describe_process()});"
                " it may be inside a long batch: retry, or stop it with Ctrl-C there"
            )
        time.sleep(0.2)


def stop_job(home: Home, job: str, wait: bool, echo: Callable[[str], None]) -> dict[str, Any]:
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
