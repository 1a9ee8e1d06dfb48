"""The Python API behind the CLI: run jobs, snapshot them, inspect snapshots and jobs."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from importlib.metadata import version as package_version
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sparkpoint.checkpoint.layout import Checkpoint
from sparkpoint.checkpoint.sink_log import DEFAULT_COMPACT_INTERVAL, seed_empty_history
from sparkpoint.errors import NameTakenError, PreconditionError, SnapshotDamagedError
from sparkpoint.runtime.registry import JobRecord, JobRegistry, Lineage
from sparkpoint.runtime.runner import (
    PlannedJob,
    RunOptions,
    RunResult,
    run_job,
    wait_until_stopped,
)
from sparkpoint.snapshot.export import JobInfo
from sparkpoint.snapshot.manifest import Manifest
from sparkpoint.snapshot.store import Problem, SnapshotStore
from sparkpoint.storage.home import Home, validate_name
from sparkpoint.upgrade.restore import build_checkpoint, check_same_operators

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

Echo = Callable[[str], None]
CANCEL_TIMEOUT_S = 300.0
COMPACT_INTERVAL_CONF = "spark.sql.streaming.fileSink.log.compactInterval"


def _quiet(_message: str) -> None:
    pass


def run(
    home: Home,
    job_file: Path,
    job: str,
    params: Mapping[str, str] | None = None,
    conf: Mapping[str, str] | None = None,
    master: str | None = None,
    from_snapshot: str | None = None,
    until_caught_up: bool = False,
    max_batches: int | None = None,
    spark: SparkSession | None = None,
    echo: Echo = _quiet,
) -> RunResult:
    """Run a job; with ``from_snapshot`` it starts as a new job from that snapshot's state."""
    validate_name(job, "job")
    options = RunOptions(
        job=job, job_file=job_file.absolute(), params=dict(params or {}), conf=dict(conf or {}),
        master=master, until_caught_up=until_caught_up, max_batches=max_batches,
    )
    registry = JobRegistry(home)
    prepare = None
    if from_snapshot is not None:
        store = SnapshotStore(home)
        manifest = store.get(from_snapshot)
        if registry.exists(job) or registry.checkpoint(job).exists():
            raise NameTakenError(
                f"job '{job}' already exists; a job started from a snapshot must be new: choose "
                "another --job name (or drop --from-snapshot to continue the existing job)"
            )
        problems = store.verify(from_snapshot)
        if problems:
            raise SnapshotDamagedError(
                f"snapshot '{from_snapshot}' is damaged: {problems[0].path}: "
                f"{problems[0].message}; run 'sparkpoint snapshot verify {from_snapshot}'"
            )
        snapshot_dir = store.path(from_snapshot)
        target = registry.checkpoint(job).root

        def prepare(planned: PlannedJob) -> Lineage:
            operators = planned.operators
            check_same_operators(
                manifest, {op.name: op.spark_operator_name for op in operators}, from_snapshot
            )
            build_checkpoint(snapshot_dir, manifest, target,
                             {op.name: op.operator_id for op in operators})
            if planned.file_sink is not None:
                interval = int(planned.conf.get(COMPACT_INTERVAL_CONF, DEFAULT_COMPACT_INTERVAL))
                seeded = seed_empty_history(planned.file_sink, manifest.batch_id, interval)
                if seeded:
                    echo(f"gave the new output {planned.file_sink} an empty sink history up to "
                         f"batch {manifest.batch_id}")
            echo(f"built checkpoint for job '{job}' from snapshot '{from_snapshot}' "
                 f"(batch {manifest.batch_id})")
            return Lineage(from_snapshot=from_snapshot, snapshot_job=manifest.job,
                           snapshot_batch=manifest.batch_id)

    return run_job(home, options, spark=spark, prepare=prepare, echo=echo)


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
