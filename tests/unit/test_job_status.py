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
from sparkpoint.runtime.registry import JobRecord, JobRegistry
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
