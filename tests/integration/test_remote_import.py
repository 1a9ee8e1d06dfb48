"""`snapshot import` of a checkpoint that plain Spark wrote straight to S3 (moto's server,
through s3a, as a production job writes it) or HDFS (the MiniDFSCluster): Spark's example
structured_network_wordcount_windowed.py (tests/data/plain/windowed_wordcount.py, a file
source instead of the socket) run by spark-submit with Spark's defaults but for 4 shuffle
partitions (200 make every batch cost a minute on two busy cores, the more so with each
state file a request to the store: test_adopt_plain_spark.py), its checkpointLocation an
``s3a://`` URL. The URL is imported into a home in the same bucket and the query continued
with `run --from-snapshot`; the rows written before and after the switch, read through the
file sink's log, equal the rows computed in plain Python from the input.

The import reads the checkpoint's logs where they are and leaves its state files where they
are: the store copies them into the snapshot (CopyObject) and Spark's state reader counts
their rows in its tasks. Observed here by every request sparkpoint's own S3 client made to
read a file: none was for a state file.

Bad URLs (an unknown scheme, a bucket that does not exist, a prefix without a checkpoint)
get one typed line and exit 2, with nothing created.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from sparkpoint import api
from sparkpoint.checkpoint.layout import Checkpoint
from sparkpoint.errors import ValidationError
from sparkpoint.snapshot.object_store import blob_name, is_state_data
from sparkpoint.spark.session import SOURCE_EVOLUTION_CONF
from sparkpoint.storage.home import Home
from sparkpoint.storage.location import StorePath
from sparkpoint.storage.stores import file_io
from sparkpoint.testing import output_rows
from tests.conftest import s3a_jars
from tests.integration.test_adopt_plain_spark import (
    HDFS_4,
    JOB,
    PLAIN,
    expected_counts,
    spark_submit,
    write_lines,
)
from tests.support.cli import sparkpoint
from tests.support.s3 import S3Server
from tests.support.s3a_reads import read_bucket_with

pytestmark = pytest.mark.spark

WINDOW, SLIDE = dt.timedelta(minutes=10), dt.timedelta(minutes=5)
STATE_SUFFIXES = (".delta", ".snapshot", ".zip", ".sst", ".changelog")


def plain_s3a_conf(server: S3Server) -> dict[str, str]:
    """What a team sets to give plain Spark an S3-compatible store: the connector and
    s3a's own settings."""
    prefix = "spark.hadoop.fs.s3a."
    return {"spark.jars": s3a_jars(), prefix + "endpoint": server.endpoint,
            prefix + "path.style.access": "true", prefix + "connection.ssl.enabled": "false",
            prefix + "access.key": "testing", prefix + "secret.key": "testing",
            prefix + "endpoint.region": "us-east-1"}


def _state_files(urls: Sequence[str], checkpoint: str) -> list[str]:
    """The URLs of state data files of ``checkpoint`` among ``urls``."""
    base = checkpoint.rstrip("/") + "/"
    return [url for url in urls if url.startswith(base) and url.endswith(STATE_SUFFIXES)
            and is_state_data("checkpoint/" + url[len(base):])]


