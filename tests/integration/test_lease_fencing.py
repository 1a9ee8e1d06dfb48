"""Fencing on a home on S3 (moto's server, Spark through s3a): a running job frozen past its
lease (SIGSTOP of its process group, the driver's JVM included) is taken over by another
machine, which runs it; when the first wakes it exits LEASE_LOST (4) without committing a
batch, and the output equals an uninterrupted run's.

On main before leases: the lock in the home lasted 12 hours and was never renewed, so the
second machine was refused; with a lock past its age, the woken first process went on
running the job beside the second.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import threading
import time
from collections import Counter
from pathlib import Path

import pytest

from sparkpoint import api
from sparkpoint.errors import SparkpointError
from sparkpoint.runtime.lock import job_lock, lock_holder
from sparkpoint.storage.home import Home
from sparkpoint.testing import clicks_for_slice, expected_hourly_counts, output_rows, write_clicks
from tests.integration.test_remote_home import _run_args
from tests.support.cli import _env, command, sparkpoint, wait_for
from tests.support.s3 import S3Server
from tests.support.slow_proxy import fault_proxy, slow_proxy

pytestmark = pytest.mark.spark

LEASE_SECONDS = 6


def _commits(s3_server: S3Server, bucket: str) -> set[str]:
    return {key for key in s3_server.keys(bucket, "home/jobs/v1/checkpoint/commits/")
            if key.rsplit("/", 1)[-1].isdigit()}


def _machine(tmp_path: Path, name: str) -> dict[str, str]:
    return {"SPARKPOINT_HOST": name, "SPARKPOINT_SCRATCH": str(tmp_path / name),
            "SPARKPOINT_LEASE_SECONDS": str(LEASE_SECONDS)}


def _s3_home_with_clicks(s3_server: S3Server, tmp_path: Path,
                         monkeypatch: pytest.MonkeyPatch) -> tuple[str, Home, Path, Path]:
    """A home in a new bucket (this test process as a machine of its own) and two slices of
    clicks: (bucket, home, input, output)."""
    bucket = s3_server.new_bucket()
    monkeypatch.setenv("SPARKPOINT_SCRATCH", str(tmp_path / "test-machine"))
    home = Home.resolve(f"s3://{bucket}/home")
    inp, out = tmp_path / "in", tmp_path / "out"
    write_clicks(inp, range(0, 2))
    return bucket, home, inp, out


def test_a_job_frozen_past_its_lease_is_taken_over_and_wakes_to_lease_lost(
    spark: object, s3_server: S3Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bucket, home, inp, out = _s3_home_with_clicks(s3_server, tmp_path, monkeypatch)
    args = [arg for arg in _run_args("v1", inp, out) if arg != "--until-caught-up"]
    log = tmp_path / "machine-a.log"
    with open(log, "wb") as handle:
        # Its own process group: SIGSTOP freezes the driver's JVM with it.
        first = subprocess.Popen(command(home, *args), stdout=handle, stderr=subprocess.STDOUT,
                                 env=_env(extra=_machine(tmp_path, "machine-a")),
                                 start_new_session=True)
    try:
        # Frozen wherever it is once it has committed a batch (mid-batch included).
        wait_for(lambda: len(_commits(s3_server, bucket)) >= 1, 240, "a batch", log)
        os.killpg(first.pid, signal.SIGSTOP)
        time.sleep(LEASE_SECONDS + 2)  # the scenario: frozen for longer than its lease

        write_clicks(inp, range(2, 3))
        taken = sparkpoint(home, *_run_args("v1", inp, out),
                           env=_machine(tmp_path, "machine-b"))
        assert taken.code == 0, taken.err[-3000:]
        assert "took over the lease left by" in taken.err and "machine-a" in taken.err
        committed = _commits(s3_server, bucket)

        # New input waits for whoever runs the job next; the first process wakes up.
        write_clicks(inp, range(3, 5))
        os.killpg(first.pid, signal.SIGCONT)
        assert first.wait(timeout=180) == 4, log.read_text()[-3000:]
        assert "LEASE_LOST" in log.read_text()
        assert _commits(s3_server, bucket) == committed, "a fenced-out process committed"
    finally:
        if first.poll() is None:
            os.killpg(first.pid, signal.SIGCONT)
            os.killpg(first.pid, signal.SIGKILL)
            first.wait(timeout=60)

    again = sparkpoint(home, *_run_args("v1", inp, out), env=_machine(tmp_path, "machine-b"))
    assert again.code == 0, again.err[-3000:]
    # Every slice written (0-4), each counted once: the rows computed from the input.
    read = [click for index in range(5) for click in clicks_for_slice(index)]
    assert Counter(output_rows(spark, out)) == expected_hourly_counts(read)  # type: ignore[arg-type]


def test_once_jobs_stop_wait_says_stopped_the_next_command_can_take_the_job(
    s3_server: S3Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``jobs stop --wait`` (and the stop a drain or ``snapshot create --cancel`` asks for)
    returns once the stopped run has let go of the job, not as soon as its record says
    stopped: a run writes its record, then releases its lease, and a drain that took the job
    in between was refused JOB_RUNNING by the very run it had stopped. Found by the torture
    test (tests/integration/test_home_torture.py). The run's release of its lease is held at
    a proxy, which keeps it in that moment for as long as the test needs."""
    bucket, home, inp, out = _s3_home_with_clicks(s3_server, tmp_path, monkeypatch)
    args = [arg for arg in _run_args("v1", inp, out) if arg != "--until-caught-up"]
    log = tmp_path / "machine-a.log"
    outcome: dict[str, str] = {}

    def stop_then_take() -> None:
        try:
            api.jobs_stop(home, "v1", wait=True)
            with job_lock(home, "v1"):  # what a drain or a run takes next
                outcome["taken"] = "yes"
        except SparkpointError as exc:
            outcome["refused"] = str(exc)

    with slow_proxy(s3_server.endpoint, latency=0, bytes_per_second=0) as proxy, \
            open(log, "wb") as handle:
        machine_a = {**_machine(tmp_path, "machine-a"), "AWS_ENDPOINT_URL": proxy.endpoint,
                     "SPARKPOINT_LEASE_SECONDS": "600"}  # no renewal while the test runs
        first = subprocess.Popen(command(home, *args), stdout=handle, stderr=subprocess.STDOUT,
                                 env=_env(extra=machine_a))
        try:
            wait_for(lambda: len(_commits(s3_server, bucket)) >= 1, 240, "a batch", log)
            # From here the run's next write of its lease (its release) waits at the proxy.
            proxy.hold = re.compile(r"^PUT \S*jobs/v1/lease/")
            stopper = threading.Thread(target=stop_then_take)
            stopper.start()
            wait_for(lambda: proxy.held_count() >= 1, 120, "the run letting go", log)
            # The run's record says stopped and its lease is still live: a stopper that does
            # not wait for the lease has seen the record by now and tried to take the job.
            stopper.join(timeout=5)
            proxy.release()
            stopper.join(timeout=120)
            assert first.wait(timeout=120) == 0, log.read_text()[-3000:]
        finally:
            proxy.release()
            if first.poll() is None:
                first.kill()
                first.wait(timeout=60)
    assert outcome == {"taken": "yes"}


