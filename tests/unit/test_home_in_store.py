"""A home on S3 (moto on loopback) has no local copy of its jobs: records, logs and progress
are read and written at their URL, the only local files are this machine's cache of
immutable state files, and deleting it changes no result. Batches are told apart by Spark's
own batch times, not the store's modification times.

On main before this change a job's files went through a local working copy: a deleted copy
made the next upload delete the job's files in the home, a stale one was uploaded over newer
files, and commit times were the download's."""

from __future__ import annotations

import datetime as dt
import shutil
from pathlib import Path

import pytest

from sparkpoint import api
from sparkpoint.checkpoint.logs import OffsetLogEntry, compact_json
from sparkpoint.checkpoint.retained import iso_utc
from sparkpoint.checkpoint.state_files import readable_partition
from sparkpoint.runtime.registry import JobRecord, JobRegistry
from sparkpoint.spark.local_fs import FILE_MANAGER_CONF, FILE_SYSTEM_MANAGER
from sparkpoint.spark.s3a import S3A_PACKAGES, s3a_conf
from sparkpoint.storage.file_cache import cache_root
from sparkpoint.storage.home import Home
from sparkpoint.storage.local import walk_files
from sparkpoint.storage.location import StorePath, write_atomic
from tests.support.golden_job import install_clicks_job
from tests.support.s3 import S3Server

GOLDEN_HDFS = Path(__file__).resolve().parents[1] / "data" / "golden-hdfs"


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


def test_at_goes_by_sparks_batch_times_where_the_store_keeps_seconds(
    s3_server: S3Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """S3 keeps a file's modification time to the second, so batches committed within one
    second share it. '--at' goes by the time Spark recorded for each batch (its offsets
    entry's batchTimestampMs, to the millisecond): a time between two batches of one second
    takes the earlier, and each time 'jobs show' lists takes its batch. On main batches were
    ordered by their commit files' times: '--at' took the newest batch of that second, later
    than asked, and 'jobs show' listed one time for all of them."""
    home = _home(s3_server, tmp_path, monkeypatch)
    install_clicks_job(home, GOLDEN_HDFS, "j", tmp_path / "job.py")  # batches 0..3
    assert home.url is not None
    bucket, _, prefix = home.url[len("s3://"):].partition("/")
    client = s3_server.client()
    stamped = {batch: client.head_object(Bucket=bucket, Key=f"{prefix}/jobs/j/checkpoint/"
                                         f"commits/{batch}")["LastModified"].astimezone(dt.UTC)
               for batch in range(4)}
    assert all(when.microsecond == 0 for when in stamped.values())  # seconds only
    # Spark planned each batch within the second S3 stamped its commit with, 200 ms apart
    # (the four puts take well under a second: mostly they share one). The files are put
    # at once, so a later batch's commit may carry the earlier second: each batch is then
    # planned in the latest second stamped so far, and batch times still go up.
    checkpoint = JobRegistry(home).checkpoint("j")
    planned = {batch: max(stamped[b] for b in range(batch + 1))
               + dt.timedelta(milliseconds=200 * (batch + 1)) for batch in range(4)}
    for batch, when in planned.items():
        entry = checkpoint.offsets(batch)
        metadata = {**entry.metadata, "batchTimestampMs": int(when.timestamp() * 1000)}
        write_atomic(checkpoint.root / "offsets" / str(batch), OffsetLogEntry(
            entry.version, compact_json(metadata), entry.sources).to_bytes())

    # Between batch 1 and batch 2, when S3 already shows batch 2 committed (and batch 3,
    # unless its put fell into the next second).
    at = planned[2] - dt.timedelta(milliseconds=100)
    assert planned[1] < at and stamped[2] <= at
    assert api.snapshot_create(home, "j", "between", at=at).batch_id == 1
    listed = api.job_view(home, "j").to_dict()["snapshottable_batches"]
    assert listed == [{"batch": batch, "batch_time": iso_utc(when)}
                      for batch, when in planned.items()]
    for entry in listed:
        taken = api.snapshot_create(home, "j", f"at-{entry['batch']}", at=entry["batch_time"])
        assert taken.batch_id == entry["batch"]


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
        FILE_MANAGER_CONF: FILE_SYSTEM_MANAGER,
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
