"""Spark's side of a home on S3: the s3a settings and the connector, from the same standard
AWS variables sparkpoint's own S3 I/O reads (storage/fileio.py), so one set serves both."""

from __future__ import annotations

import os
from collections.abc import Mapping

from sparkpoint.spark.local_fs import FILE_MANAGER_CONF, FILE_SYSTEM_MANAGER
from sparkpoint.storage.fileio import scheme_of

# hadoop-aws matching the Hadoop client inside pyspark 4.3.0 (hadoop-client-api-3.5.0), and
# the AWS SDK bundle that hadoop-aws 3.5.0 declares.
S3A_PACKAGES = "org.apache.hadoop:hadoop-aws:3.5.0,software.amazon.awssdk:bundle:2.35.4"
PACKAGES_CONF = "spark.jars.packages"
JARS_CONF = "spark.jars"
_PREFIX = "spark.hadoop.fs.s3a."


def _connector_given(conf: Mapping[str, str]) -> bool:
    """The user loads hadoop-aws already (by packages, or by jars they fetched)."""
    return "hadoop-aws" in conf.get(PACKAGES_CONF, "") or "hadoop-aws" in conf.get(JARS_CONF, "")


def s3a_conf(location: str, conf: Mapping[str, str]) -> dict[str, str]:
    """Session settings Spark needs to write a checkpoint at ``location``; {} unless it is on
    S3. Settings in ``conf`` (the user's --conf) are not overridden."""
    if scheme_of(location) != "s3":
        return {}
    settings: dict[str, str] = {}
    endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
    if endpoint:
        settings[_PREFIX + "endpoint"] = endpoint
        # An S3-compatible server on its own address rarely resolves bucket subdomains.
        settings[_PREFIX + "path.style.access"] = "true"
        if endpoint.startswith("http://"):
            settings[_PREFIX + "connection.ssl.enabled"] = "false"
    key_id, secret = os.environ.get("AWS_ACCESS_KEY_ID"), os.environ.get("AWS_SECRET_ACCESS_KEY")
    if key_id and secret:
        settings[_PREFIX + "access.key"] = key_id
        settings[_PREFIX + "secret.key"] = secret
        token = os.environ.get("AWS_SESSION_TOKEN")
        if token:
            settings[_PREFIX + "session.token"] = token
            settings[_PREFIX + "aws.credentials.provider"] = \
                "org.apache.hadoop.fs.s3a.TemporaryAWSCredentialsProvider"
    region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
    if region:
        settings[_PREFIX + "endpoint.region"] = region
    # RocksDB uploads its checkpoint files from local disk; s3a's optimized copy from local
    # fails on them (measured with RocksDB state on s3a), the plain upload works.
    settings[_PREFIX + "optimized.copy.from.local.enabled"] = "false"
    # hadoop-aws 3.5 reads through the analytics accelerator by default, which turns the
    # interrupt of a query's stop into a plain IOException: a run stopped while it read a
    # checkpoint file (jobs stop, a drain) failed instead of stopping. The classic stream's
    # interrupt is an InterruptedIOException, which Spark takes for the stop it is.
    settings[_PREFIX + "input.stream.type"] = "classic"
    # Spark's default checkpoint file manager reads through a FileContext, whose s3a binding
    # closes its own S3A client when the JVM finalizes it: a stream a short-lived manager
    # opened then fails ("Client manager is closed"; seen inside Spark's state reader). The
    # FileSystem-based manager reads through Hadoop's cached client, which stays open
    # (tests/integration/test_s3a_file_context.py).
    settings[FILE_MANAGER_CONF] = FILE_SYSTEM_MANAGER
    if not _connector_given(conf):
        settings[PACKAGES_CONF] = S3A_PACKAGES
    return {key: value for key, value in settings.items() if key not in conf}


# The s3a settings a task's own S3 client takes, as the AWS variables it reads.
_S3A_TO_AWS = (("endpoint", "AWS_ENDPOINT_URL"), ("access.key", "AWS_ACCESS_KEY_ID"),
               ("secret.key", "AWS_SECRET_ACCESS_KEY"), ("session.token", "AWS_SESSION_TOKEN"),
               ("endpoint.region", "AWS_REGION"))


def aws_environment(conf: Mapping[str, str]) -> dict[str, str]:
    """The AWS variables for an S3 client in a Spark task, from the application's s3a
    settings (``conf``: the session's configuration), each missing one from this process's
    environment (where sparkpoint's own client reads it); executors on other hosts have
    neither. An endpoint s3a is given without a scheme gets the one its SSL setting says."""
    found: dict[str, str] = {}
    for s3a, aws in _S3A_TO_AWS:
        value = conf.get(_PREFIX + s3a) or _from_environment(aws)
        if value:
            found[aws] = value
    endpoint = found.get("AWS_ENDPOINT_URL")
    if endpoint and "://" not in endpoint:
        secure = conf.get(_PREFIX + "connection.ssl.enabled", "true").lower() != "false"
        found["AWS_ENDPOINT_URL"] = f"{'https' if secure else 'http'}://{endpoint}"
    if "AWS_ENDPOINT_URL" in found:
        # The S3-specific variable wins over the general one in sparkpoint's client.
        found["AWS_ENDPOINT_URL_S3"] = found["AWS_ENDPOINT_URL"]
    return found


def _from_environment(name: str) -> str | None:
    """An AWS variable as sparkpoint's client reads it (the S3-specific endpoint and the
    default region count too)."""
    fallback = {"AWS_ENDPOINT_URL": "AWS_ENDPOINT_URL_S3", "AWS_REGION": "AWS_DEFAULT_REGION"}
    if name == "AWS_ENDPOINT_URL":
        return os.environ.get(fallback[name]) or os.environ.get(name)
    return os.environ.get(name) or (os.environ.get(fallback[name]) if name in fallback
                                    else None)
