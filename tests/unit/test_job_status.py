"""What 'jobs list/show' call a job whose record says 'running': the run's process, told
apart from any later one with its pid (boot, pid namespace, start time), and whether it
still holds the job (its kernel lock, its lease in a store). A record of an older version
(host and pid only) written on this machine is judged by its pid; one written on another
machine stands unless its lease says otherwise."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from sparkpoint import api
from sparkpoint.errors import JobRunningError
from sparkpoint.runtime.lock import job_lock
from sparkpoint.runtime.registry import JobRecord, JobRegistry, RunRecord
from sparkpoint.storage.home import Home
from sparkpoint.storage.processes import ProcessIdentity, this_host


def _dead_pid() -> int:
    child = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                           capture_output=True, text=True, check=True)
    return int(child.stdout)


@pytest.mark.parametrize(("host", "alive", "shown"), [
    (None, True, "running"),  # records written before hosts were recorded
    (None, False, "failed"),
    ("this", True, "running"),
    ("this", False, "failed"),
    ("another-machine", False, "running"),
])
def test_running_record_is_judged_by_its_own_machine(host: str | None, alive: bool,
                                                     shown: str) -> None:
    record = JobRecord(name="j", job_file="job.py", status="running",
                       pid=os.getpid() if alive else _dead_pid(),
                       host=socket.gethostname() if host == "this" else host)
    assert record.effective_status() == shown


def test_a_stopped_record_stays_stopped_wherever_it_ran() -> None:
    record = JobRecord(name="j", job_file="job.py", status="stopped", pid=None,
                       host="another-machine")
    assert record.effective_status() == "stopped"


def _record_of_a_dead_run(**identity: object) -> JobRecord:
    """A record left 'running' by a run whose process died; ``identity`` says how it
    looks from here."""
    return JobRecord(name="j", job_file="job.py", status="running", **identity)


@pytest.fixture(params=["local", "s3"])
def home_kind(request: pytest.FixtureRequest, tmp_path: Path) -> Home:
    if request.param == "local":
        return Home.resolve(str(tmp_path / "home"))
    server: Any = request.getfixturevalue("s3_server")
    for name, value in server.env.items():
        os.environ.setdefault(name, value)
    return Home.resolve(f"s3://{server.new_bucket()}/home")


@pytest.mark.parametrize("restart", ["same pid namespace, pid reused",
                                     "new pid namespace, same pid"])
def test_a_dead_run_whose_pid_a_restarted_container_reuses_blocks_nothing(
    home_kind: Home, restart: str
) -> None:
    """A container restarted: its first process has the pid the dead run had (here: this
    test's own pid), on the same host name and boot. On main the record counted as running
    while any process had that pid, and 'jobs delete' (like 'run' and 'drain') was refused
    until job.json was edited by hand."""
    me = ProcessIdentity.current()
    dead_run = {"host": me.host, "pid": me.pid, "boot_id": me.boot_id,
                "pid_namespace": me.pid_namespace if restart.startswith("same")
                else "pid:[4026500001]",
                "start_ticks": (me.start_ticks or 0) - 100}
    registry = JobRegistry(home_kind)
    registry.save(_record_of_a_dead_run(**dead_run))
    assert registry.get("j").effective_status() == "failed"
    assert api.jobs_delete(home_kind, "j")["deleted"] is True
    assert registry.names() == []


def test_a_live_run_of_this_process_is_running(home_kind: Home) -> None:
    registry = JobRegistry(home_kind)
    with job_lock(home_kind, "j"):
        record = JobRecord(name="j", job_file="job.py")
        record.mark_running_here()
        registry.save(record)
        assert registry.get("j").effective_status() == "running"
        with pytest.raises(JobRunningError, match=f"pid {os.getpid()} on {this_host()}"):
            api.jobs_delete(home_kind, "j")
    # Let go (its process lives on, but no longer holds the job): a failed run.
    assert registry.get("j").effective_status() == "failed"


def _save(home: object, record: JobRecord) -> None:
    from sparkpoint.runtime.registry import JobRegistry

    JobRegistry(home).save(record)  # type: ignore[arg-type]


def _run(run_id: str, status: str, started: str, first: int | None = None,
         last: int | None = None, ended: str | None = None) -> RunRecord:
    return RunRecord(run_id=run_id, started_at=started, ended_at=ended,
                     status=status, first_batch=first, last_batch=last)  # type: ignore[arg-type]


def test_runs_whose_process_died_are_failed_in_the_history(home: object) -> None:
    """kill -9 of a run leaves 'running' in its record: the job's status says failed, and
    so does its run in the history, with the batch it got to (the next run's first)."""
    from sparkpoint.api import job_view

    dead = _dead_pid()
    _save(home, JobRecord(name="j", job_file="job.py", status="running", pid=dead,
                          host=socket.gethostname(), run_id="r3", runs=[
                              _run("r1", "running", "2026-01-01T00:00:00+00:00", None),
                              _run("r2", "stopped", "2026-01-01T01:00:00+00:00", 4, 6,
                                   "2026-01-01T01:05:00+00:00"),
                              _run("r3", "running", "2026-01-01T02:00:00+00:00", 6)]))
    view = job_view(home, "j")  # type: ignore[arg-type]
    shown = view.to_dict()
    assert shown["status"] == "failed" and "killed" in shown["error"]
    assert [(r["run_id"], r["status"], r["last_batch"]) for r in shown["runs"]] == [
        ("r1", "failed", 4), ("r2", "stopped", 6), ("r3", "failed", None)]
    assert all("killed" in r["error"] for r in shown["runs"] if r["status"] == "failed")


def test_a_job_taken_over_by_a_newer_one_is_superseded_and_has_no_lag(
    home: object, tmp_path: object
) -> None:
    """A stopped job still has a lag (its input waits for it); once a newer job started
    from its snapshot or writing its output after its last run, it reads nothing more: no
    lag, and the newer job is named. A job run again after that is not superseded."""
    from sparkpoint.api import job_view, jobs_list
    from sparkpoint.runtime.registry import Lineage, SourceRecord

    out = f"{tmp_path}/out"
    sources = [SourceRecord(name="clicks", kind="file", path=f"{tmp_path}/in")]
    old = JobRecord(name="v1", job_file="job.py", status="stopped", output=out,
                    sources=sources, created_at="2026-01-01T00:00:00+00:00",
                    runs=[_run("r1", "stopped", "2026-01-01T00:00:01+00:00", None, 3,
                               "2026-01-01T00:10:00+00:00")])
    _save(home, old)
    assert job_view(home, "v1").superseded_by is None  # type: ignore[arg-type]
    assert job_view(home, "v1").lag is not None  # type: ignore[arg-type]
    _save(home, JobRecord(name="v2", job_file="job2.py", status="stopped", output=out,
                          created_at="2026-01-01T00:20:00+00:00",
                          lineage=Lineage(from_snapshot="s1", snapshot_job="v1")))
    _save(home, JobRecord(name="v3", job_file="job2.py", status="stopped", output=out,
                          created_at="2026-01-01T00:30:00+00:00",
                          lineage=Lineage(from_snapshot="s1", snapshot_job="v1")))
    view = job_view(home, "v1")  # type: ignore[arg-type]
    assert view.superseded_by == "v3" and view.lag is None
    assert view.to_dict()["lag"] is None and view.to_dict()["superseded_by"] == "v3"
    # The rollback v3 wrote v2's output after v2 was created: v2 is superseded too.
    assert {v.record.name: v.superseded_by
            for v in jobs_list(home)} == {"v1": "v3", "v2": "v3", "v3": None}  # type: ignore[arg-type]
    _save(home, old.model_copy(update={"runs": [*old.runs, _run(
        "r2", "stopped", "2026-01-01T00:40:00+00:00", 3, 5, "2026-01-01T00:45:00+00:00")]}))
    assert job_view(home, "v1").superseded_by is None  # type: ignore[arg-type]
