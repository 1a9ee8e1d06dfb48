"""sparkpoint inside a driver that already has a SparkSession: a notebook, a scheduler's
Python task, an application that starts its own queries.

    import sparkpoint

    query = sparkpoint.start(spark, build, job="clicks", home="/data/sparkpoint",
                             params={"input": "...", "output": "..."})
    ...
    manifest = sparkpoint.snapshot_create("clicks", "before-v2", home="/data/sparkpoint")
    query.stop()                       # or: sparkpoint.drain_job(spark, "clicks", build=build)

``start`` runs the job exactly as ``sparkpoint run`` does (its lock, record, recovery,
startpoints, progress, stop requests from ``sparkpoint jobs stop``), in a background thread
of the caller's process and in a copy of the caller's session (its settings, temporary
views and functions; sparkpoint's own settings stay in the copy), and returns the
``StreamingQuery`` once it runs. The other functions are the CLI's commands and return what
the CLI renders as ``--json`` (Manifest, UpgradePlan, DrainRecord, Problem lists...).
"""

from __future__ import annotations

import datetime as dt
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sparkpoint import api
from sparkpoint.errors import JobRunningError, UsageError
from sparkpoint.runtime.jobfile import PYTHON_BUILD_PREFIX
from sparkpoint.runtime.runner import RunResult
from sparkpoint.snapshot.inspect import InspectReport
from sparkpoint.snapshot.manifest import Manifest
from sparkpoint.snapshot.store import Problem
from sparkpoint.storage.home import Home
from sparkpoint.upgrade.validate import UpgradePlan

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming.query import StreamingQuery

    from sparkpoint.runtime.registry import DrainRecord

Build = Callable[..., Any]


@dataclass
class _Started:
    thread: threading.Thread
    query: StreamingQuery | None = None
    result: list[RunResult] = field(default_factory=list)
    error: list[BaseException] = field(default_factory=list)


# Jobs this process started with ``start``, by name: their run's thread and its outcome.
_started: dict[str, _Started] = {}


def _home(home: str | Path | None, snapshots: str | None) -> Home:
    return Home.resolve(str(home) if home is not None else None, snapshots)


def _job_source(build: Build | str | Path) -> tuple[Path, Build | None]:
    """A job file, or a build function named as the job record keeps it."""
    if callable(build):
        name = f"{getattr(build, '__module__', '?')}.{getattr(build, '__qualname__', '?')}"
        return Path(f"{PYTHON_BUILD_PREFIX}{name}"), build
    return Path(build), None


def _follow_previous_start(job: str) -> None:
    """Refuse at once a job whose query this process runs; wait for the thread of one whose
    query stopped (it is recording the run's end, and holds the job's lock until then)."""
    previous = _started.get(job)
    if previous is None or not previous.thread.is_alive():
        return
    if previous.query is not None and previous.query.isActive:
        raise JobRunningError(
            f"job '{job}' is already running in this process (started with sparkpoint.start, "
            f"query id {previous.query.id}); stop its query (query.stop(), or "
            "sparkpoint.drain_job) before starting it again")
    previous.thread.join()