def _holdings(*logs: Path) -> list[tuple[float, float, str]]:
    """Each holding of the job's lease in these lease logs: (taken, let go, host), on this
    machine's monotonic clock, in the order taken."""
    lines = [json.loads(text) for log in logs if log.exists()
             for text in log.read_text().splitlines()]
    taken = {line["token"]: line for line in lines if line["event"] == "acquired"}
    let_go = {line["token"]: line for line in lines if line["event"] == "released"}
    assert set(taken) == set(let_go), lines
    return sorted((line["monotonic"], let_go[token]["held_until_monotonic"], line["host"])
                  for token, line in taken.items())


def test_a_renewal_held_in_the_network_lets_another_machine_run_the_job_alone(
    spark: object, s3_server: S3Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Machine A runs the job on an S3 home; its next renewal of the lease hangs in the
    network (held at a proxy) while A's process goes on. The lease expires on the store's
    clock, machine B takes the job and runs it, then A's renewal reaches the store.

    On main A's renewal had checked the store before it was held, then rewrote its own
    generation and extended its deadline when it landed: A ran on beside B. Here A's
    renewal loses its conditional create to B's take; A writes nothing after its own
    deadline (Spark's commits included: fenced in its JVM), exits LEASE_LOST, and the two
    holdings in the lease logs do not overlap."""
    bucket, home, inp, out = _s3_home_with_clicks(s3_server, tmp_path, monkeypatch)
    args = [arg for arg in _run_args("v1", inp, out) if arg != "--until-caught-up"]
    log, leases_a, leases_b = (tmp_path / "machine-a.log", tmp_path / "a.leases.jsonl",
                               tmp_path / "b.leases.jsonl")
    with fault_proxy(s3_server.endpoint) as proxy, open(log, "wb") as handle:
        machine_a = {**_machine(tmp_path, "machine-a"), "AWS_ENDPOINT_URL": proxy.endpoint,
                     "SPARKPOINT_LEASE_LOG": str(leases_a)}
        first = subprocess.Popen(command(home, *args), stdout=handle, stderr=subprocess.STDOUT,
                                 env=_env(extra=machine_a), start_new_session=True)
        try:
            wait_for(lambda: len(_commits(s3_server, bucket)) >= 1, 240, "a batch", log)
            renewal = proxy.pause("PUT", r"/jobs/v1/lease/\d+\.json")
            renewal.wait_reached(120)
            write_clicks(inp, range(2, 3))
            monkeypatch.setenv("SPARKPOINT_HOST", "machine-b")
            wait_for(lambda: lock_holder(home, "v1") is None, 60,
                     "the lease to expire on the store's clock", log)
            taken = sparkpoint(home, *_run_args("v1", inp, out),
                               env={**_machine(tmp_path, "machine-b"),
                                    "SPARKPOINT_LEASE_LOG": str(leases_b)})
            assert taken.code == 0, taken.err[-3000:]
            committed = _commits(s3_server, bucket)
            renewal.release()
            assert first.wait(timeout=180) == 4, log.read_text()[-3000:]
            assert "LEASE_LOST" in log.read_text()
            assert _commits(s3_server, bucket) == committed, "a fenced-out process committed"
        finally:
            if first.poll() is None:
                os.killpg(first.pid, signal.SIGKILL)
                first.wait(timeout=60)
    holdings = _holdings(leases_a, leases_b)
    assert [host for _, _, host in holdings] == ["machine-a", "machine-b"], holdings
    (_, a_until, _), (b_taken, _, _) = holdings
    assert a_until <= b_taken, f"two holders at once: {holdings}"

    again = sparkpoint(home, *_run_args("v1", inp, out), env=_machine(tmp_path, "machine-b"))
    assert again.code == 0, again.err[-3000:]
    read = [click for index in range(3) for click in clicks_for_slice(index)]
    assert Counter(output_rows(spark, out)) == expected_hourly_counts(read)  # type: ignore[arg-type]
