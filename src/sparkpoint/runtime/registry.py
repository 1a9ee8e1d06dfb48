"""The job registry: one ``job.json`` per job under ``<home>/jobs/<name>/``.

The running process owns its record; other processes only read it, or drop request files
into ``control/`` which the running process polls.
"""

from __future__ import annotations

import datetime as dt
import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr
from pydantic import ValidationError as PydanticValidationError

from sparkpoint.aggregates import AggregateState
from sparkpoint.checkpoint.layout import Checkpoint
from sparkpoint.errors import CorruptRecordError, UnknownJobError
from sparkpoint.losses import AcceptedLoss
from sparkpoint.runtime.lock import fence, holds
from sparkpoint.sinks.kafka_replay import KafkaReplay
from sparkpoint.storage.fileio import join
from sparkpoint.storage.home import Home, name_problem
from sparkpoint.storage.location import Location, StorePath, write_atomic
from sparkpoint.storage.processes import ProcessIdentity, this_host
from sparkpoint.windows import WindowSpec

JOB_FILE = "job.json"
# Written first by a delete of a job in a store: the job is gone, whatever files remain
# (runtime/deletion.py).
TOMBSTONE = "deleted"
STOP_REQUEST = "stop"
# A listing of a home in a store looks at this many jobs at once (each costs round trips).
JOBS_LOOKED_AT_ONCE = 8

Status = Literal["new", "running", "stopped", "failed", "drained"]


def now_iso() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds")