def start(
    spark: SparkSession,
    build: Build | str | Path,
    job: str,
    home: str | Path | None = None,
    params: Mapping[str, str] | None = None,
    conf: Mapping[str, str] | None = None,
    from_snapshot: str | None = None,
    resume_point: str | Path | None = None,
    snapshots: str | None = None,
    echo: Callable[[str], None] = print,
    until_caught_up: bool = False,
    rewind_output: bool = False,
) -> StreamingQuery:
    """Start job ``job`` in ``spark`` (``build(spark, ctx)`` returns its unstarted writer, or a
    job file path) and return its running query (``until_caught_up``: it processes the input
    available at its start, then stops, as a scheduled batch-like run; ``rewind_output``: a
    start from a snapshot first takes the file sink's output back to the snapshot's batch,
    as ``run --rewind-output`` does). Refusals (bad names,
    a job running elsewhere or already in this process, a resume point that does not
    validate) are raised here at once, before any query. The job runs in a copy of
    ``spark`` (``spark/job_session.py``): sparkpoint's settings never reach ``spark``."""
    job_file, function = _job_source(build)
    _follow_previous_start(job)
    started: list[StreamingQuery] = []
    ready = threading.Event()

    def on_started(query: StreamingQuery) -> None:
        started.append(query)
        ready.set()

    def body() -> None:
        try:
            outcome.result.append(api.run(
                _home(home, snapshots), job_file, job, params=params, conf=conf,
                from_snapshot=from_snapshot,
                resume_point=Path(resume_point) if resume_point is not None else None,
                spark=spark, echo=echo, build=function, on_started=on_started,
                until_caught_up=until_caught_up, rewind_output=rewind_output))
        except BaseException as exc:  # handed to the caller, or kept for await_job
            outcome.error.append(exc)
        finally:
            ready.set()

    outcome = _Started(threading.Thread(target=body, name=f"sparkpoint:{job}", daemon=True))
    outcome.thread.start()
    ready.wait()
    if started:
        outcome.query = started[0]
        _started[job] = outcome
        return started[0]
    outcome.thread.join()
    if outcome.error:
        raise outcome.error[0]
    raise UsageError(f"job '{job}' ended before its query started")


def await_job(job: str, timeout: float | None = None) -> RunResult:
    """Wait until a job started here has ended and its record says so; its run's result, or
    the error it failed with (a query that stops is over only once sparkpoint recorded it)."""
    outcome = _started.get(job)
    if outcome is None:
        raise UsageError(f"job '{job}' was not started by sparkpoint.start in this process")
    outcome.thread.join(timeout)
    if outcome.thread.is_alive():
        raise JobRunningError(f"job '{job}' is still running after {timeout}s")
    del _started[job]
    if outcome.error:
        raise outcome.error[0]
    return outcome.result[0]


def snapshot_create(job: str, name: str, home: str | Path | None = None,
             snapshots: str | None = None, cancel: bool = False, batch: int | None = None,
             at: str | dt.datetime | None = None) -> Manifest:
    """Snapshot the job's latest committed batch (it may keep running), or the earlier
    committed ``batch``, or the newest batch whose time is at or before ``at``."""
    return api.snapshot_create(_home(home, snapshots), job, name, cancel=cancel, batch=batch,
                               at=at)


def snapshot_inspect(name: str, operator: str | None = None, rows: int = 0,
                     home: str | Path | None = None,
                     snapshots: str | None = None) -> InspectReport:
    """What the snapshot's state holds per operator and partition (no JVM)."""
    return api.snapshot_inspect(_home(home, snapshots), name, operator=operator, rows=rows)


def drain_job(spark: SparkSession, job: str, home: str | Path | None = None,
          snapshot: str | None = None, build: Build | None = None,
          snapshots: str | None = None) -> DrainRecord:
    """Stop the job, fire every window and timer, optionally snapshot the drained state."""
    return api.drain(_home(home, snapshots), job, snapshot=snapshot, spark=spark, build=build)


def plan(spark: SparkSession, build: Build | str | Path, home: str | Path | None = None,
         from_snapshot: str | None = None, resume_point: str | Path | None = None,
         params: Mapping[str, str] | None = None, snapshots: str | None = None) -> UpgradePlan:
    """What a job started from a snapshot or resume point would resume, and every problem."""
    job_file, function = _job_source(build)
    if function is not None:
        raise UsageError("plan takes a job file; give the path of the job's .py file")
    return api.plan(_home(home, snapshots), job_file, params=params, spark=spark,
                    from_snapshot=from_snapshot,
                    resume_point=Path(resume_point) if resume_point is not None else None)


def snapshot_list(job: str | None = None, home: str | Path | None = None,
                 snapshots: str | None = None) -> list[Manifest]:
    return api.snapshot_list(_home(home, snapshots), job)


def snapshot_verify(name: str, home: str | Path | None = None,
           snapshots: str | None = None) -> list[Problem]:
    return api.snapshot_verify(_home(home, snapshots), name)
