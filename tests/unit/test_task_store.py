"""The store settings a Spark task's client is made with: the driver's, whatever the
executor's environment holds."""

from __future__ import annotations

import os

import pytest

from sparkpoint.spark.s3a import aws_environment
from sparkpoint.storage.task_store import task_store
from sparkpoint.storage.webhdfs import WebHdfsFileIO

_AWS = ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN", "AWS_REGION", "AWS_DEFAULT_REGION")


@pytest.fixture
def no_aws(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in _AWS:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def test_s3a_settings_win_and_an_endpoint_without_scheme_gets_the_one_ssl_says(
    no_aws: pytest.MonkeyPatch,
) -> None:
    no_aws.setenv("AWS_ACCESS_KEY_ID", "from-env")
    no_aws.setenv("AWS_DEFAULT_REGION", "eu-west-1")
    prefix = "spark.hadoop.fs.s3a."
    found = aws_environment({prefix + "endpoint": "minio:9000",
                             prefix + "connection.ssl.enabled": "false",
                             prefix + "access.key": "from-conf", prefix + "secret.key": "s"})
    assert found == {"AWS_ENDPOINT_URL": "http://minio:9000",
                     "AWS_ENDPOINT_URL_S3": "http://minio:9000",
                     "AWS_ACCESS_KEY_ID": "from-conf", "AWS_SECRET_ACCESS_KEY": "s",
                     "AWS_REGION": "eu-west-1"}
    assert aws_environment({})["AWS_ACCESS_KEY_ID"] == "from-env"


def test_a_task_store_sets_its_environment_while_open_only(no_aws: pytest.MonkeyPatch) -> None:
    store = task_store("s3://bucket/home", {"AWS_REGION": "us-east-2"})
    with store.opened():
        assert os.environ["AWS_REGION"] == "us-east-2"
    assert "AWS_REGION" not in os.environ


def test_an_hdfs_task_store_carries_the_webhdfs_address_the_driver_found(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("SPARKPOINT_WEBHDFS_URL", "http://namenode.example:9871")
    monkeypatch.setenv("HADOOP_USER_NAME", "etl")
    store = task_store("hdfs://nn/data/home", {})
    # An executor without those variables.
    monkeypatch.delenv("SPARKPOINT_WEBHDFS_URL")
    monkeypatch.delenv("HADOOP_USER_NAME")
    with store.opened() as io:
        assert isinstance(io, WebHdfsFileIO)
        assert (io.address.url, io.address.user) == ("http://namenode.example:9871", "etl")
    assert "SPARKPOINT_WEBHDFS_URL" not in os.environ
