"""A job's recorded settings (the ``--conf`` it runs with, kept in its record) reused by the
commands that start Spark for a version of it, so that a setting such as the Kafka
connector's ``spark.jars`` is given once.

The rule, the same for every command: the settings given on the command line win, key by
key, over the recorded ones; the job whose record is used is the one the command names
(``rehearse --against JOB``) or the job of the snapshot it starts from (``plan`` and
``resume-point build``; with a resume point file, the job of its snapshots when they are
all of one job). A snapshot imported from plain Spark has no job record: nothing is added.
What is used is said in the command's output, values that look like credentials masked.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping

from sparkpoint.errors import SparkpointError
from sparkpoint.runtime.registry import JobRegistry
from sparkpoint.storage.home import Home, name_problem

Echo = Callable[[str], None]

# Spark's own default of spark.redaction.regex: what its UI and logs hide.
_SECRET_KEY = re.compile(r"(?i)secret|password|token|access[.]?key")


def shown_setting(key: str, value: str) -> str:
    return f"{key}={'*********(redacted)' if _SECRET_KEY.search(key) else value}"


def with_recorded_conf(home: Home, job: str | None, given: Mapping[str, str],
                       echo: Echo) -> dict[str, str]:
    """``given`` over job ``job``'s recorded conf; the recorded keys used are echoed."""
    if job is None or name_problem(job, "job") is not None:
        return dict(given)
    registry = JobRegistry(home)
    try:
        if not registry.exists(job):
            return dict(given)
        recorded = registry.get(job).conf
    except SparkpointError:
        return dict(given)  # a damaged record: the command goes on with what it was given
    used = {key: value for key, value in recorded.items() if key not in given}
    if used:
        echo(f"settings of job {job} used: "
             + ", ".join(shown_setting(k, v) for k, v in sorted(used.items())))
    return {**recorded, **given}


def job_of_snapshots(home: Home, snapshots: Iterable[str]) -> str | None:
    """The one job the named snapshots were taken of; None when they are of several jobs or
    none can be read (the command reports a missing snapshot itself)."""
    from sparkpoint.snapshot.store import open_snapshot_store

    store = open_snapshot_store(home)
    jobs = set()
    for name in snapshots:
        try:
            if name_problem(name, "snapshot") is None and store.exists(name):
                jobs.add(store.get(name).job)
        except SparkpointError:
            continue
    return jobs.pop() if len(jobs) == 1 else None
