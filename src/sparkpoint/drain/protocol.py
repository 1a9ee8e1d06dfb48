"""Draining a job: the protocol, its intent and its recovery.

Spark has no drain. After the last committed batch N, sparkpoint writes ``offsets/N+1`` with
N's source offsets and a maximal watermark and clock (``drain/synthetic.py``) and lets Spark
run that batch: every event-time window, session and join buffer is emitted and evicted and
every timer fires. Then the job's own watermark is put back into the batch's entries, the job
is recorded drained with what state it still holds, and the snapshot asked for is taken.

The drain batch is recorded in the home (a ``DrainIntent``) before the checkpoint changes. A
drain cut off after its batch committed is finished from the intent by the next command
(``finish_drain``: each step writes the same result when repeated); one cut off before is
rolled back (``roll_back_drain``: the unrun batch's offsets entry is removed), so no later run
executes the drain batch by surprise. ``runtime/recovery.py`` hands intents here.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sparkpoint.crash_points import crash_point
from sparkpoint.drain.residual import state_rows
from sparkpoint.drain.synthetic import (
    plan_drain_batch,
    remove_unrun_drain_offsets,
    restore_watermark,
    write_drain_offsets,
)
from sparkpoint.errors import (
    NoCommittedBatchError,
    PreconditionError,
    SparkQueryError,
    UsageError,
)
from sparkpoint.progress import phase
from sparkpoint.runtime import intents
from sparkpoint.runtime.intents import DrainIntent
from sparkpoint.runtime.jobfile import PYTHON_BUILD_PREFIX
from sparkpoint.runtime.registry import DrainedOperator, DrainRecord, JobRegistry, now_iso
from sparkpoint.runtime.runner import PlannedJob, RunOptions, run_job
from sparkpoint.snapshot.store import open_snapshot_store
from sparkpoint.snapshot.take import snapshot_job
from sparkpoint.storage.home import Home

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

Echo = Callable[[str], None]


def drain_locked(home: Home, job: str, snapshot: str | None, spark: SparkSession | None,
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
        with phase(f"drain: batch {in_flight}"):
            run_job(home, options, spark=spark, echo=echo)
    intent = DrainIntent(
        drain=plan_drain_batch(checkpoint, checkpoint.require_latest_committed_batch()),
        snapshot=snapshot, started_at=now_iso())
    batch = intent.drain
    intents.save(home, job, intent)
    crash_point("drain.intent_recorded")

    def prepare(_planned: PlannedJob) -> None:
        write_drain_offsets(checkpoint, batch)
        crash_point("drain.offsets_written")
        echo(f"drain batch {batch.batch_id}: watermark and clock at their maximum, "
             "no new input")

    try:
        with phase(f"drain: batch {batch.batch_id}"):
            run_job(home, options, spark=spark, prepare=prepare, echo=echo)
    finally:
        if checkpoint.latest_committed_batch() != batch.batch_id:
            if remove_unrun_drain_offsets(checkpoint, batch):
                echo("the drain batch did not complete; its offsets entry was removed")
            intents.remove(home, job, DrainIntent)
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
    intents.remove(home, job, DrainIntent)
    return record.drain


def roll_back_drain(home: Home, job: str, intent: DrainIntent, echo: Echo) -> None:
    """Undo a drain whose batch did not commit: its offsets entry goes, then the intent."""
    checkpoint = JobRegistry(home).checkpoint(job)
    if remove_unrun_drain_offsets(checkpoint, intent.drain):
        echo(f"job '{job}': rolled back an interrupted drain: its batch "
             f"{intent.drain.batch_id} had not run and was removed")
    else:
        echo(f"job '{job}': rolled back an interrupted drain that had changed nothing")
    intents.remove(home, job, DrainIntent)
