"""Draining a job: the protocol, its intent, its dry-run refusals, its steps and its recovery.

Spark has no drain. After the last committed batch N, sparkpoint writes ``offsets/N+1`` with
N's source offsets and a maximal watermark and clock (``drain/synthetic.py``) and lets Spark
run that batch: every event-time window, session and join buffer is emitted and evicted and
every timer fires. Then the job's own watermark is put back into the batch's entries, the job
is recorded drained with what state it still holds, and the snapshot asked for is taken.

The steps, each a named crash point:

0. (``refusals``) the job exists, is not drained, has a committed batch, can be rebuilt; the
   snapshot's name is free. Nothing is changed before these are checked.
1. A running job is asked to stop; the job's lock is taken; what a cut-off drain left is
   finished or rolled back (``recover``); an in-flight batch is completed.
2. The drain batch is recorded in the home (a ``DrainIntent``) before the checkpoint changes
   (``drain.intent_recorded``).
3. ``offsets/N+1`` is written (``drain.offsets_written``) and Spark runs that batch
   (``drain.batch_committed``).
4. The job's watermark is put back (``drain.watermark_restored``), the job recorded drained
   (``drain.recorded``), the snapshot taken, the intent removed.

A drain cut off after its batch committed is finished from the intent by the next command
(``finish_drain``: each step writes the same result when repeated); one cut off before is
rolled back (``roll_back_drain``: the unrun batch's offsets entry is removed), so no later run
executes the drain batch by surprise. ``recover`` does one or the other; the top-level
recovery (``sparkpoint/recovery.py``) calls it for every command that takes the job.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict

from sparkpoint.crash_points import crash_point
from sparkpoint.drain.residual import state_rows
from sparkpoint.drain.synthetic import (
    DrainBatch,
    plan_drain_batch,
    remove_unrun_drain_offsets,
    restore_watermark,
    write_drain_offsets,
)
from sparkpoint.errors import (
    NameTakenError,
    NoCommittedBatchError,
    PreconditionError,
    SparkQueryError,
    UsageError,
)
from sparkpoint.progress import phase
from sparkpoint.runtime.jobfile import PYTHON_BUILD_PREFIX
from sparkpoint.runtime.registry import (
    DrainedOperator,
    DrainRecord,
    JobRecord,
    JobRegistry,
    now_iso,
)
from sparkpoint.runtime.runner import (
    CANCEL_TIMEOUT_S,
    RunOptions,
    held_run,
    run_job,
    wait_until_stopped,
)
from sparkpoint.snapshot.store import open_snapshot_store
from sparkpoint.snapshot.take import snapshot_job
from sparkpoint.storage.home import Home, validate_name
from sparkpoint.storage.location import Location
from sparkpoint.storage.records import read_record, remove_record, write_record

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

Echo = Callable[[str], None]
DRAIN_INTENT = "drain-intent.json"


class DrainIntent(BaseModel):
    """A drain under way: its synthetic batch and the snapshot it was asked to take."""

    model_config = ConfigDict(extra="forbid")
    format_version: Literal[1] = 1
    drain: DrainBatch
    snapshot: str | None = None
    started_at: str


def _intent_path(home: Home, job: str) -> Location:
    return home.job_dir(job) / DRAIN_INTENT


def load_intent(home: Home, job: str) -> DrainIntent | None:
    """The drain a cut-off command left, if any."""
    return read_record(
        _intent_path(home, job), DrainIntent, "the record of an interrupted drain",
        "nothing was changed: inspect the job's checkpoint, then remove the file to go on")


def save_intent(home: Home, job: str, intent: DrainIntent) -> None:
    write_record(_intent_path(home, job), intent)


def remove_intent(home: Home, job: str) -> None:
    remove_record(_intent_path(home, job))


def refusals(home: Home, job: str, snapshot: str | None) -> JobRecord:
    """Step 0: what refuses the drain with nothing changed; the job's record."""
    record = JobRegistry(home).get(job)
    if snapshot is not None:
        validate_name(snapshot, "snapshot")
        interrupted = load_intent(home, job)
        finishing = interrupted is not None and interrupted.snapshot == snapshot
        if open_snapshot_store(home).exists(snapshot) and not finishing:
            raise NameTakenError(
                f"snapshot '{snapshot}' already exists; choose another name or delete it first")
    return record


def stop_running(home: Home, job: str, record: JobRecord, echo: Echo) -> None:
    """Step 1, first half: a running job is asked to stop, and waited for."""
    if record.effective_status() == "running":
        registry = JobRegistry(home)
        echo(f"asking job '{job}' ({record.describe_process()}) to stop: no new input from here")
        registry.request_stop(job)
        wait_until_stopped(registry, job, CANCEL_TIMEOUT_S, record)


