"""A container killed while it ran a job, then restarted: the restarted container's process
has the same host name and, in its new pid namespace, the very pid the dead run had
(``unshare --pid --fork``, as a container runtime starts it). Its home is on S3.

On main before this change the dead run's record counted as running while a process with
its pid lived on its host, and in the restarted container that process is the restart
itself: `run`, `drain` and `jobs delete` were refused (JOB_RUNNING) for ever, until job.json
was edited by hand. Here the restart waits out the dead run's lease (it cannot see the dead
run's namespace, so it never judges it by a pid) and goes on from its last committed batch,
with nothing lost or doubled.
"""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path
from typing import Any

import pytest

from sparkpoint.runtime.lock import lock_holder
from sparkpoint.runtime.registry import JobRegistry
from sparkpoint.storage.home import Home
from sparkpoint.testing import expected_hourly_counts, output_rows, write_clicks
from tests.integration.test_remote_home import _run_args
from tests.support.cli import Result, _env, command, wait_for
from tests.support.faults import in_fresh_pid_namespace
from tests.support.s3 import S3Server

pytestmark = pytest.mark.spark

# The pid the container's process gets, in every start of the container.
PID = 7
CONTAINER = {"SPARKPOINT_HOST": "container-1", "SPARKPOINT_LEASE_SECONDS": "6"}


def test_a_run_killed_and_restarted_with_its_pid_in_a_new_pid_namespace_goes_on(
    spark: Any, s3_server: S3Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bucket = s3_server.new_bucket()
    home = Home.resolve(f"s3://{bucket}/home")
    inp, out = tmp_path / "in", tmp_path / "out"
    events = write_clicks(inp, range(0, 3))
    env = {**CONTAINER, "SPARKPOINT_SCRATCH": str(tmp_path / "container-disk")}
    args = [arg for arg in _run_args("v1", inp, out) if arg != "--until-caught-up"]
    log = tmp_path / "first.log"
    with open(log, "wb") as handle:
        first = subprocess.Popen(in_fresh_pid_namespace(command(home, *args), pid=PID),
                                 stdout=handle, stderr=subprocess.STDOUT, env=_env(extra=env),
                                 start_new_session=True)
    try:
        wait_for(lambda: any(key.rsplit("/", 1)[-1].isdigit() for key in s3_server.keys(
            bucket, "home/jobs/v1/checkpoint/commits/")), 240, "a batch", log)
    finally:
        os.killpg(first.pid, signal.SIGKILL)  # the container is killed
        first.wait(timeout=60)
    dead = JobRegistry(home).get("v1")
    assert (dead.status, dead.pid, dead.host) == ("running", PID, "container-1")

    events += write_clicks(inp, range(3, 6))
    # From this test's machine the dead run's lease holds until it expires on the store's
    # clock; the restarted container finds the same (it cannot see the dead namespace).
    monkeypatch.setenv("SPARKPOINT_HOST", "container-1")
    wait_for(lambda: lock_holder(home, "v1") is None, 60, "the dead run's lease to expire")
    restarted = subprocess.run(
        in_fresh_pid_namespace(command(home, *_run_args("v1", inp, out)), pid=PID),
        capture_output=True, text=True, timeout=600, env=_env(extra=env))
    result = Result(restarted.returncode, restarted.stdout, restarted.stderr)
    assert result.code == 0, result.err[-3000:]
    record = JobRegistry(home).get("v1")
    assert record.effective_status() == "stopped"
    assert [run.status for run in record.runs] == ["failed", "stopped"]
    expected = expected_hourly_counts(events)
    assert expected and output_rows(spark, out) == expected
