"""Finishing or undoing what cut-off commands left of a job: one dispatch over every kind of
intent, above the protocols that own them.

Every multi-step protocol records an intent before its first change and keeps its steps and
its recovery in its own module; the steps after the intent are shared by the command and its
recovery, and each writes the same result when repeated, so recovery is: do the remaining
steps again, or undo what the intent proves was begun. This module only finds the intents a
job has and hands each to its protocol, in the order the protocols need (a drain before the
startpoints: a drain's batch is the job's newest). Needs no JVM; the caller holds the job.

- a drain (``drain/protocol.py``): finished when its batch committed, else rolled back;
- startpoints being applied (``startpoints/protocol.py``): finished as resolved then;
- a start from a snapshot whose record was written (``upgrade/interrupted.py``): its intent
  goes (one without a record is rolled back by the next start from a snapshot);
- a rewind of the job's output (``sinks/rewind.py``) and the empty sink history a start was
  giving it (``sinks/history.py``): finished (the output the job's last run wrote; a run
  into another output finishes that one's before it starts: runtime/runner.py);
- a deletion cut off after its tombstone: finished by the next run of a job of that name or
  the next listing that can take the job (``runtime/registry.py``): such a job has no record
  to recover.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from sparkpoint.drain import protocol as drain
from sparkpoint.runtime.registry import DrainRecord, JobRegistry
from sparkpoint.sinks.history import finish_seeding
from sparkpoint.sinks.rewind import finish_pending as finish_rewinds
from sparkpoint.startpoints import protocol as startpoints
from sparkpoint.storage.home import Home
from sparkpoint.upgrade import interrupted

Echo = Callable[[str], None]


@dataclass(frozen=True)
class Recovery:
    """What recovery found and did; ``drain`` is set when it finished a drain."""

    drain: DrainRecord | None = None
    drain_rolled_back: bool = False
    startpoints_applied: bool = False
    start_completed: bool = False
    rewinds_finished: int = 0
    seeding_finished: bool = False


def recover(home: Home, job: str, echo: Echo) -> Recovery:
    """Finish or undo, for job ``job`` (which exists), what every cut-off command left."""
    registry = JobRegistry(home)
    drained = drain.recover(home, job, echo)
    applied = startpoints.recover(home, job, echo)
    completed = interrupted.recover(registry.checkpoint(job).root, True, echo)
    rewinds, seeded = 0, False
    output = registry.get(job).output
    if output is not None:
        rewinds = len(finish_rewinds(output, lambda line: echo(f"job '{job}': {line}")))
        filled = finish_seeding(output, job)
        seeded = filled is not None
        if filled is not None:
            echo(f"job '{job}': finished giving the output {output} an empty sink history up "
                 f"to batch {filled.through} (an earlier start was cut off doing it)")
    return Recovery(drained.finished, drained.rolled_back, applied, completed, rewinds,
                    seeded)
