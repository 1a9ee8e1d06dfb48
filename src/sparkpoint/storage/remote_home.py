"""A home on S3 or HDFS: its jobs' files kept in step with a local working copy.

sparkpoint's checkpoint code reads and writes local paths. For a home at a URL, each job's
directory (record, intents, pending startpoints, checkpoint) is fetched into the home's local
copy (``Home.root``) before a command uses it, and what the command changed is uploaded back
before Spark or another process relies on it: before a query starts, when the job's lock is
let go. Spark itself writes the checkpoint in the home (``Home.checkpoint_location``); after
a query stops its new files are fetched.

What was last fetched or uploaded is remembered per job (size and local modification time of
each file, under ``<local copy>/.sync/``), so an upload sends only what changed locally and
removes in the home only what was removed locally, never a file Spark wrote meanwhile.

Upload order makes a cut-off upload recognisable: the job's own files first (a start from a
snapshot names the checkpoint it builds there), then the checkpoint's ``metadata`` (its query
id), then the rest; the job record says the job owns the checkpoint only once all is there.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from sparkpoint.checkpoint.version_files import files_for_version, rocksdb_ssts
from sparkpoint.crash_points import crash_point
from sparkpoint.storage.fileio import FileIO, file_io, join
from sparkpoint.storage.home import Home, name_problem
from sparkpoint.storage.lease import LeaseStore
from sparkpoint.storage.local import walk_files, write_atomic

SYNC_DIR = ".sync"
# Never copied: the lock is taken in the home itself (runtime/lock.py).
LOCAL_ONLY = frozenset({"run.lock"})
# Read and written at their URL only, never through the working copy: the lease (by its
# holder) and pending startpoints (by any machine, at any time).
AT_THEIR_URL = ("lease/", "startpoints/", "deleted")
# State files are written once under a name of their own (versioned deltas and snapshots,
# RocksDB zips and SSTs): one already here with the same size need not be fetched again.
STATE_PREFIX = "checkpoint/state/"
CHECKPOINT_PREFIX = "checkpoint/"
METADATA = "checkpoint/metadata"
JOB_RECORD = "job.json"
# Written first by a delete of a job in the home: the job is gone, whatever files remain.
TOMBSTONE = "deleted"

JOBS_FETCHED_AT_ONCE = 8
# Listings of a job a running query keeps changing, fetched before one is complete.
FETCH_ATTEMPTS = 3

Synced = dict[str, list[int]]


def _skipped(rel: str) -> bool:
    """Files never copied: the lock, what lives at its URL only, temp and staging files of a
    step under way."""
    if rel in LOCAL_ONLY or rel.startswith(AT_THEIR_URL):
        return True
    return any(part.startswith(".") and part.endswith(".tmp") for part in rel.split("/"))


def _record_path(home: Home, job: str) -> Path:
    return home.root / SYNC_DIR / f"{job}.json"


def _load(home: Home, job: str) -> Synced:
    try:
        data = json.loads(_record_path(home, job).read_text("utf-8"))
    except (OSError, ValueError):
        return {}
    return {str(k): list(v) for k, v in data.items()} if isinstance(data, dict) else {}


def _save(home: Home, job: str, synced: Synced) -> None:
    write_atomic(_record_path(home, job), json.dumps(synced, sort_keys=True).encode("utf-8"))


def _stamp(path: Path) -> list[int]:
    stat = path.stat()
    return [stat.st_size, stat.st_mtime_ns]


def _local_files(directory: Path) -> dict[str, Path]:
    if not directory.is_dir():
        return {}
    found = {}
    for path in walk_files(directory):
        rel = path.relative_to(directory).as_posix()
        if not _skipped(rel):
            found[rel] = path
    return found


def pull_job(home: Home, job: str, with_state: bool = True,
             state_version: int | None = None) -> None:
    """Make the local copy of the job's directory what the home holds; without ``with_state``
    the checkpoint's state files are left out (enough for records, logs and offsets), with
    ``state_version`` only those that load that version (what exporting it reads). A file
    written or changed here and not uploaded yet is kept as it is."""
    if home.url is None:
        return
    io = file_io(home.url)
    remote_dir, local_dir = home.job_url(job), home.job_dir(job)
    if _finish_deletion(home, job, io):
        return

    def in_scope(rel: str) -> bool:
        return with_state or not rel.startswith(STATE_PREFIX)

    before = _load(home, job)
    if before and not (local_dir / JOB_RECORD).is_file() and JOB_RECORD in before:
        # The working copy was deleted (it may be, at any time): what is missing here was
        # not removed by a command, so the home is the truth and nothing is removed there.
        before = {}
    # Changed here since the last fetch or upload, or written here: the local copy wins
    # until the next upload sends it (a fetch must not undo a step just taken).
    here = _local_files(local_dir)
    changed_here = {rel for rel, path in here.items() if before.get(rel) != _stamp(path)}
    changed_here |= set(before) - set(here)  # removed here (the upload removes it there)
    for attempt in range(FETCH_ATTEMPTS):
        stats = {rel: stat for rel, stat in io.walk_stats(remote_dir).items()
                 if not _skipped(rel) and in_scope(rel)}
        remote = {rel: size for rel, (size, _) in stats.items()}
        fetchable = {rel: size for rel, size in remote.items() if rel not in changed_here
                     and not _still_current(rel, local_dir / rel, stats[rel], before)}
        try:
            if state_version is None:
                _fetch(io, remote_dir, local_dir, fetchable)
            else:
                _fetch_version(io, remote_dir, local_dir, fetchable, state_version)
            break
        except FileNotFoundError:
            # A running job's maintenance removed an old version between listing and
            # fetching: list again (state files fetched already are not fetched twice).
            if attempt == FETCH_ATTEMPTS - 1:
                raise
    # The store's modification times, not the download's: a commit's time is when Spark
    # wrote commits/K in the home ('snapshot create --at', 'jobs show').
    for rel in fetchable:
        modified = stats[rel][1]
        local = local_dir / rel
        if modified is not None and local.is_file():
            os.utime(local, (modified, modified))
    synced = dict(before)
    for rel, path in _local_files(local_dir).items():
        if not in_scope(rel) or rel in changed_here:
            continue
        if rel in remote:
            synced[rel] = _stamp(path)
        elif rel in before:
            path.unlink()  # was in the home, is no more: removed by another process
            del synced[rel]
    _save(home, job, synced)


def _still_current(rel: str, local: Path, stat: tuple[int, float | None],
                   before: Synced) -> bool:
    """A checkpoint log file (offsets, commits, sources, metadata) fetched before, unchanged
    here since, and with the size and modification time the home gives it now: not fetched
    again. Spark writes each under a name of its own; a rewrite elsewhere (a drain, a
    startpoint) gives it a new modification time in the store. The job's own records are
    always fetched: they are few, and rewritten within a second of each other."""
    size, modified = stat
    if modified is None or not rel.startswith(CHECKPOINT_PREFIX) or \
            rel.startswith(STATE_PREFIX):
        return False
    try:
        here = local.stat()
    except FileNotFoundError:
        return False
    return here.st_size == size and abs(here.st_mtime - modified) < 1e-3 \
        and before.get(rel) == [here.st_size, here.st_mtime_ns]


def _fetch(io: FileIO, remote_dir: str, local_dir: Path, sizes: dict[str, int]) -> None:
    fetch = []
    for rel, size in sizes.items():
        local = local_dir / rel
        if rel.startswith(STATE_PREFIX) and local.is_file() and local.stat().st_size == size:
            continue
        fetch.append((join(remote_dir, rel), local))
    io.get_files(fetch)


def _fetch_version(io: FileIO, remote_dir: str, local_dir: Path, sizes: dict[str, int],
                   version: int) -> None:
    """Everything but state, and of the state the files that load ``version``."""
    state = {rel[len(STATE_PREFIX):] for rel in sizes if rel.startswith(STATE_PREFIX)}
    wanted = files_for_version(state, version)
    _fetch(io, remote_dir, local_dir, {rel: size for rel, size in sizes.items()
                                       if not rel.startswith(STATE_PREFIX)
                                       or rel[len(STATE_PREFIX):] in wanted})
    ssts = rocksdb_ssts(local_dir / STATE_PREFIX, wanted) & state
    _fetch(io, remote_dir, local_dir, {STATE_PREFIX + rel: sizes[STATE_PREFIX + rel]
                                       for rel in ssts})


def _upload_order(rel: str) -> tuple[int, str]:
    if not rel.startswith(CHECKPOINT_PREFIX):
        return (0, rel)
    return (1, rel) if rel == METADATA else (2, rel)


def push_job(home: Home, job: str) -> None:
    """Upload what changed in the local copy of the job's directory since it was last
    fetched or uploaded, and remove in the home what was removed here."""
    if home.url is None:
        return
    io = file_io(home.url)
    remote_dir, local_dir = home.job_url(job), home.job_dir(job)
    synced = _load(home, job)
    local = _local_files(local_dir)
    changed = sorted((rel for rel, path in local.items() if synced.get(rel) != _stamp(path)),
                     key=_upload_order)
    stamps = {rel: _stamp(local[rel]) for rel in changed}
    io.put_files([(local[rel], join(remote_dir, rel)) for rel in changed])
    for rel in sorted(set(synced) - set(local)):
        io.delete(join(remote_dir, rel))
    crash_point("remote_home.checkpoint_uploaded")
    _save(home, job, {**{rel: synced[rel] for rel in synced if rel in local}, **stamps})


def write_through(home: Home, job: str, path: Path) -> None:
    """A small file of the job just written locally (record, stop request): into the home
    at once, since other processes read it there."""
    if home.url is None:
        return
    rel = path.relative_to(home.job_dir(job)).as_posix()
    file_io(home.url).write_bytes(join(home.job_url(job), rel), path.read_bytes())
    synced = _load(home, job)
    synced[rel] = _stamp(path)
    _save(home, job, synced)


def remove_through(home: Home, job: str, path: Path) -> None:
    if home.url is None:
        return
    rel = path.relative_to(home.job_dir(job)).as_posix()
    file_io(home.url).delete(join(home.job_url(job), rel))
    synced = _load(home, job)
    synced.pop(rel, None)
    _save(home, job, synced)


def remote_exists(home: Home, job: str, rel: str) -> bool:
    assert home.url is not None
    return file_io(home.url).is_file(join(home.job_url(job), rel))


def pull_jobs(home: Home) -> None:
    """Fetch every job's record, logs and offsets (not its state) for listing; local copies
    of jobs the home no longer has are dropped."""
    if home.url is None:
        return
    io = file_io(home.url)
    names = [name for name in io.list_names(join(home.url, "jobs"))
             if name_problem(name, "job") is None]
    # Jobs are independent (own directory, own sync record): fetched several at once, since
    # each costs a few round trips to the store.
    with ThreadPoolExecutor(max_workers=JOBS_FETCHED_AT_ONCE) as pool:
        list(pool.map(lambda name: pull_job(home, name, with_state=False), names))
    if home.jobs_dir.is_dir():
        for entry in home.jobs_dir.iterdir():
            if entry.is_dir() and entry.name not in names and name_problem(entry.name, "job") \
                    is None:
                forget_job(home, entry.name)


def delete_job(home: Home, job: str) -> None:
    """Remove the job's directory in the home (the local copy goes with ``forget_job``).

    A tombstone goes first, so that a delete cut off while files go leaves no half-deleted
    job: every command that fetches the job finishes the deletion (see ``pull_job``)."""
    if home.url is None:
        return
    io = file_io(home.url)
    when = dt.datetime.now(dt.UTC).isoformat()
    io.write_bytes(join(home.job_url(job), TOMBSTONE), when.encode("utf-8"))
    crash_point("jobs.delete_tombstoned")
    _remove_tombstoned(home, job, io, keep_live_lease=False)  # the deleter's own lease too
    _record_path(home, job).unlink(missing_ok=True)


def _remove_tombstoned(home: Home, job: str, io: FileIO, keep_live_lease: bool) -> None:
    """Every file of a tombstoned job, the tombstone last; with ``keep_live_lease`` a live
    lease stays (its holder, maybe this process finishing the deletion, lets it go)."""
    remote_dir = home.job_url(job)
    lease_live = keep_live_lease and \
        LeaseStore(io, join(remote_dir, "lease"), job).holder() is not None
    for rel in io.walk_sizes(remote_dir):
        if rel != TOMBSTONE and not (lease_live and rel.startswith("lease/")):
            io.delete(join(remote_dir, rel))
    io.delete(join(remote_dir, TOMBSTONE))


def _finish_deletion(home: Home, job: str, io: FileIO) -> bool:
    """Finish a deletion that was cut off; True when the job was deleted."""
    if not io.is_file(join(home.job_url(job), TOMBSTONE)):
        return False
    _remove_tombstoned(home, job, io, keep_live_lease=True)
    local_dir = home.job_dir(job)
    if local_dir.is_dir():
        for entry in local_dir.iterdir():  # the local copy, but a lock held here stays
            if entry.name not in LOCAL_ONLY:
                shutil.rmtree(entry) if entry.is_dir() else entry.unlink()
    _record_path(home, job).unlink(missing_ok=True)
    return True


def forget_job(home: Home, job: str) -> None:
    shutil.rmtree(home.job_dir(job), ignore_errors=True)
    _record_path(home, job).unlink(missing_ok=True)
