"""Executors on another host than the driver: a standalone cluster whose two workers run in a
mount namespace of their own, where the driver's files (pytest's temporary directories, so
the driver's TMPDIR and sparkpoint's local scratch) are an empty tmpfs. The home is on HDFS
(the MiniDFSCluster), as a cluster of several hosts needs: the workers reach it, as they
reach the master and the driver, over the network only.

What must hold there: a job continued from a snapshot runs on the cluster with its state;
a command whose rewrite reads a scratch copy on the driver's disk (a start into another
partition count, a prune) fails with one line that says so and what to do, changes nothing,
and a start then does the work with its copy in a directory the workers see."""

from __future__ import annotations

import shlex
import shutil
import subprocess
import tempfile
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sparkpoint.storage.fileio import join, spark_url
from sparkpoint.storage.home import Home
from sparkpoint.storage.stores import file_io
from tests.integration.test_standalone_cluster import _state_keys
from tests.support.cli import sparkpoint
from tests.support.spark_cluster import standalone_cluster

pytestmark = [pytest.mark.spark, pytest.mark.cluster]
JOB = Path(__file__).resolve().parent.parent / "data" / "jobs" / "key_counts.py"


def _private_mounts_work() -> bool:
    if shutil.which("unshare") is None:
        return False
    probe = subprocess.run(["unshare", "--mount", "--propagation", "private", "true"],
                           capture_output=True)
    return probe.returncode == 0


@pytest.fixture(scope="module")
def other_host_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The master's URL; its workers see none of the files under pytest's base directory."""
    if not _private_mounts_work():
        pytest.skip("needs unshare --mount (root or user namespaces) to hide the driver's disk")
    hidden = tmp_path_factory.getbasetemp()
    # The workers' own files, outside what they cannot see.
    root = Path(tempfile.mkdtemp(prefix="sparkpoint-other-host-"))
    # Each worker in a mount namespace of its own, an empty tmpfs over the hidden directory.
    prefix = ["unshare", "--mount", "--propagation", "private", "bash", "-c",
              f"mount -t tmpfs other-host {shlex.quote(str(hidden))} && exec bash -c \"$0\""]
    try:
        with standalone_cluster(root, 10, prefix) as url:
            yield url
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _write_keys(spark: Any, url: str, keys: list[str]) -> None:
    spark.createDataFrame([(key,) for key in keys], "key string").coalesce(1) \
        .write.mode("append").parquet(url)


def _job_keys(spark: Any, home: Home, job: str) -> Counter[tuple[str, int]]:
    """(key, count) of the job's state at its last batch, by Spark's state reader."""
    checkpoint = spark_url(join(home.job_url(job), "checkpoint"))
    frame = spark.read.format("statestore").load(checkpoint)
    return Counter((row.key.key, row.value["count"]) for row in frame.collect())


def test_work_that_reads_the_drivers_disk_fails_cleanly_when_executors_cannot(
    other_host_cluster: str, spark: Any, hdfs_server: Any, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from sparkpoint import api

    url = other_host_cluster
    monkeypatch.setenv("SPARKPOINT_SCRATCH", str(tmp_path / "machine"))
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    home = Home.resolve(join(hdfs_server.new_dir(), "home"))
    inp = join(hdfs_server.new_dir(), "in")
    keys = [f"k{n:05d}" for n in range(2000)]
    _write_keys(spark, inp, keys)
    api.run(home, JOB, "keys", params={"input": inp},
            conf={"spark.sql.shuffle.partitions": "4"}, until_caught_up=True, spark=spark)
    api.snapshot_create(home, "keys", "k1")
    original = _state_keys(spark, home, "k1", "key_counts")
    assert original == Counter((key,) for key in keys)

    # The same partition count: the state is copied within HDFS and read by the executors.
    more = keys[:500] + [f"n{n:03d}" for n in range(100)]
    _write_keys(spark, inp, more)
    same = sparkpoint(home, "run", str(JOB), "--job", "keys-on-cluster", "--from-snapshot",
                      "k1", "--master", url, "--conf", "spark.sql.shuffle.partitions=4",
                      "--conf", "spark.executor.memory=512m", "--param", f"input={inp}",
                      "--until-caught-up", timeout=600)
    assert same.code == 0, same.err[-3000:]
    assert _job_keys(spark, home, "keys-on-cluster") == Counter(
        Counter(keys + more).items())

    # Into 3 partitions: the move's tasks would read the staging copy, under the driver's
    # TMPDIR (the home is in a store). Refused before anything is fetched or published.
    start_3 = ("run", str(JOB), "--job", "keys-3", "--from-snapshot", "k1", "--master", url,
               "--conf", "spark.sql.shuffle.partitions=3", "--conf",
               "spark.executor.memory=512m", "--param", f"input={inp}", "--until-caught-up")
    refused = sparkpoint(home, *start_3, timeout=600)
    assert refused.code == 4, refused.err[-3000:]
    _one_error_line(refused.err, "DRIVER_DISK_UNREACHABLE", "set TMPDIR to a directory")
    listed = sparkpoint(home, "jobs", "list", "--json").json()
    assert "keys-3" not in {job["name"] for job in listed}
    assert not file_io(home.location).exists(join(home.job_url("keys-3"), "checkpoint"))

    pruning = ("snapshot", "prune", "k1", "k1-pruned", "--operator", "key_counts", "--where",
               "key >= 'k01000'", "--master", url, "--json")
    refused = sparkpoint(home, *pruning, timeout=600)
    assert refused.code == 4, refused.err[-3000:]
    assert refused.json()["error"]["code"] == "DRIVER_DISK_UNREACHABLE"
    assert "set SPARKPOINT_SCRATCH to a directory" in refused.json()["error"]["message"]
    assert "k1-pruned" not in {s["name"] for s in
                               sparkpoint(home, "snapshot", "list", "--json").json()}
    assert api.snapshot_verify(home, "k1") == []

    # Done as the error says: the copy in a directory the executors read at the same path.
    shared = Path(tempfile.mkdtemp(prefix="sparkpoint-shared-"))
    try:
        moved = sparkpoint(home, *start_3, timeout=600, env={"TMPDIR": str(shared)})
        assert moved.code == 0, moved.err[-3000:]
        assert _job_keys(spark, home, "keys-3") == Counter(Counter(keys + more).items())
    finally:
        shutil.rmtree(shared, ignore_errors=True)


def _one_error_line(err: str, code: str, remedy: str) -> None:
    """The command's error: one line, typed, naming what to do; no traceback."""
    lines = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and f"[{code}]" in lines[0] and remedy in lines[0], err[-3000:]
    assert "Traceback" not in err
