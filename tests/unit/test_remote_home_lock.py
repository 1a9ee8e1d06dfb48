"""The job lock of a home on S3 (moto's server on loopback) is taken in the bucket itself:
a second holder anywhere gets the typed JOB_RUNNING error and changes nothing; a lock left by
a dead process on this machine, or one too old from another, is taken over."""

from __future__ import annotations

import datetime as dt
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from sparkpoint.errors import JobRunningError
from sparkpoint.runtime.lock import REMOTE_LOCK_EXPIRY, job_lock, lock_holder
from sparkpoint.storage.home import Home
from tests.support.s3 import S3Server

HOLDER = """
import sys
from sparkpoint.runtime.lock import job_lock
from sparkpoint.storage.home import Home
with job_lock(Home.resolve(sys.argv[1]), "j"):
    print("held", flush=True)
    sys.stdin.read()  # until the test closes our stdin
"""


def _home(s3_server: S3Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
          machine: str) -> Home:
    monkeypatch.setenv("SPARKPOINT_SCRATCH", str(tmp_path / machine))
    return Home.resolve(f"s3://{s3_server.new_bucket()}/home")


def _lock_key(home: Home) -> tuple[str, str]:
    assert home.url is not None
    bucket, _, prefix = home.url[len("s3://"):].partition("/")
    return bucket, f"{prefix}/jobs/j/run.lock"


def test_a_second_holder_in_another_process_gets_job_running(
    s3_server: S3Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = _home(s3_server, tmp_path, monkeypatch, "a")
    env = dict(os.environ, SPARKPOINT_SCRATCH=str(tmp_path / "b"))  # another working copy
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, home.location], env=env,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        assert lock_holder(home, "j") == holder.pid
        with pytest.raises(JobRunningError) as refused, job_lock(home, "j"):
            pytest.fail("two holders of one job's lock")
        assert refused.value.code == "JOB_RUNNING"
        assert f"pid {holder.pid}" in refused.value.message
        bucket, key = _lock_key(home)
        assert key in s3_server.keys(bucket)  # the holder's lock is untouched
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait(timeout=60)
    assert holder.returncode == 0
    assert lock_holder(home, "j") is None
    with job_lock(home, "j"):  # let go: free for the next one
        assert lock_holder(home, "j") == os.getpid()


@pytest.mark.parametrize("host, pid, age, held", [
    ("another-machine", 4242, dt.timedelta(minutes=1), True),
    ("another-machine", 4242, REMOTE_LOCK_EXPIRY + dt.timedelta(minutes=1), False),
    (socket.gethostname(), 2 ** 22 + 12345, dt.timedelta(minutes=1), False),  # no such pid
])
def test_a_lock_left_in_the_home_is_honoured_or_taken_over_by_the_lease_rules(
    s3_server: S3Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    host: str, pid: int, age: dt.timedelta, held: bool,
) -> None:
    home = _home(s3_server, tmp_path, monkeypatch, "a")
    bucket, key = _lock_key(home)
    started = (dt.datetime.now(dt.UTC) - age).isoformat()
    s3_server.client().put_object(Bucket=bucket, Key=key, Body=json.dumps(
        {"host": host, "pid": pid, "started_at": started}).encode())
    if held:
        with pytest.raises(JobRunningError, match="another-machine"), job_lock(home, "j"):
            pytest.fail("a live lock of another machine was taken")
        assert key in s3_server.keys(bucket)
        return
    taken_over: list[str] = []
    with job_lock(home, "j", echo=taken_over.append):
        assert lock_holder(home, "j") == os.getpid()
    assert taken_over and "took over the lock" in taken_over[0]
    assert key not in s3_server.keys(bucket)
