"""The fault tools of the tests do what they say (tests/support/slow_proxy.py, faults.py):
the proxy delays, fails, cuts and holds the requests its rules match and no others; a
process with its clock set apart reads a wall clock off by that much and the machine's
monotonic clock, and so does the JVM it starts; a process in a fresh pid namespace is pid 1
(or the pid asked for) and sees none of the test's processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from botocore.config import Config
from botocore.exceptions import ClientError, ConnectionClosedError, EndpointConnectionError

from sparkpoint.storage.home import Home
from tests.support.faults import (
    clock_apart_env,
    in_fresh_pid_namespace,
    sparkpoint_in_fresh_pid_namespace,
)
from tests.support.s3 import S3Server
from tests.support.slow_proxy import SlowProxy, fault_proxy

CLOCKS = "import json, time; print(json.dumps([time.time(), time.monotonic()]))"


def _client(endpoint: str, attempts: int = 1) -> Any:
    import boto3

    return boto3.client("s3", endpoint_url=endpoint, aws_access_key_id="testing",
                        aws_secret_access_key="testing", region_name="us-east-1",
                        config=Config(retries={"total_max_attempts": attempts, "mode": "standard"}))


@pytest.fixture
def bucket(s3_server: S3Server) -> str:
    name = s3_server.new_bucket()
    s3_server.client().put_object(Bucket=name, Key="a/one", Body=b"one")
    s3_server.client().put_object(Bucket=name, Key="b/two", Body=b"two")
    return name


@pytest.fixture
def proxy(s3_server: S3Server) -> Any:
    with fault_proxy(s3_server.endpoint) as started:
        yield started


def test_a_delayed_request_takes_at_least_its_delay_and_others_are_not_touched(
    proxy: SlowProxy, bucket: str
) -> None:
    rule = proxy.delay("GET", r"/a/", ms=800)
    client = _client(proxy.endpoint)
    began = time.monotonic()
    body = client.get_object(Bucket=bucket, Key="a/one")["Body"].read()
    took = time.monotonic() - began
    assert (body, client.get_object(Bucket=bucket, Key="b/two")["Body"].read()) == \
        (b"one", b"two")
    assert took >= 0.8
    assert rule.matched == [f"GET /{bucket}/a/one"]


def test_a_failed_request_is_answered_by_the_proxy_and_a_retry_gets_through(
    proxy: SlowProxy, s3_server: S3Server, bucket: str
) -> None:
    proxy.fail("PUT", r"/a/new$", status=503, times=1)
    with pytest.raises(ClientError) as refused:
        _client(proxy.endpoint).put_object(Bucket=bucket, Key="a/new", Body=b"x")
    assert refused.value.response["ResponseMetadata"]["HTTPStatusCode"] == 503
    assert refused.value.response["Error"]["Code"] == "SlowDown"
    assert "a/new" not in s3_server.keys(bucket)  # the store never saw it
    # The rule was for one request: botocore's retry of a 500 goes through.
    proxy.fail("PUT", r"/a/new$", status=500, times=1)
    _client(proxy.endpoint, attempts=2).put_object(Bucket=bucket, Key="a/new", Body=b"x")
    assert s3_server.keys(bucket)["a/new"] == 1
    assert [r for r in proxy.requests if r.startswith("PUT")] == [f"PUT /{bucket}/a/new"] * 3


def test_a_dropped_request_gets_no_answer(proxy: SlowProxy, bucket: str) -> None:
    proxy.drop(None, r"/b/two$", times=None)
    with pytest.raises((ConnectionClosedError, EndpointConnectionError)):
        _client(proxy.endpoint).get_object(Bucket=bucket, Key="b/two")


def test_a_paused_request_is_held_until_released(
    proxy: SlowProxy, s3_server: S3Server, bucket: str
) -> None:
    pause = proxy.pause("PUT", r"/a/held$")
    done = threading.Event()

    def put() -> None:
        _client(proxy.endpoint).put_object(Bucket=bucket, Key="a/held", Body=b"late")
        done.set()

    writer = threading.Thread(target=put, daemon=True)
    writer.start()
    pause.wait_reached(30)
    # Held: not in the store and not answered, while other requests pass.
    assert _client(proxy.endpoint).get_object(Bucket=bucket, Key="a/one")["Body"].read() == \
        b"one"
    assert "a/held" not in s3_server.keys(bucket)
    assert not done.is_set()
    pause.release()
    writer.join(30)
    assert done.is_set()
    assert s3_server.client().get_object(Bucket=bucket, Key="a/held")["Body"].read() == b"late"


def _clocks(env: dict[str, str]) -> tuple[float, float]:
    out = subprocess.run([sys.executable, "-c", CLOCKS], capture_output=True, text=True,
                         check=True, env={**os.environ, **env}).stdout
    wall, monotonic = json.loads(out)
    return wall, monotonic


@pytest.mark.parametrize("seconds", [3600, -7200])
def test_a_process_with_its_clock_apart_reads_the_wall_clock_off_and_monotonic_as_is(
    seconds: int
) -> None:
    wall_before, mono_before = time.time(), time.monotonic()
    wall, monotonic = _clocks(clock_apart_env(seconds))
    wall_after, mono_after = time.time(), time.monotonic()
    assert wall_before + seconds <= wall <= wall_after + seconds
    assert mono_before <= monotonic <= mono_after


@pytest.mark.spark
def test_the_jvm_of_a_process_with_its_clock_apart_runs_and_reads_the_same_clock(
    tmp_path: Path
) -> None:
    script = tmp_path / "spark_clock.py"
    script.write_text(
        "import json, time\n"
        "from sparkpoint.spark.session import create_session\n"
        "spark = create_session('local[1]', {'spark.ui.enabled': 'false'}, 'clock')\n"
        "before = time.time()\n"
        "jvm = spark.sql('select unix_millis(current_timestamp()) as t').collect()[0].t\n"
        "after = time.time()\n"
        "rows = spark.range(1000).selectExpr('id % 10 as k').groupBy('k').count().count()\n"
        "print(json.dumps([before, jvm / 1000, after, rows]))\n"
        "spark.stop()\n")
    wall_before = time.time()
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=300, env={**os.environ, **clock_apart_env(86400)})
    assert done.returncode == 0, done.stderr[-3000:]
    before, jvm, after, rows = json.loads(done.stdout.strip().splitlines()[-1])
    assert before >= wall_before + 86400
    assert before - 1 <= jvm <= after + 1  # whole milliseconds, and the query's own start
    assert rows == 10


def test_a_process_in_a_fresh_pid_namespace_is_pid_1_and_sees_no_other_process() -> None:
    probe = ("import json, os; print(json.dumps([os.getpid(), "
             "sorted(int(p) for p in os.listdir('/proc') if p.isdigit())]))")
    done = subprocess.run(in_fresh_pid_namespace([sys.executable, "-c", probe]),
                          capture_output=True, text=True, check=True)
    pid, visible = json.loads(done.stdout)
    assert (pid, visible) == (1, [1])
    assert os.getpid() != 1


def test_a_process_in_a_fresh_pid_namespace_gets_the_pid_asked_for() -> None:
    probe = "import os; print(os.getpid(), os.getppid())"
    done = subprocess.run(in_fresh_pid_namespace([sys.executable, "-c", probe], pid=4242),
                          capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["4242", "1"]


def test_a_sparkpoint_command_in_a_fresh_pid_namespace_runs_and_answers(tmp_path: Path) -> None:
    home = Home(tmp_path / "home")
    result = sparkpoint_in_fresh_pid_namespace(home, "jobs", "list", "--json", pid=7)
    assert result.code == 0, result.err
    assert result.json() == []


def test_a_request_whose_answer_is_lost_was_done_by_the_store(
    proxy: SlowProxy, s3_server: S3Server, bucket: str
) -> None:
    rule = proxy.lose_answer("PUT", r"/a/lost$")
    with pytest.raises((ConnectionClosedError, EndpointConnectionError)):
        _client(proxy.endpoint).put_object(Bucket=bucket, Key="a/lost", Body=b"done")
    assert rule.lost == [200]
    assert s3_server.client().get_object(Bucket=bucket, Key="a/lost")["Body"].read() == b"done"
