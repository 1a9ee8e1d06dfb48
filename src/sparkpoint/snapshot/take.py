"""Taking a snapshot of a job: of its newest committed batch, of an earlier one still held
(``--batch``, ``--at``), or of a job asked to stop first (``--cancel``): the protocol.

0. (``refusals``) the name is free, the batch asked for is held: refused before a running
   job is stopped, with nothing changed.
1. ``--cancel``: the job is asked to stop after its last committed batch, and waited for.
2. A stopped job's checkpoint is recovered (the facade, with ``sparkpoint/recovery.py``), so
   that what a cut-off drain left never reaches a snapshot.
3. ``take``: the batch chosen, then the snapshot store's own steps (``SnapshotStore.create``:
   exported, then published by its manifest; crash points ``snapshot.*`` and
   ``remote_snapshot.*``).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable

from sparkpoint.checkpoint.layout import Checkpoint
from sparkpoint.checkpoint.retained import iso_utc
from sparkpoint.errors import NameTakenError, PreconditionError
from sparkpoint.runtime.progress import read_state_rows
from sparkpoint.runtime.registry import JobRecord, JobRegistry
from sparkpoint.runtime.runner import CANCEL_TIMEOUT_S, wait_until_stopped
from sparkpoint.snapshot.export import JobInfo
from sparkpoint.snapshot.manifest import Manifest
from sparkpoint.snapshot.past import batch_at, require_held
from sparkpoint.snapshot.store import open_snapshot_store
from sparkpoint.spark.version import installed_pyspark_version
from sparkpoint.storage.home import Home

Echo = Callable[[str], None]


def snapshot_job(home: Home, job: str, name: str, echo: Echo,
                 batch: int | None = None) -> Manifest:
    """Snapshot the job's latest committed batch (or the earlier ``batch``) under ``name``."""
    registry = JobRegistry(home)
    record = registry.get(job)
    info = JobInfo(job=job, operator_names=record.operator_names(),
                   operator_windows=record.operator_windows(),
                   operator_aggregates=record.operator_aggregates(), job_file=record.job_file,
                   params=record.params, spark_version=installed_pyspark_version(),
                   state_rows=read_state_rows(home.job_dir(job)))
    checkpoint = registry.checkpoint(job)
    return open_snapshot_store(home).create(name, checkpoint, info, progress=echo, batch=batch)


def refusals(home: Home, job: str, snapshot: str, batch: int | None,
             moment: dt.datetime | None, cancel: bool) -> JobRecord:
    """Step 0: the job's record, or the refusal of the snapshot with nothing changed."""
    registry = JobRegistry(home)
    record = registry.get(job)
    if open_snapshot_store(home).exists(snapshot):
        raise NameTakenError(
            f"snapshot '{snapshot}' already exists; choose another name or delete it first"
        )
    if cancel and (batch is not None or moment is not None):
        # Refused before the job is stopped: a refusal changes nothing.
        past_batch(job, registry.checkpoint(job), batch, moment)
    return record


def require_checkpoint(home: Home, job: str) -> None:
    checkpoint = JobRegistry(home).checkpoint(job)
    if not checkpoint.exists():
        raise PreconditionError(
            f"job '{job}' has no checkpoint yet at {checkpoint.root}; run it first"
        )


def take(home: Home, job: str, snapshot: str, echo: Echo, batch: int | None,
         moment: dt.datetime | None) -> Manifest:
    """Step 3: the batch chosen (the newest, ``batch``, or the newest at ``moment``), then
    the snapshot of it."""
    checkpoint = JobRegistry(home).checkpoint(job)
    if moment is not None:
        batch = past_batch(job, checkpoint, batch, moment)
        echo(f"batch {batch} is the newest with a time at or before {iso_utc(moment)}")
    elif batch is not None:
        past_batch(job, checkpoint, batch, moment)
    return snapshot_job(home, job, snapshot, echo, batch)


def past_batch(job: str, checkpoint: Checkpoint, batch: int | None,
                moment: dt.datetime | None) -> int:
    if not checkpoint.exists():
        raise PreconditionError(
            f"job '{job}' has no checkpoint yet at {checkpoint.root}; run it first")
    if moment is not None:
        return batch_at(job, checkpoint, moment)
    assert batch is not None
    return require_held(job, checkpoint, batch)




def stop_for_snapshot(registry: JobRegistry, job: str, record: JobRecord,
                      echo: Echo) -> JobRecord:
    """``--cancel``: ask a running job to stop after its last committed batch and wait."""
    if record.effective_status() == "running":
        echo(f"asking job '{job}' ({record.describe_process()}) to stop after its last committed "
             "batch")
        registry.request_stop(job)
        record = wait_until_stopped(registry, job, CANCEL_TIMEOUT_S, record)
        echo(f"job '{job}' is {record.effective_status()}")
    else:
        echo(f"job '{job}' is not running ({record.effective_status()}); snapshotting it")
    return record
