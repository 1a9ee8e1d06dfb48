"""Finishing or undoing work a cut-off command left in a job's checkpoint.

Drains and startpoint applications record an intent in the home (``runtime/intents.py``)
before they change the checkpoint. The steps after the intent are shared by the command and
its recovery, and each writes the same result when repeated, so recovery is: do the remaining
steps again. Needs no JVM; the caller holds the job's lock.

- A drain whose synthetic batch committed is finished: watermark put back, job marked drained
  with its residual state, the snapshot it was asked for taken.
- A drain whose synthetic batch did not commit is undone: its offsets entry is removed, so no
  later run executes the drain batch by surprise.
- A startpoint application is finished from its recorded resolution (not resolved again), so
  it is applied exactly once.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from sparkpoint.crash_points import crash_point
from sparkpoint.drain.residual import state_rows
from sparkpoint.drain.synthetic import remove_unrun_drain_offsets, restore_watermark
from sparkpoint.runtime import intents
from sparkpoint.runtime.intents import DrainIntent, ResolvedSource, StartpointIntent
from sparkpoint.runtime.registry import (
    AppliedStartpoint,
    DrainedOperator,
    DrainRecord,
    JobRegistry,
    now_iso,
)
from sparkpoint.snapshot.export import JobInfo
from sparkpoint.snapshot.manifest import Manifest
from sparkpoint.snapshot.store import open_snapshot_store
from sparkpoint.spark.version import installed_pyspark_version
from sparkpoint.startpoints.apply import apply, require_applicable
from sparkpoint.startpoints.resolve import Resolved
from sparkpoint.startpoints.store import Startpoint, StartpointStore
from sparkpoint.storage.home import Home

Echo = Callable[[str], None]


def snapshot_job(home: Home, job: str, name: str, echo: Echo,
                 batch: int | None = None) -> Manifest:
    """Snapshot the job's latest committed batch (or the earlier ``batch``) under ``name``."""
    registry = JobRegistry(home)
    record = registry.get(job)
    info = JobInfo(job=job, operator_names=record.operator_names(),
                   operator_windows=record.operator_windows(), job_file=record.job_file,
                   params=record.params, spark_version=installed_pyspark_version())
    checkpoint = registry.checkpoint(job)
    return open_snapshot_store(home).create(name, checkpoint, info, progress=echo, batch=batch)


def finish_drain(home: Home, job: str, intent: DrainIntent, echo: Echo) -> DrainRecord:
    """The steps after the drain batch committed: watermark back, record, snapshot."""
    registry = JobRegistry(home)
    checkpoint = registry.checkpoint(job)
    batch = intent.drain
    restore_watermark(checkpoint, batch, int(time.time() * 1000))
    crash_point("drain.watermark_restored")
    record = registry.get(job)
    names = record.operator_names()
    operators = [
        DrainedOperator(name=names.get(op.operator_id, str(op.operator_id)),
                        operator_id=op.operator_id, spark_operator_name=op.spark_operator_name,
                        rows=op.rows)
        for op in state_rows(checkpoint, batch.batch_id)
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


@dataclass(frozen=True)
class Recovery:
    """What recovery found and did; ``drain`` is set when it finished a drain."""

    drain: DrainRecord | None = None
    drain_rolled_back: bool = False
    startpoints_applied: bool = False


def recover(home: Home, job: str, echo: Echo) -> Recovery:
    """Finish or undo what an interrupted drain or startpoint application left."""
    drained: DrainRecord | None = None
    rolled_back = False
    drain = intents.load(home, job, DrainIntent)
    if drain is not None:
        checkpoint = JobRegistry(home).checkpoint(job)
        if checkpoint.latest_committed_batch() == drain.drain.batch_id:
            echo(f"job '{job}': finishing the drain interrupted after its batch "
                 f"{drain.drain.batch_id} committed (watermark put back)")
            drained = finish_drain(home, job, drain, echo)
        else:
            if remove_unrun_drain_offsets(checkpoint, drain.drain):
                echo(f"job '{job}': rolled back an interrupted drain: its batch "
                     f"{drain.drain.batch_id} had not run and was removed")
            else:
                echo(f"job '{job}': rolled back an interrupted drain that had changed nothing")
            intents.remove(home, job, DrainIntent)
            rolled_back = True
    pending = intents.load(home, job, StartpointIntent)
    if pending is not None:
        echo(f"job '{job}': finishing the startpoints interrupted at "
             f"{pending.recorded_at} (as resolved then)")
        finish_startpoints(home, job, pending, echo)
    return Recovery(drained, rolled_back, pending is not None)


def record_startpoints(home: Home, job: str, batch: int, pending: dict[str, list[Startpoint]],
                       resolved: list[Resolved],
                       consumed: dict[str, list[str]]) -> StartpointIntent:
    """Record what is about to be applied; from here on it is applied exactly once."""
    require_applicable(JobRegistry(home).checkpoint(job), batch)
    intent = StartpointIntent(intent_id=uuid.uuid4().hex, batch=batch, recorded_at=now_iso(),
                              pending=pending, consumed=consumed,
                              resolved=[ResolvedSource.of(r) for r in resolved])
    intents.save(home, job, intent)
    crash_point("startpoint.intent_recorded")
    return intent


def finish_startpoints(home: Home, job: str, intent: StartpointIntent, echo: Echo) -> None:
    """Apply a recorded intent: checkpoint, pending startpoints, job record, in that order."""
    registry = JobRegistry(home)
    resolved = [source.to_resolved() for source in intent.resolved]
    apply(registry.checkpoint(job), resolved, intent.batch)
    crash_point("startpoint.offsets_moved")
    store = StartpointStore(home)
    for source, entries in intent.pending.items():
        if intent.consumed is None:
            store.clear_if_unchanged(job, source, entries)
        else:
            # Exactly the sets applied: one made meanwhile (anywhere) stays pending.
            store.remove_applied(job, source, intent.consumed.get(source, []))
    crash_point("startpoint.cleared")
    record = registry.get(job)
    if not any(a.intent_id == intent.intent_id for a in record.startpoints_applied):
        for result in resolved:
            audit = result.to_dict()
            record.startpoints_applied.append(AppliedStartpoint(
                source=result.source, intent_id=intent.intent_id,
                startpoints=[s.model_dump(mode="json") for s in intent.pending[result.source]],
                set_ids=(intent.consumed or {}).get(result.source, []),
                applied_at=now_iso(), batch=intent.batch,
                offset_before=audit["offset_before"], offset_after=audit["offset_after"],
                positions=audit["positions"]))
            echo(f"startpoint applied to source '{result.source}': " + "; ".join(result.lines))
        registry.save(record)
    intents.remove(home, job, StartpointIntent)