def test_plain_checkpoint_on_s3a_imported_where_it_is_and_continued(
    spark: Any, s3_server: S3Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bucket = s3_server.new_bucket()
    monkeypatch.setenv("SPARKPOINT_SCRATCH", str(tmp_path / "machine"))
    inp, plain_out = tmp_path / "in", tmp_path / "plain-out"
    lines = write_lines(inp, 0) + write_lines(inp, 1)
    url = f"s3a://{bucket}/prod/wordcount/checkpoint"
    spark_submit(PLAIN, str(inp), str(plain_out), url,
                 conf={**HDFS_4, **plain_s3a_conf(s3_server)})
    plain = Checkpoint(StorePath.of(url))
    last = plain.require_latest_committed_batch()
    # Spark's default offsets (v1, positional) and conf, written by s3a into the bucket.
    assert plain.offsets(last).version == 1
    assert plain.offsets(last).conf[SOURCE_EVOLUTION_CONF] == "false"
    keys_before = s3_server.keys(bucket, "prod/")
    assert any("/state/0/3/" in key and key.endswith(".delta") for key in keys_before)
    before = expected_counts(lines, WINDOW, SLIDE)
    assert output_rows(spark, plain_out) == before

    # Every file sparkpoint's own S3 client reads, by one request or by a transfer.
    io = file_io(f"s3://{bucket}")
    read: list[str] = []
    read_bytes, get_files = io.read_bytes, io.get_files

    def reading(location: str) -> bytes:
        read.append(location)
        return read_bytes(location)

    def fetching(pairs: Sequence[tuple[str, Path]], *args: Any, **kwargs: Any) -> None:
        read.extend(location for location, _ in pairs)
        get_files(pairs, *args, **kwargs)

    monkeypatch.setattr(io, "read_bytes", reading)
    monkeypatch.setattr(io, "get_files", fetching)

    home = Home.resolve(f"s3://{bucket}/home")
    managed_out = tmp_path / "managed-out"
    params = {"input": str(inp), "output": str(managed_out), "files_per_batch": "2"}
    # The job file's window is checked against the windows the state holds (read by
    # Spark's state reader): a tumbling window is refused, nothing created.
    held = "the state holds windows of 10 minutes sliding every 5 minutes"
    with pytest.raises(ValidationError, match=held):
        api.snapshot_import(home, url, "adopted", JOB, params={**params, "slide": "10 minutes"},
                            spark=spark)
    assert api.snapshot_list(home) == []
    said: list[str] = []
    manifest = api.snapshot_import(home, url, "adopted", JOB, params=params, spark=spark,
                                   echo=said.append)
    assert not [line for line in said if line.startswith("warning")], said
    assert any(f"/prod/wordcount/checkpoint/offsets/{last}" in u for u in read), read
    assert _state_files(read, url) == [], "the import read state files through sparkpoint"
    # The checkpoint is only read.
    assert s3_server.keys(bucket, "prod/") == keys_before
    state_entries = [e for e in manifest.files if is_state_data(e.path)]
    assert state_entries and all(e.etag and e.xxh3_128 is None and e.sha256
                                 for e in state_entries), "state not copied by the store"
    assert manifest.job == f"import:{url}"
    [operator] = manifest.operators
    assert (operator.name, operator.partitions) == ("word_counts", 4)
    assert operator.window is not None and operator.window.describe() == \
        "windows of 10 minutes sliding every 5 minutes"
    # Counted by Spark's state reader: the keys still open in the state.
    reader = spark.newSession()
    read_bucket_with(reader, url, plain_s3a_conf(s3_server))
    assert operator.rows == reader.read.format("statestore").option("batchId", last) \
        .load(url).count() > 0
    assert api.snapshot_verify(home, "adopted") == []

    lines += write_lines(inp, 2) + write_lines(inp, 3)
    read.clear()
    api.run(home, JOB, "adopted", params=params, from_snapshot="adopted",
            until_caught_up=True, spark=spark)
    # The start copies the snapshot's state inside the store too.
    blobs = {f"{home.snapshots_location}/.files/{blob_name(e)}" for e in state_entries}
    assert blobs.isdisjoint(read), "the start read state files through sparkpoint"
    assert api.job_view(home, "adopted").files_behind == {"lines": 0}
    after = expected_counts(lines, WINDOW, SLIDE)
    assert after != before
    assert output_rows(spark, plain_out) + output_rows(spark, managed_out) == after


@pytest.mark.parametrize(("where", "expected"), [
    ("gs://bucket/ckpt", "found scheme 'gs'"),
    ("s3a://no-such-bucket-here/ckpt", "expected a Spark streaming checkpoint"),
    ("s3a://{bucket}/nothing/here", "expected a Spark streaming checkpoint"),
    ("s3a://{bucket}/a#b", "'#' in its path"),
], ids=["unknown-scheme", "no-bucket", "no-checkpoint", "hash-in-path"])
def test_a_url_without_a_checkpoint_gets_one_typed_line_and_nothing_is_created(
    s3_server: S3Server, tmp_path: Path, where: str, expected: str
) -> None:
    bucket = s3_server.new_bucket()
    home = Home(tmp_path / "home")
    result = sparkpoint(home, "snapshot", "import", where.format(bucket=bucket), "adopted",
                        "--job-file", str(JOB), "--param", f"input={tmp_path}",
                        "--param", f"output={tmp_path / 'out'}")
    assert result.code == 2, result.err
    assert expected in result.err
    assert "Traceback" not in result.err and len(result.err.strip().splitlines()) == 1
    assert api.snapshot_list(home) == []
    assert s3_server.keys(bucket) == {}


def test_plain_checkpoint_on_hdfs_imported_and_continued(
    spark: Any, hdfs_server: Any, tmp_path: Path
) -> None:
    """The same query with its checkpoint on HDFS (the MiniDFSCluster; Spark's bundled
    Hadoop client writes hdfs:// with no extra settings), imported into a local home. HDFS
    over WebHDFS has no copy request, so the state files are fetched through this process
    into the snapshot, and the import says so."""
    inp, plain_out = tmp_path / "in", tmp_path / "plain-out"
    lines = write_lines(inp, 0) + write_lines(inp, 1)
    url = f"{hdfs_server.new_dir()}/wordcount/checkpoint"
    spark_submit(PLAIN, str(inp), str(plain_out), url, conf=HDFS_4)
    plain = Checkpoint(StorePath.of(url))
    last = plain.require_latest_committed_batch()
    assert plain.offsets(last).version == 1
    before = expected_counts(lines, WINDOW, SLIDE)
    assert output_rows(spark, plain_out) == before

    home = Home(tmp_path / "home")
    managed_out = tmp_path / "managed-out"
    params = {"input": str(inp), "output": str(managed_out), "files_per_batch": "2"}
    said: list[str] = []
    manifest = api.snapshot_import(home, url, "adopted", JOB, params=params, spark=spark,
                                   echo=said.append)
    assert any("its state files are fetched through this process" in line for line in said)
    assert manifest.job == f"import:{url}"
    [operator] = manifest.operators
    assert (operator.name, operator.partitions) == ("word_counts", 4)
    assert operator.rows
    assert api.snapshot_verify(home, "adopted") == []

    lines += write_lines(inp, 2) + write_lines(inp, 3)
    api.run(home, JOB, "adopted", params=params, from_snapshot="adopted",
            until_caught_up=True, spark=spark)
    assert api.job_view(home, "adopted").files_behind == {"lines": 0}
    after = expected_counts(lines, WINDOW, SLIDE)
    assert output_rows(spark, plain_out) + output_rows(spark, managed_out) == after
