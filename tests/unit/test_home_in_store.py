"""A home on S3 (moto on loopback) has no local copy of its jobs: records, logs and progress
are read and written at their URL, the only local files are this machine's cache of
immutable state files, and deleting it changes no result. Commit times are the store's own.

On main before this change a job's files went through a local working copy: a deleted copy
made the next upload delete the job's files in the home, a stale one was uploaded over newer
files, and commit times were the download's."""

from __future__ import annotations

import datetime as dt
import shutil
from pathlib import Path

import pytest

from sparkpoint.checkpoint.retained import commit_times
from sparkpoint.checkpoint.state_files import readable_partition
from sparkpoint.runtime.registry import JobRecord, JobRegistry
from sparkpoint.spark.s3a import S3A_PACKAGES, s3a_conf
from sparkpoint.storage.file_cache import cache_root
from sparkpoint.storage.home import Home
from sparkpoint.storage.local import walk_files
from sparkpoint.storage.location import StorePath
from tests.support.s3 import S3Server


def _home(s3_server: S3Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
          machine: str = "a") -> Home:
    monkeypatch.setenv("SPARKPOINT_SCRATCH", str(tmp_path / machine))
    return Home.resolve(f"s3://{s3_server.new_bucket()}/home")


def _put(s3_server: S3Server, home: Home, rel: str, data: bytes) -> None:
    assert home.url is not None
    bucket, _, prefix = home.url[len("s3://"):].partition("/")
    s3_server.client().put_object(Bucket=bucket, Key=f"{prefix}/jobs/j/{rel}", Body=data)


def test_a_jobs_files_are_written_in_the_store_and_nowhere_else(
    s3_server: S3Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = _home(s3_server, tmp_path, monkeypatch)
    registry = JobRegistry(home)
    registry.save(JobRecord(name="j", job_file="job.py", status="stopped"))
    registry.request_stop("j")
    assert isinstance(home.job_dir("j"), StorePath)
    assert home.url is not None
    bucket, _, prefix = home.url[len("s3://"):].partition("/")
    assert set(s3_server.keys(bucket, f"{prefix}/jobs/j/")) == {
        f"{prefix}/jobs/j/job.json", f"{prefix}/jobs/j/control/stop"}
    assert not (tmp_path / "a").exists() or not list(walk_files(tmp_path / "a"))

    # Another machine, and this one with its local space deleted, see the same job.
    shutil.rmtree(tmp_path / "a", ignore_errors=True)
    for machine in ("a", "b"):
        monkeypatch.setenv("SPARKPOINT_SCRATCH", str(tmp_path / machine))
        seen = JobRegistry(Home.resolve(home.location))
        assert seen.names() == ["j"] and seen.stop_requested("j")
        assert seen.get("j").job_file == "job.py"


def test_commit_times_are_the_stores_own_modification_times(
    s3_server: S3Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = _home(s3_server, tmp_path, monkeypatch)
    for batch in range(3):
        _put(s3_server, home, f"checkpoint/commits/{batch}", b'v1\n{"nextBatchWatermarkMs":0}')
    assert home.url is not None
    bucket, _, prefix = home.url[len("s3://"):].partition("/")
    client = s3_server.client()
    stored = {
        batch: client.head_object(Bucket=bucket, Key=f"{prefix}/jobs/j/checkpoint/commits/"
                                  f"{batch}")["LastModified"].astimezone(dt.UTC)
        for batch in range(3)}
    got = commit_times(JobRegistry(home).checkpoint("j"))
    assert set(got) == {0, 1, 2}
    for batch, when in got.items():
        assert abs((when - stored[batch]).total_seconds()) < 0.001


def test_state_files_are_cached_by_size_and_store_time_and_the_cache_may_go(
    s3_server: S3Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = _home(s3_server, tmp_path, monkeypatch)
    for rel, data in {"1.delta": b"one", "2.delta": b"two", "3.snapshot": b"three",
                      "4.delta": b"four", "5.delta": b"five"}.items():
        _put(s3_server, home, f"checkpoint/state/0/0/{rel}", data)
    pdir = home.checkpoint_dir("j") / "state" / "0" / "0"
    local = readable_partition(pdir, 4)
    assert {p.name: p.read_bytes() for p in local.iterdir()} == {
        "3.snapshot": b"three", "4.delta": b"four"}

    # Spark wrote the snapshot again (a batch that ran twice): fetched again, not trusted.
    _put(s3_server, home, "checkpoint/state/0/0/3.snapshot", b"three, written again")
    assert (readable_partition(pdir, 4) / "3.snapshot").read_bytes() == b"three, written again"

    shutil.rmtree(cache_root())
    again = readable_partition(pdir, 5)
    assert {p.name: p.read_bytes() for p in again.iterdir()} == {
        "3.snapshot": b"three, written again", "4.delta": b"four", "5.delta": b"five"}


def test_s3a_settings_come_from_the_aws_environment_and_the_users_win(
    monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9000")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "key")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "secret")
    monkeypatch.setenv("AWS_REGION", "eu-west-1")
    monkeypatch.delenv("AWS_ENDPOINT_URL_S3", raising=False)
    monkeypatch.delenv("AWS_SESSION_TOKEN", raising=False)
    conf = s3a_conf("s3://b/home", {"spark.hadoop.fs.s3a.path.style.access": "false"})
    assert conf == {
        "spark.hadoop.fs.s3a.endpoint": "http://127.0.0.1:9000",
        "spark.hadoop.fs.s3a.connection.ssl.enabled": "false",
        "spark.hadoop.fs.s3a.access.key": "key",
        "spark.hadoop.fs.s3a.secret.key": "secret",
        "spark.hadoop.fs.s3a.endpoint.region": "eu-west-1",
        "spark.hadoop.fs.s3a.optimized.copy.from.local.enabled": "false",
        "spark.hadoop.fs.s3a.input.stream.type": "classic",
        "spark.jars.packages": S3A_PACKAGES,
    }
    given = s3a_conf("s3://b/home", {"spark.jars": "/jars/hadoop-aws-3.5.0.jar,/jars/b.jar"})
    assert "spark.jars.packages" not in given
    assert s3a_conf("hdfs://nn:8020/home", {}) == {}
    assert s3a_conf("/local/home", {}) == {}


def test_s3a_directory_markers_are_not_files_of_a_listing(
    s3_server: S3Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Spark's S3A connector (Hadoop 3.4+, kept markers) writes an empty object named
    ``<dir>/`` for a directory it creates, e.g. ``state/0/0/_metadata/``; fsspec lists it as
    a file. A listing of a partition that counted it made every export fetch a key that is
    not a file (NoSuchKey)."""
    home = _home(s3_server, tmp_path, monkeypatch)
    _put(s3_server, home, "checkpoint/state/0/0/_metadata/", b"")
    _put(s3_server, home, "checkpoint/state/0/0/_metadata/schema", b"schema")
    _put(s3_server, home, "checkpoint/state/0/0/1.delta", b"one")
    pdir = home.checkpoint_dir("j") / "state" / "0" / "0"
    assert isinstance(pdir, StorePath)
    assert set(pdir.io.walk_stats(pdir.url)) == {"_metadata/schema", "1.delta"}
    local = readable_partition(pdir, 1)
    assert (local / "_metadata" / "schema").read_bytes() == b"schema"
