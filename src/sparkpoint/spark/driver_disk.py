"""Whether a Spark application's executors read this machine's disk.

The rewrites that run as Spark tasks (a start into another partition count, a prune) read
and write a copy of the state in a directory of the driver's machine: beside a local home's
checkpoint, under the system's temporary directory for a home in a store, or under
sparkpoint's local scratch. Executors in the driver's process (``local[N]``) or on its host
read it; executors on other hosts (or in containers with disks of their own) do not, and a
task of theirs would fail on a missing file, or Spark's state reader with a stack trace.
:func:`require_driver_disk` asks them first: a file written here, looked for by many small
tasks, and one clear error when any task does not find it, before anything is rewritten.
The rewrite's own Python tasks also check the directory (:func:`check_here`), for an
executor the probe's tasks did not reach.
"""

from __future__ import annotations

import functools
import os
import socket
import uuid
from pathlib import Path
from typing import TYPE_CHECKING

from sparkpoint.errors import DriverDiskUnreachableError
from sparkpoint.storage.file_cache import SCRATCH_ENV, scratch_base

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

# Ends a task's error when the directory is not on its executor's disk; run_tasks looks for
# it in the failure Spark reports.
NOT_ON_THIS_DISK = "is not on this executor's disk"
# Probe tasks per core of the application: enough for the scheduler to spread them over
# every executor registered, each costing a file lookup.
_TASKS_PER_CORE = 4


# The directory a start builds its checkpoint in when the home is in a store (under the
# system's temporary directory); a local home's start builds beside the checkpoint.
TEMP_BUILD_PREFIX = "sparkpoint-build-"


def _inside(path: Path, directory: Path) -> bool:
    try:
        path.resolve().relative_to(directory.resolve())
    except ValueError:
        return False
    return True


def _remedy(directory: Path) -> str:
    """Where the directory comes from, and so how to put it where executors read it."""
    if any(part.startswith(TEMP_BUILD_PREFIX) for part in directory.parts):
        place = "set TMPDIR to a directory"
    elif _inside(directory, scratch_base()):
        place = f"set {SCRATCH_ENV} to a directory"
    else:
        place = "put the home in a directory"
    return (f"{place} every executor reads at the same path (a shared mount), or run this "
            "command with --master local[N] on this machine; nothing was changed")


def unreachable(directory: Path, found: str) -> DriverDiskUnreachableError:
    """The error for executors that did not find ``directory`` (``found``: what they saw)."""
    return DriverDiskUnreachableError(
        f"{directory}: expected the application's executors to read this machine's disk, "
        f"where this command's Spark tasks rewrite a copy of the state; {found}; "
        f"{_remedy(directory)}")


def failed_for_want_of_disk(directory: Path, failure: str) -> DriverDiskUnreachableError | None:
    """The error to raise for a job whose task failed (Spark's report, ``failure``) because
    ``directory`` is not on its executor's disk; None for any other failure."""
    for line in failure.splitlines():
        if NOT_ON_THIS_DISK in line:
            return unreachable(directory, f"a task said: {line.strip()[-300:]}")
    return None


def check_here(directory: Path) -> None:
    """In a task: fail, saying so, when ``directory`` (on the driver's disk) is not here."""
    if not directory.is_dir():
        raise FileNotFoundError(f"{directory} (from the driver, on host "
                                f"{socket.gethostname()}) {NOT_ON_THIS_DISK}")


def _looks_for(_task: int, marker: str) -> tuple[str, bool]:
    return socket.gethostname(), os.path.exists(marker)


def require_driver_disk(spark: SparkSession, directory: Path) -> None:
    """Raise DriverDiskUnreachableError unless the application's executors read
    ``directory``; nothing to ask when they run in this process (``local``)."""
    context = spark.sparkContext
    master = context.master or ""
    if master.startswith("local"):
        return
    marker = directory / f".executors-read-here-{uuid.uuid4().hex}"
    marker.write_bytes(b"")
    try:
        tasks = max(2, _TASKS_PER_CORE * int(context.defaultParallelism))
        seen = context.parallelize(range(tasks), tasks).map(
            functools.partial(_looks_for, marker=str(marker))).collect()
    finally:
        marker.unlink(missing_ok=True)
    blind = sorted({host for host, found in seen if not found})
    if blind:
        missed = sum(1 for _host, found in seen if not found)
        raise unreachable(directory, f"{missed} of {len(seen)} tasks of {master}, on host(s) "
                                     f"{', '.join(blind)}, did not find a file written there")
