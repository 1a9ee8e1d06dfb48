"""The local working copy of a home on S3 (moto on loopback) and the s3a settings handed to
Spark: uploads send only what changed here and remove only what was removed here; fetches
never undo a local change that is not uploaded yet."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from sparkpoint.spark.s3a import S3A_PACKAGES, s3a_conf
from sparkpoint.storage.home import Home
from sparkpoint.storage.remote_home import pull_job, push_job
from tests.support.s3 import S3Server


def _home(s3_server: S3Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Home:
    monkeypatch.setenv("SPARKPOINT_SCRATCH", str(tmp_path / "copy"))
    return Home.resolve(f"s3://{s3_server.new_bucket()}/home")


def _objects(s3_server: S3Server, home: Home) -> dict[str, bytes]:
    assert home.url is not None
    bucket, _, prefix = home.url[len("s3://"):].partition("/")
    client = s3_server.client()
    return {key[len(prefix) + len("/jobs/j/"):]:
            client.get_object(Bucket=bucket, Key=key)["Body"].read()
            for key in s3_server.keys(bucket, f"{prefix}/jobs/j/")}


def _put(s3_server: S3Server, home: Home, rel: str, data: bytes) -> None:
    assert home.url is not None
    bucket, _, prefix = home.url[len("s3://"):].partition("/")
    s3_server.client().put_object(Bucket=bucket, Key=f"{prefix}/jobs/j/{rel}", Body=data)


def test_upload_sends_changes_and_removals_and_keeps_what_others_wrote(
    s3_server: S3Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = _home(s3_server, tmp_path, monkeypatch)
    local = home.job_dir("j")
    (local / "checkpoint" / "offsets").mkdir(parents=True)
    (local / "checkpoint" / "offsets" / "0").write_bytes(b"zero")
    (local / "checkpoint" / "metadata").write_bytes(b"{}")
    (local / "job.json").write_bytes(b"{}")
    (local / "run.lock").write_bytes(b"123")  # the lock is taken in the home, never copied
    push_job(home, "j")
    assert _objects(s3_server, home) == {"checkpoint/offsets/0": b"zero",
                                         "checkpoint/metadata": b"{}", "job.json": b"{}"}

    _put(s3_server, home, "checkpoint/offsets/1", b"one")  # Spark's next batch, in the home
    (local / "checkpoint" / "offsets" / "0").unlink()  # removed here
    push_job(home, "j")
    assert set(_objects(s3_server, home)) == {"checkpoint/offsets/1", "checkpoint/metadata",
                                              "job.json"}


def test_fetch_brings_the_homes_files_and_keeps_local_changes_not_uploaded(
    s3_server: S3Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = _home(s3_server, tmp_path, monkeypatch)
    local = home.job_dir("j")
    for rel, data in {"checkpoint/offsets/0": b"zero", "checkpoint/offsets/1": b"one",
                      "checkpoint/state/0/0/1.zip": b"zip", "job.json": b"{}"}.items():
        _put(s3_server, home, rel, data)
    pull_job(home, "j", with_state=False)
    assert not (local / "checkpoint" / "state").exists()
    assert (local / "checkpoint" / "offsets" / "1").read_bytes() == b"one"

    (local / "checkpoint" / "offsets" / "1").write_bytes(b"ONE, rewritten here")
    (local / "checkpoint" / "offsets" / "0").unlink()
    _put(s3_server, home, "job.json", b'{"changed": "elsewhere"}')
    pull_job(home, "j")
    assert (local / "checkpoint" / "offsets" / "1").read_bytes() == b"ONE, rewritten here"
    assert not (local / "checkpoint" / "offsets" / "0").exists()
    assert (local / "job.json").read_bytes() == b'{"changed": "elsewhere"}'
    assert (local / "checkpoint" / "state" / "0" / "0" / "1.zip").read_bytes() == b"zip"
    push_job(home, "j")
    objects = _objects(s3_server, home)
    assert objects["checkpoint/offsets/1"] == b"ONE, rewritten here"
    assert "checkpoint/offsets/0" not in objects


def test_a_deleted_working_copy_is_fetched_again_and_nothing_is_removed_in_the_home(
    s3_server: S3Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On main before this change the next upload deleted job.json, offsets and commits in
    the home, since the sync record said they had been removed here."""
    home = _home(s3_server, tmp_path, monkeypatch)
    local = home.job_dir("j")
    (local / "checkpoint" / "offsets").mkdir(parents=True)
    (local / "checkpoint" / "offsets" / "0").write_bytes(b"zero")
    (local / "job.json").write_bytes(b"{}")
    push_job(home, "j")
    before = _objects(s3_server, home)
    shutil.rmtree(local)  # the README: the working copy may be deleted at any time
    pull_job(home, "j", with_state=False)
    push_job(home, "j")
    assert _objects(s3_server, home) == before
    assert (local / "job.json").read_bytes() == b"{}"


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
        "spark.jars.packages": S3A_PACKAGES,
    }
    given = s3a_conf("s3://b/home", {"spark.jars": "/jars/hadoop-aws-3.5.0.jar,/jars/b.jar"})
    assert "spark.jars.packages" not in given
    assert s3a_conf("hdfs://nn:8020/home", {}) == {}
    assert s3a_conf("/local/home", {}) == {}