def drain_held(home: Home, job: str, snapshot: str | None, spark: SparkSession | None,
               echo: Echo, build: Callable[..., Any] | None,
               finished: DrainRecord | None) -> DrainRecord:
    """Steps 1 (second half) to 4, the job held and recovered; ``finished``: the drain the
    recovery finished, which only gets the snapshot asked for."""
    registry = JobRegistry(home)
    if finished is not None:
        if snapshot is not None and finished.snapshot is None:
            snapshot_job(home, job, snapshot, echo)
            finished.snapshot = snapshot
            record = registry.get(job)
            record.drain = finished
            registry.save(record)
        return finished
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
        with phase(f"drain: batch {in_flight}"):
            run_job(home, options, spark=spark, echo=echo)
    intent = DrainIntent(
        drain=plan_drain_batch(checkpoint, checkpoint.require_latest_committed_batch()),
        snapshot=snapshot, started_at=now_iso())
    batch = intent.drain
    save_intent(home, job, intent)
    crash_point("drain.intent_recorded")

    try:
        with phase(f"drain: batch {batch.batch_id}"), \
                held_run(home, options, spark=spark, echo=echo) as run:
            write_drain_offsets(checkpoint, batch)
            crash_point("drain.offsets_written")
            echo(f"drain batch {batch.batch_id}: watermark and clock at their maximum, "
                 "no new input")
            run.execute()
    finally:
        if checkpoint.latest_committed_batch() != batch.batch_id:
            if remove_unrun_drain_offsets(checkpoint, batch):
                echo("the drain batch did not complete; its offsets entry was removed")
            remove_intent(home, job)
    if checkpoint.latest_committed_batch() != batch.batch_id:
        raise SparkQueryError(f"job '{job}': the drain batch did not complete; nothing changed")
    crash_point("drain.batch_committed")
    return finish_drain(home, job, intent, echo)


def finish_drain(home: Home, job: str, intent: DrainIntent, echo: Echo) -> DrainRecord:
    """The steps after the drain batch committed: watermark back, record, snapshot."""
    registry = JobRegistry(home)
    checkpoint = registry.checkpoint(job)
    batch = intent.drain
    restore_watermark(checkpoint, batch, int(time.time() * 1000))
    crash_point("drain.watermark_restored")
    record = registry.get(job)
    names = record.operator_names()
    with phase("drain: counting the state left"):
        left = state_rows(checkpoint, batch.batch_id)
    operators = [
        DrainedOperator(name=names.get(op.operator_id, str(op.operator_id)),
                        operator_id=op.operator_id, spark_operator_name=op.spark_operator_name,
                        rows=op.rows)
        for op in left
    ]
    record.drain = DrainRecord(batch=batch.batch_id, drained_at=now_iso(),
                               watermark_ms=batch.watermark_before_ms, operators=operators,
                               snapshot=intent.snapshot)
    record.status = "drained"
    registry.save(record)
    crash_point("drain.recorded")
    if intent.snapshot is not None:
        if open_snapshot_store(home).exists(intent.snapshot):
            echo(f"snapshot '{intent.snapshot}' of the drained state exists already")
        else:
            snapshot_job(home, job, intent.snapshot, echo)
    remove_intent(home, job)
    return record.drain


def roll_back_drain(home: Home, job: str, intent: DrainIntent, echo: Echo) -> None:
    """Undo a drain whose batch did not commit: its offsets entry goes, then the intent."""
    checkpoint = JobRegistry(home).checkpoint(job)
    if remove_unrun_drain_offsets(checkpoint, intent.drain):
        echo(f"job '{job}': rolled back an interrupted drain: its batch "
             f"{intent.drain.batch_id} had not run and was removed")
    else:
        echo(f"job '{job}': rolled back an interrupted drain that had changed nothing")
    remove_intent(home, job)


@dataclass(frozen=True)
class DrainRecovery:
    """What ``recover`` did: ``finished`` is the drain it finished, if any."""

    finished: DrainRecord | None = None
    rolled_back: bool = False


def recover(home: Home, job: str, echo: Echo) -> DrainRecovery:
    """Finish a drain cut off after its batch committed, or roll back one cut off before.
    The caller holds the job."""
    intent = load_intent(home, job)
    if intent is None:
        return DrainRecovery()
    checkpoint = JobRegistry(home).checkpoint(job)
    if checkpoint.latest_committed_batch() == intent.drain.batch_id:
        echo(f"job '{job}': finishing the drain interrupted after its batch "
             f"{intent.drain.batch_id} committed (watermark put back)")
        return DrainRecovery(finished=finish_drain(home, job, intent, echo))
    roll_back_drain(home, job, intent, echo)
    return DrainRecovery(rolled_back=True)
