"""Finishing or undoing work a cut-off command left in a job's checkpoint.

Drains and startpoint applications record an intent in the home (``runtime/intents.py``)
before they change the checkpoint. Each protocol keeps its steps, its intent and its
recovery in one module (``drain/protocol.py``, ``startpoints/protocol.py``); the steps after
the intent are shared by the command and its recovery, and each writes the same result when
repeated, so recovery is: do the remaining steps again. This module only finds the intents a
cut-off command left and hands each to its protocol. Needs no JVM; the caller holds the
job's lock.

- A drain whose synthetic batch committed is finished: watermark put back, job marked drained
  with its residual state, the snapshot it was asked for taken.
- A drain whose synthetic batch did not commit is undone: its offsets entry is removed, so no
  later run executes the drain batch by surprise.
- A startpoint application is finished from its recorded resolution (not resolved again), so
  it is applied exactly once.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from sparkpoint.drain.protocol import finish_drain, roll_back_drain
from sparkpoint.runtime import intents
from sparkpoint.runtime.intents import DrainIntent, StartpointIntent
from sparkpoint.runtime.registry import DrainRecord, JobRegistry
from sparkpoint.startpoints.protocol import finish_startpoints
from sparkpoint.storage.home import Home

Echo = Callable[[str], None]


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
            roll_back_drain(home, job, drain, echo)
            rolled_back = True
    pending = intents.load(home, job, StartpointIntent)
    if pending is not None:
        echo(f"job '{job}': finishing the startpoints interrupted at "
             f"{pending.recorded_at} (as resolved then)")
        finish_startpoints(home, job, pending, echo)
    return Recovery(drained, rolled_back, pending is not None)
