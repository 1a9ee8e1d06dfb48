"""Which job an output directory belongs to, and the refusal of a job that would write into
another's.

Spark's file sink skips every batch id its log already holds (``FileStreamSink.addBatch``): a
job with no checkpoint runs batches 0, 1, ... and, into an output that holds batches, writes
nothing while it consumes its input. A job that is new to the home is most often a mistyped
name of the job that wrote the output, so the refusal names that job and the nearest name.

A job started from a snapshot continues the table of the snapshot's job: into an output the
home knows the writer of, that is right only for a snapshot of the writer's lineage (the jobs
it was started from, transitively, and those started from it). A snapshot of any other job
would number its batches and fill the table as if it were the writer's next version. An
output written outside sparkpoint has no known writer (a plain query adopted with ``snapshot
import``): only the batch numbering rules apply to it.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from urllib.parse import urlparse

from sparkpoint.checkpoint.sink_log import Location, latest_batch, output_location
from sparkpoint.errors import OutputHasHistoryError, UsageError
from sparkpoint.runtime.registry import JobRecord, JobRegistry
from sparkpoint.snapshot.store import SnapshotStore
from sparkpoint.storage.fileio import scheme_of
from sparkpoint.storage.local import to_path


def _key(location: Location) -> tuple[str, str, str]:
    """What makes two spellings of one output the same: a local directory with its links
    resolved; a URL's store (s3 and s3a are one, host names in any case) and its path."""
    text = output_location(location)
    scheme = scheme_of(text)
    if scheme == "file":
        return ("file", "", str(to_path(text).resolve()))
    parsed = urlparse(text)
    return (scheme, parsed.netloc.lower(), parsed.path.rstrip("/") or "/")


def same_output(a: Location, b: Location) -> bool:
    try:
        return _key(a) == _key(b)
    except (OSError, ValueError, UsageError):
        return False


def writes_to(record: JobRecord, output: Location) -> bool:
    """The record names ``output`` as its sink; records written before sinks were recorded
    are matched by a parameter naming that directory."""
    if record.output is not None:
        return same_output(record.output, output)
    if "output" in record.model_fields_set:
        return False  # recorded as writing no file sink (Kafka, foreachBatch...)
    return any(value and same_output(value, output) for value in record.params.values())


def writers_of(registry: JobRegistry, output: Location) -> list[str]:
    """Names of the jobs of this home whose file sink is ``output``."""
    writers = []
    for name in registry.names():
        try:
            record = registry.get(name)
        except Exception:
            continue
        if writes_to(record, output):
            writers.append(name)
    return writers


def nearest_name(name: str, names: list[str]) -> str | None:
    close = difflib.get_close_matches(name, names, n=1, cutoff=0.6)
    return close[0] if close else None


def refuse_output_with_history(registry: JobRegistry, job: str, output: str) -> None:
    """Refuse to start the new job ``job`` into ``output`` when its sink log holds batches."""
    latest = latest_batch(output)
    if latest is None:
        return
    writers = writers_of(registry, output)
    suggestion = nearest_name(job, [n for n in registry.names() if n != job])
    if suggestion is None and writers:
        suggestion = writers[0]
    written_by = (f"written by job {', '.join(repr(w) for w in writers)}" if writers
                  else "written by no job this home knows")
    did_you_mean = f"did you mean '{suggestion}'? " if suggestion is not None else ""
    raise OutputHasHistoryError(
        f"job '{job}' is new (no record in this home) and its output {output} already holds "
        f"batches up to {latest} in its sink log (_spark_metadata), {written_by}: Spark's file "
        f"sink would skip the new job's batches up to {latest} and write nothing; nothing was "
        f"changed. {did_you_mean}To continue a job run it under its own name; to upgrade it, "
        "start the new job with --from-snapshot of it; otherwise give this job a new, empty "
        "output directory")


def _snapshot_job(store: SnapshotStore, name: str) -> str | None:
    try:
        return store.get(name).job if store.exists(name) else None
    except Exception:
        return None  # a damaged or unreadable manifest names no job


def _parents(registry: JobRegistry, store: SnapshotStore) -> dict[str, set[str]]:
    """For each job of the home, the jobs whose snapshots it was started from."""
    parents: dict[str, set[str]] = {}
    for name in registry.names():
        try:
            lineage = registry.get(name).lineage
        except Exception:
            continue
        # ``from_snapshot`` lists every snapshot a resume point used, comma-separated;
        # ``snapshot_job`` is the first one's job, kept when its snapshot is gone.
        snapshots = [snap for snap in (lineage.from_snapshot or "").split(",") if snap]
        started_from = {job for snap in snapshots
                        if (job := _snapshot_job(store, snap)) is not None}
        if lineage.snapshot_job is not None:
            started_from.add(lineage.snapshot_job)
        parents[name] = started_from
    return parents


def _reachable(start: str, edges: dict[str, set[str]]) -> set[str]:
    seen, todo = {start}, [start]
    while todo:
        for nxt in edges.get(todo.pop(), set()) - seen:
            seen.add(nxt)
            todo.append(nxt)
    return seen


def lineage_of(registry: JobRegistry, store: SnapshotStore, job: str) -> set[str]:
    """``job``, the jobs it descends from and the jobs that descend from it."""
    parents = _parents(registry, store)
    children: dict[str, set[str]] = {}
    for child, of in parents.items():
        for parent in of:
            children.setdefault(parent, set()).add(child)
    return _reachable(job, parents) | _reachable(job, children)


def _quoted(names: Iterable[str]) -> str:
    return ", ".join(f"'{n}'" for n in names)


def start_outside_lineage(registry: JobRegistry, store: SnapshotStore, output: str | None,
                          snapshots: Iterable[str]) -> str | None:
    """Why a start from ``snapshots`` must not write into ``output``, or None: the output's
    sink log holds batches of a job of this home and none of the snapshots is of its
    lineage."""
    if output is None:
        return None
    used = {name: job for name in snapshots if (job := _snapshot_job(store, name)) is not None}
    latest = latest_batch(output)
    if not used or latest is None:
        return None
    writers = writers_of(registry, output)
    if not writers:
        return None  # written outside sparkpoint (or by a deleted job): batch rules only
    family = set().union(*(lineage_of(registry, store, w) for w in writers))
    if family & set(used.values()):
        return None
    which = ", ".join(f"'{name}' (of job '{job}')" for name, job in sorted(used.items()))
    plural = "s" if len(used) > 1 else ""
    return (
        f"the output {output} holds batches up to {latest} in its sink log (_spark_metadata), "
        f"written by job {_quoted(writers)}, and the snapshot{plural} {which} "
        f"{'are' if plural else 'is'} not of {'their' if len(writers) > 1 else 'its'} lineage "
        f"(jobs {_quoted(sorted(family))}): the new job would continue another job's table; "
        f"start from a snapshot of one of those jobs, or give this job a new, empty output "
        "directory")


def refuse_start_outside_lineage(registry: JobRegistry, store: SnapshotStore, job: str,
                                 output: str | None, snapshots: Iterable[str]) -> None:
    problem = start_outside_lineage(registry, store, output, snapshots)
    if problem is not None:
        raise OutputHasHistoryError(f"job '{job}' not started, nothing was created: {problem}")
