"""What 'jobs list/show' call a job whose record says 'running': on this machine the pid
decides; a record written on another machine (a home on S3 or HDFS is shared) stands."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest

from sparkpoint.runtime.registry import JobRecord


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
