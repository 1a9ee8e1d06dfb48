"""Deleting a job (``jobs delete``): the protocol, its intent (the tombstone), its dry-run
refusals, its steps and how a cut-off one is finished.

A job's directory holds its record, checkpoint, control files, startpoints and (in a store)
its lease. Its snapshots are kept.

0. (``refusals``) the job exists and is not running anywhere (its run's process holds no
   lock or lease); nothing is changed before.
1. The job's lock is taken (the caller's facade), so no run can start while it goes.
2. On local disk the directory is renamed aside, to a hidden name no listing shows
   (``jobs.delete_renamed``), then removed; the next command that lists the jobs removes
   what a cut-off one left (``remove_renamed_aside``). A store has no atomic rename of a
   directory: a tombstone file is written first (``jobs.delete_tombstoned``: the job is gone
   from then on, for every command, whatever files remain), then every file but the lease's
   (``jobs.delete_files_removed``), then the tombstone, then the lease's generations, this
   holder's own last: until then every other process finds the job held.

A deletion cut off after its tombstone is finished under the job's lease (``finish``): first
of all by a run of a new job of that name, which must start from nothing (never continue the
deleted job's checkpoint), and by the next listing of the jobs that can take the lease at
once (``finish_if_free``).
"""

from __future__ import annotations

import datetime as dt
import os
import shutil
import uuid
from pathlib import Path

from sparkpoint.crash_points import crash_point
from sparkpoint.errors import JobRunningError
from sparkpoint.runtime.lock import held_lease, holder_of, job_lock
from sparkpoint.runtime.registry import TOMBSTONE, JobRegistry
from sparkpoint.storage.fileio import join
from sparkpoint.storage.home import Home
from sparkpoint.storage.lease import LEASE_DIR
from sparkpoint.storage.location import StorePath, tree_bytes

DELETED_PREFIX = ".deleted."


def refusals(home: Home, job: str) -> dict[str, int]:
    """Step 0: the job exists and is not running anywhere; what it holds (bytes of its
    checkpoint), for the command to report."""
    registry = JobRegistry(home)
    record = registry.get(job)
    holder = holder_of(home, job)
    if record.effective_status() == "running" or holder is not None:
        who = record.describe_process() if record.effective_status() == "running" \
            else holder.describe() if holder is not None else "another process"
        raise JobRunningError(
            f"job '{job}' is running ({who}); stop it first with "
            f"'sparkpoint jobs stop {job} --wait'")
    return {"checkpoint_bytes": tree_bytes(home.checkpoint_dir(job))}


def delete(home: Home, job: str) -> None:
    """Step 2 (the caller holds the job's lock, and checked it is no longer held by a
    lease it lost: a fence): see the module's docs."""
    lease = held_lease(home, job)
    if lease is not None:
        lease.check()  # only the holder deletes
    job_dir = home.job_dir(job)
    if isinstance(job_dir, StorePath):
        when = dt.datetime.now(dt.UTC).isoformat()
        (job_dir / TOMBSTONE).write_bytes(when.encode("utf-8"))
        crash_point("jobs.delete_tombstoned")
        _remove_tombstoned(home, job_dir, keep_lease=False)
        return
    doomed = home.root / "jobs" / f"{DELETED_PREFIX}{job}.{uuid.uuid4().hex[:8]}"
    os.rename(job_dir, doomed)
    crash_point("jobs.delete_renamed")
    shutil.rmtree(doomed)


def remove_renamed_aside(home: Home) -> None:
    """On local disk: remove what deletions cut off after their rename left (in a store:
    every listing of the jobs finishes cut-off deletions, see ``finish_if_free``)."""
    jobs = home.jobs_dir
    if not isinstance(jobs, Path) or not jobs.is_dir():
        return
    for entry in jobs.iterdir():
        if entry.name.startswith(DELETED_PREFIX) and entry.is_dir():
            shutil.rmtree(entry, ignore_errors=True)


def finish(home: Home, job: str, keep_lease: bool = True) -> bool:
    """Remove what a cut-off ``jobs delete`` left of the job (the caller holds its lock,
    and with ``keep_lease`` goes on holding it: a run of a new job of the name); True
    when there was such a deletion to finish."""
    job_dir = home.job_dir(job)
    if not isinstance(job_dir, StorePath) or not JobRegistry(home).tombstoned(job):
        return False
    _remove_tombstoned(home, job_dir, keep_lease)
    return True


def finish_if_free(home: Home, job: str) -> None:
    """Finish a cut-off deletion when the job's lease can be taken at once; else its
    holder (a delete under way, a run of a new job of the name) does."""
    try:
        with job_lock(home, job, wait=False):
            finish(home, job, keep_lease=False)
    except JobRunningError:
        pass


def _remove_tombstoned(home: Home, job_dir: StorePath, keep_lease: bool) -> None:
    """Every file of a tombstoned job but its lease's, the tombstone last; then, unless
    ``keep_lease``, the lease this thread holds is ended and its files removed, its own
    newest generation last."""
    # Whole subtrees: Spark's s3a also leaves directory markers ("state/0/"), which a
    # listing of files does not show and Spark's next batch 0 would find in its way.
    for name in job_dir.io.list_names(job_dir.url):
        if name not in (TOMBSTONE, LEASE_DIR):
            job_dir.io.delete_tree(join(job_dir.url, name))
    crash_point("jobs.delete_files_removed")
    job_dir.io.delete(join(job_dir.url, TOMBSTONE))
    if keep_lease:
        return
    lease = held_lease(home, job_dir.name)
    if lease is not None:
        lease.gone_with_job()  # no renewal may create a generation behind the deletion
    generations = sorted(rel for rel in job_dir.io.walk_sizes(job_dir.url)
                         if rel.startswith(f"{LEASE_DIR}/"))
    for rel in generations:  # zero-padded: the newest sorts last
        job_dir.io.delete(join(job_dir.url, rel))