class OperatorRecord(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str
    operator_id: int
    spark_operator_name: str
    named_by_user: bool
    # The event-time window its keys hold; None: not known (recorded by an older version,
    # or a session gap computed per row).
    window: WindowSpec | None = None
    # An aggregation's functions in its state's order (sparkpoint.aggregates); None: not an
    # aggregation, or recorded by an older version.
    aggregates: tuple[AggregateState, ...] | None = None


class SourceRecord(BaseModel):
    """A source as the job's plan shows it: enough to resolve start positions offline."""

    model_config = ConfigDict(extra="forbid")
    name: str
    kind: str
    named_by_user: bool = True
    path: str | None = None
    options: dict[str, str] = Field(default_factory=dict)


class Lineage(BaseModel):
    model_config = ConfigDict(extra="forbid")
    from_snapshot: str | None = None
    snapshot_job: str | None = None
    snapshot_batch: int | None = None
    resume_point: str | None = None
    # Input the job's starts went on without, accepted with --accept-data-loss.
    accepted_loss: list[AcceptedLoss] = Field(default_factory=list)
    # Batches the start writes again into a Kafka topic the snapshots' job had already
    # written them to (sinks/kafka_replay.py): the abandoned records' offsets, for readers.
    kafka_replays: list[KafkaReplay] = Field(default_factory=list)


class KafkaOutputRecord(BaseModel):
    """The topic Spark's Kafka sink of the latest run wrote (None: a topic column chose)."""

    model_config = ConfigDict(extra="forbid")
    bootstrap: str
    topic: str | None = None


class RunRecord(BaseModel):
    model_config = ConfigDict(extra="forbid")
    run_id: str
    started_at: str
    ended_at: str | None = None
    status: Status
    first_batch: int | None = None
    last_batch: int | None = None
    error: str | None = None


# What a run left 'running' by a process that died is shown with.
DIED = ("its process ended without recording the run's end (killed, crashed, or its "
        "machine lost)")


def ended_dead(run: RunRecord, last_batch: int | None) -> RunRecord:
    """A run whose process died: failed, at the batch it got to."""
    return run.model_copy(update={
        "status": "failed", "error": run.error or DIED,
        "last_batch": run.last_batch if run.last_batch is not None else last_batch})


class DrainedOperator(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str
    operator_id: int
    spark_operator_name: str
    rows: int | None


class DrainRecord(BaseModel):
    """The last drain of a job: its synthetic batch and the state it could not empty."""

    model_config = ConfigDict(extra="forbid")
    batch: int
    drained_at: str
    watermark_ms: int
    operators: list[DrainedOperator] = Field(default_factory=list)
    snapshot: str | None = None

    @property
    def residual(self) -> list[DrainedOperator]:
        return [op for op in self.operators if op.rows != 0]


class AppliedStartpoint(BaseModel):
    """A startpoint as applied at a start of the job, kept for audit."""

    model_config = ConfigDict(extra="forbid")
    source: str
    # The apply intent this came from: an apply finished after a crash is recorded once.
    intent_id: str | None = None
    startpoints: list[dict[str, Any]]
    # Every pending set this application consumed: those folded into ``startpoints`` and
    # those a later whole-source set replaced (each set is consumed exactly once).
    set_ids: list[str] = Field(default_factory=list)
    applied_at: str
    batch: int
    offset_before: Any = None
    offset_after: Any = None
    positions: list[str] = Field(default_factory=list)


class JobRecord(BaseModel):
    model_config = ConfigDict(extra="forbid")
    format_version: Literal[1] = 1
    name: str
    job_file: str
    params: dict[str, str] = Field(default_factory=dict)
    conf: dict[str, str] = Field(default_factory=dict)
    master: str | None = None
    status: Status = "new"
    pid: int | None = None
    # The machine the running process is on: a home on S3 or HDFS is shared by machines,
    # and a pid means something only on its own. With the boot, the pid namespace and the
    # process's start time, the run's process is told apart from any later one that got
    # the same pid (storage/processes.py); records of older versions lack them.
    host: str | None = None
    boot_id: str | None = None
    pid_namespace: str | None = None
    start_ticks: int | None = None
    run_id: str | None = None
    error: str | None = None
    operators: list[OperatorRecord] = Field(default_factory=list)
    sources: list[SourceRecord] = Field(default_factory=list)
    # A local file sink's output directory of the latest run: which job wrote an output
    # with history, and which jobs a rewind of that output must find stopped.
    output: str | None = None
    # Spark's Kafka sink of the latest run: what a rollback writes into again.
    kafka_output: KafkaOutputRecord | None = None
    lineage: Lineage = Field(default_factory=Lineage)
    runs: list[RunRecord] = Field(default_factory=list)
    drain: DrainRecord | None = None
    startpoints_applied: list[AppliedStartpoint] = Field(default_factory=list)
    created_at: str = Field(default_factory=now_iso)
    # Whether the run's process still holds the job (its kernel lock, its lease in a store),
    # as JobRegistry.get asked (None: not asked).
    _holder_live: bool | None = PrivateAttr(default=None)

    def process(self) -> ProcessIdentity | None:
        """The running process the record names (None when it names none). A record of an
        older version without a host was written on a local home: this machine."""
        fields = self.model_dump(include={"host", "pid", "boot_id", "pid_namespace",
                                          "start_ticks"})
        if fields["host"] is None:
            fields["host"] = this_host()
        return ProcessIdentity.from_record(fields)

    def mark_running_here(self) -> None:
        """Name this process as the job's running process."""
        me = ProcessIdentity.current()
        self.status, self.pid, self.host = "running", me.pid, me.host
        self.boot_id, self.pid_namespace, self.start_ticks = \
            me.boot_id, me.pid_namespace, me.start_ticks

    def effective_status(self) -> Status:
        """A record left 'running' by a process that no longer holds the job (it died, its
        lease expired) is a failed run. Whether it holds the job is asked of the kernel lock
        or the lease, never of a pid alone: after a container restart another process has
        the dead run's pid (JobRegistry.get asks; a record not read there falls back to
        what can be told from here)."""
        if self.status != "running":
            return self.status
        if self._holder_live is not None:
            return "running" if self._holder_live else "failed"
        process = self.process()
        return "failed" if process is None or process.gone() else "running"

    def describe_process(self) -> str:
        process = self.process()
        return process.describe() if process is not None else "an unknown process"

    def operator_names(self) -> dict[int, str]:
        return {op.operator_id: op.name for op in self.operators}

    def operator_windows(self) -> dict[int, WindowSpec | None]:
        return {op.operator_id: op.window for op in self.operators}

    def operator_aggregates(self) -> dict[int, tuple[AggregateState, ...] | None]:
        return {op.operator_id: op.aggregates for op in self.operators}


class JobRegistry:
    def __init__(self, home: Home) -> None:
        self.home = home

    def record_path(self, job: str) -> Location:
        return self.home.job_dir(job) / JOB_FILE

    def exists(self, job: str) -> bool:
        """The job has a record and, in a store, is not being deleted (no tombstone)."""
        return self._present(self.home.job_dir(job))

    def tombstoned(self, job: str) -> bool:
        """In a store: the job was deleted by a ``jobs delete`` that was cut off before it
        removed everything (its files are leftovers, whatever they are:
        runtime/deletion.py)."""
        job_dir = self.home.job_dir(job)
        return isinstance(job_dir, StorePath) and \
            TOMBSTONE in job_dir.io.list_names(job_dir.url)

    def names(self) -> list[str]:
        """The jobs of the home (a job whose deletion was cut off after its tombstone is
        not one: runtime/deletion.py)."""
        candidates = self.candidates()
        # In a store each look is a round trip: the jobs are looked at several at once, one
        # listing of each job's directory telling its record and its tombstone apart.
        with ThreadPoolExecutor(max_workers=JOBS_LOOKED_AT_ONCE) as pool:
            present = list(pool.map(self._present, candidates))
        return sorted(entry.name for entry, there in zip(candidates, present, strict=True)
                      if there)

    def candidates(self) -> list[Location]:
        """The directories under the home's jobs that are named as jobs are (present or
        not: see listing)."""
        try:
            return [entry for entry in self.home.jobs_dir.iterdir()
                    if name_problem(entry.name, "job") is None]
        except FileNotFoundError:
            return []

    def _present(self, job_dir: Location) -> bool:
        """The job has a record and, in a store, no tombstone (one listing of its
        directory)."""
        return self.listing(job_dir)[0]

    def listing(self, job_dir: Location) -> tuple[bool, frozenset[str] | None]:
        """Whether the job is present (see _present), and in a store the names in its
        directory (so that a reader skips a file the listing shows absent), else None."""
        if isinstance(job_dir, Path):
            return (job_dir / JOB_FILE).is_file(), None
        names = frozenset(job_dir.io.list_names(job_dir.url))
        return JOB_FILE in names and TOMBSTONE not in names, names

    def get(self, job: str, listed: frozenset[str] | None = None) -> JobRecord:
        """The job's record. In a store its directory is listed first (one request), so
        that a job deleted by a cut-off ``jobs delete`` is unknown, whatever files remain;
        ``listed``: that listing, when the caller made it."""
        path = self.record_path(job)
        job_dir = self.home.job_dir(job)
        if isinstance(job_dir, StorePath) and listed is None:
            listed = frozenset(job_dir.io.list_names(job_dir.url))
        try:
            if listed is not None and TOMBSTONE in listed:
                raise FileNotFoundError(str(path))
            raw = path.read_bytes()
        except FileNotFoundError:
            known = ", ".join(self.names()) or "none"
            raise UnknownJobError(
                f"job '{job}' not found in {join(self.home.location, 'jobs')} (jobs: {known}); "
                "start it with 'sparkpoint run JOB.py --job NAME'"
            ) from None
        try:
            data: Any = json.loads(raw.decode("utf-8"))
            record = JobRecord.model_validate(data)
        except PydanticValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(part) for part in first["loc"]) or "(top level)"
            raise self._corrupt(path, f"field '{where}': {first['msg']}") from exc
        except (OSError, ValueError, RecursionError) as exc:
            raise self._corrupt(path, str(exc).strip().splitlines()[0]
                                if str(exc).strip() else type(exc).__name__) from exc
        if record.name != job:
            raise self._corrupt(path, f"it names job {record.name!r}")
        if record.status == "running":
            process = record.process()
            # Running exactly while the run's own process holds the job's lock or lease.
            record._holder_live = process is not None and not process.gone() and \
                holds(self.home, job, process)
        return record

    @staticmethod
    def _corrupt(path: Location, found: str) -> CorruptRecordError:
        return CorruptRecordError(
            f"{path}: expected a sparkpoint job record, found unreadable content ({found}); "
            "restore the file from a backup, or remove the job's directory and start the job "
            "again from a snapshot")

    def save(self, record: JobRecord) -> None:
        text = json.dumps(record.model_dump(mode="json"), indent=2) + "\n"
        fence(self.home, record.name)  # a holder fenced out writes nothing more
        write_atomic(self.record_path(record.name), text.encode("utf-8"))

    def checkpoint(self, job: str) -> Checkpoint:
        return Checkpoint(self.home.checkpoint_dir(job))

    def control_dir(self, job: str) -> Location:
        return self.home.job_dir(job) / "control"

    def request_stop(self, job: str) -> None:
        write_atomic(self.control_dir(job) / STOP_REQUEST, now_iso().encode())

    def stop_requested(self, job: str) -> bool:
        return (self.control_dir(job) / STOP_REQUEST).is_file()

    def clear_stop_request(self, job: str) -> None:
        (self.control_dir(job) / STOP_REQUEST).unlink(missing_ok=True)


