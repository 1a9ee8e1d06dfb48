"""A conditional create whose answer is lost in the network (the store did it; the caller
got no answer and its client tried again): the retry finds the object there, and the
create counts as done when the object holds exactly what was asked (moto's S3 server behind
the fault proxy).

On main before this change such a create reported the object as made by someone else: a
snapshot create said NAME_TAKEN while its snapshot was listed and verified, and a lease
taken that way was refused as held by another process (itself).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sparkpoint import api
from sparkpoint.runtime.lock import held_lease, job_lock
from sparkpoint.storage.home import Home
from sparkpoint.storage.stores import file_io
from tests.support.cli import sparkpoint
from tests.support.golden_job import GOLDEN, JOB, install_clicks_job
from tests.support.slow_proxy import SlowProxy, fault_proxy


@pytest.fixture
def proxied(s3_server: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[SlowProxy, str]]:
    for name, value in s3_server.env.items():
        os.environ.setdefault(name, value)
    bucket = s3_server.new_bucket()
    with fault_proxy(s3_server.endpoint) as proxy:
        monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.endpoint)
        yield proxy, bucket


def test_a_create_whose_answer_was_lost_counts_as_created(
    proxied: tuple[SlowProxy, str]
) -> None:
    proxy, bucket = proxied
    io = file_io(f"s3://{bucket}")
    rule = proxy.lose_answer("PUT", r"/x/mine$")
    assert io.create_exclusive(f"s3://{bucket}/x/mine", b"token-1")
    assert rule.lost == [200]
    # Another writer's bytes are still another writer's.
    assert not io.create_exclusive(f"s3://{bucket}/x/mine", b"token-2")


def test_a_lease_taken_by_a_create_whose_answer_was_lost_is_held(
    proxied: tuple[SlowProxy, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    proxy, bucket = proxied
    monkeypatch.setenv("SPARKPOINT_SCRATCH", str(tmp_path / "machine"))
    home = Home.resolve(f"s3://{bucket}/home")
    rule = proxy.lose_answer("PUT", r"/jobs/j/lease/000000000001\.json$")
    with job_lock(home, "j"):
        lease = held_lease(home, "j")
        assert lease is not None and lease.record.generation == 1
        lease.check()
    assert rule.lost == [200]


def test_a_snapshot_whose_manifest_answer_was_lost_is_created(
    proxied: tuple[SlowProxy, str], tmp_path: Path
) -> None:
    proxy, bucket = proxied
    home = Home(tmp_path / "home", f"s3://{bucket}/snaps")
    install_clicks_job(home, GOLDEN, JOB, tmp_path / "job.py")
    rule = proxy.lose_answer("PUT", r"/snaps/s1/manifest\.json$")
    manifest = api.snapshot_create(home, JOB, "s1")
    assert rule.lost == [200]
    assert [m.name for m in api.snapshot_list(home)] == ["s1"]
    assert api.snapshot_show(home, "s1") == manifest
    assert api.snapshot_verify(home, "s1") == []


def test_a_store_that_keeps_refusing_is_one_typed_line(
    proxied: tuple[SlowProxy, str], tmp_path: Path
) -> None:
    """S3 answering 503 SlowDown to every upload: after the client's retries the command
    stops with one STORE_UNREACHABLE line (exit 4), not exit 1 with an untyped OSError, and
    nothing is listed. On main: 'error: unexpected OSError: [Errno 16] ...', exit 1."""
    proxy, bucket = proxied
    home = Home(tmp_path / "home", f"s3://{bucket}/snaps")
    install_clicks_job(home, GOLDEN, JOB, tmp_path / "job.py")
    refusing = proxy.fail("PUT", r"/snaps/\.files/", status=503, times=None)
    # Two attempts per request, not botocore's default five: the same refusals with their
    # backoff, about 25 seconds less of waiting.
    result = sparkpoint(home, "--snapshots", f"s3://{bucket}/snaps", "snapshot", "create",
                        JOB, "s1", env={"AWS_ENDPOINT_URL": proxy.endpoint,
                                        "AWS_MAX_ATTEMPTS": "2"})
    assert result.code == 4, result.err
    lines = [line for line in result.err.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and lines[0].startswith("error: [STORE_UNREACHABLE] the store did "
                                                   "not answer"), result.err
    assert "Traceback" not in result.err
    proxy.remove(refusing)
    assert api.snapshot_list(home) == []
