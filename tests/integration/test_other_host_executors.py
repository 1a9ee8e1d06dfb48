"""Executors on another host than the driver: a standalone cluster whose two workers run in a
mount namespace of their own, where the driver's files (pytest's temporary directories, so
the driver's TMPDIR and sparkpoint's local scratch) are an empty tmpfs, and whose environment
has none of the store settings the driver's has. The home is on HDFS (the MiniDFSCluster) or
S3 (moto's server), as a cluster of several hosts needs: the workers reach it, as they reach
the master and the driver, over the network only.

What must hold there: a job continued from a snapshot runs on the cluster with its state; a
start into another partition count moves the state (HDFS-provider or RocksDB) in Spark
tasks that read and write the store, none of its bytes through the driver, and gives the
state Spark's own reader finds in the snapshot; a start that migrates the state (an
aggregate added), a rehearsal of it and a prune read the old state and write the new in
the store, in Spark tasks; a command whose rewrite still reads a scratch copy on the
driver's disk (a start that moves the state's provider) fails with one line that says so
and what to do, and changes nothing."""

from __future__ import annotations

import re
import shutil
import tempfile
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sparkpoint.checkpoint.layout import PROVIDER_CONF
from sparkpoint.checkpoint.rocksdb_state import HDFS_PROVIDER, ROCKSDB_PROVIDER
from sparkpoint.snapshot.store import open_snapshot_store
from sparkpoint.storage.fileio import join, spark_url
from sparkpoint.storage.home import Home
from sparkpoint.storage.stores import file_io
from tests.conftest import S3A_JARS, s3a_jars
from tests.integration.test_standalone_cluster import _state_keys
from tests.support import spark_cluster
from tests.support.cli import Result, sparkpoint
from tests.support.s3a_reads import read_bucket_with

pytestmark = [pytest.mark.spark, pytest.mark.cluster]
JOB = Path(__file__).resolve().parent.parent / "data" / "jobs" / "key_counts.py"
# The next version of JOB: an aggregate added.
GROWN = JOB.with_name("key_counts_longest.py")


# The job's state in the HDFS-backed provider (Spark's default; sparkpoint's is RocksDB).
_HDFS_STATE = {"spark.sql.shuffle.partitions": "4", PROVIDER_CONF: HDFS_PROVIDER}


@pytest.fixture(scope="module")
def other_host_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The master's URL; its workers see none of the files under pytest's base directory."""
    if not spark_cluster.private_mounts_work():
        pytest.skip("needs unshare --mount (root or user namespaces) to hide the driver's disk")
    # The workers' own files, outside what they cannot see (pytest's base directory).
    root = Path(tempfile.mkdtemp(prefix="sparkpoint-other-host-"))
    try:
        with spark_cluster.other_host_cluster(root, tmp_path_factory.getbasetemp()) as url:
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


def test_work_on_an_hdfs_home_runs_in_the_store_and_what_reads_the_drivers_disk_is_refused(
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
            conf=_HDFS_STATE, until_caught_up=True, spark=spark)
    api.snapshot_create(home, "keys", "k1")
    original = _state_keys(spark, home, "k1", "key_counts")
    assert original == Counter((key,) for key in keys)

    more = keys[:500] + [f"n{n:03d}" for n in range(100)]
    _write_keys(spark, inp, more)
    # Into 3 partitions: the tasks read the snapshot's files in HDFS and write the new ones
    # there; the driver's copy holds no state file.
    _start_into_3(spark, home, url, inp, tmp_path, Counter(keys + more))
    # An aggregate added: the state migrated in the store (HDFS: copied by Spark tasks).
    _grown_from_k1(spark, home, url, inp, tmp_path, keys, more)
    # ... and rehearsed against the job on the cluster, after the job read ``more``.
    _rehearsed_on_cluster(spark, home, url, inp, tmp_path, keys, more, _HDFS_STATE)

    # A prune runs in the store too: the snapshot placed there, Spark's reader on the
    # executors, the kept keys of each partition with a match written by JVM tasks.
    _prune_on_cluster(spark, home, url, "key >= 'k01000'", lambda key: key >= "k01000", 4,
                      tmp_path)

    # The state moved to RocksDB and into 3 partitions in the store: the repartition's
    # tasks write each new partition as a RocksDB version.
    _provider_moved(spark, home, url, inp, tmp_path, Counter(keys + more))

    # The state moved to RocksDB, into 3 partitions and migrated at once (an aggregate
    # added): the migration's tasks read k1's state in the store and write RocksDB
    # versions of the 3 partitions there.
    _grown_on_rocksdb_from_k1(spark, home, url, inp, tmp_path, keys, more)

    # Its dry run (``plan``) on the cluster builds the checkpoint in the store as the start
    # does, under the home's .scratch/plan/, and removes it; the driver fetches no state.
    driver_plan = tmp_path / "driver-plan"
    planned = sparkpoint(home, "plan", str(GROWN), "--from-snapshot", "k1", "--master", url,
                         "--conf", "spark.sql.shuffle.partitions=3",
                         "--conf", f"{PROVIDER_CONF}={ROCKSDB_PROVIDER}",
                         "--conf", "spark.executor.memory=512m", "--param", f"input={inp}",
                         "--json", timeout=600, env={"SPARKPOINT_SCRATCH": str(driver_plan)})
    assert planned.code == 0, planned.err[-3000:]
    assert [row["action"] for row in planned.json()["operators"]] == ["migrate"]
    _fetched_no_state(driver_plan, r"\d+\.zip|" + _KEYS_AND_VALUES)
    assert home.url is not None
    plans = join(home.url, ".scratch", "plan")
    assert file_io(plans).list_names(plans) == []

    # A start that moves RocksDB state to checkpoint format v2 runs on the cluster too; a
    # start into another partition count of state in format v2 still stages it on the
    # driver's disk: refused with one line that says so, nothing changed.
    api.snapshot_create(home, "keys-rocksdb-3", "r1")
    v2 = ("--conf", f"{PROVIDER_CONF}={ROCKSDB_PROVIDER}",
          "--conf", "spark.sql.streaming.stateStore.checkpointFormatVersion=2",
          "--conf", "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled=true",
          "--param", f"input={inp}", "--until-caught-up")
    moved = sparkpoint(home, "run", str(JOB), "--job", "keys-v2", "--from-snapshot", "r1",
                       "--master", url, "--conf", "spark.sql.shuffle.partitions=3", *v2,
                       timeout=600)
    assert moved.code == 0, moved.err[-3000:]
    # (Spark's state reader reads format v2 only when its session's format is 2.)
    spark.conf.set("spark.sql.streaming.stateStore.checkpointFormatVersion", "2")
    try:
        assert _job_keys(spark, home, "keys-v2") == Counter(Counter(keys + more).items())
    finally:
        spark.conf.unset("spark.sql.streaming.stateStore.checkpointFormatVersion")
    api.snapshot_create(home, "keys-v2", "r2")
    refused = sparkpoint(home, "run", str(JOB), "--job", "keys-v2-into-2", "--from-snapshot",
                         "r2", "--master", url, "--conf", "spark.sql.shuffle.partitions=2",
                         *v2, timeout=600)
    assert refused.code == 4, refused.err[-3000:]
    _one_error_line(refused.err, "DRIVER_DISK_UNREACHABLE", "set TMPDIR to a directory")
    assert "keys-v2-into-2" not in {view.record.name for view in api.jobs_list(home)}
    assert api.snapshot_verify(home, "r2") == []


def _grown_on_rocksdb_from_k1(spark: Any, home: Home, url: str, inp: str, tmp_path: Path,
                              keys: list[str], more: list[str]) -> None:
    """GROWN started from snapshot k1 (HDFS-provider state, 4 partitions) on the cluster
    with the RocksDB provider and 3 partitions: the migration's tasks read k1's state in
    the store and write RocksDB versions of the new count there, the driver fetches no
    state file; Spark opens the state with RocksDB (the offsets log says so), its state at
    the start is k1's counts with the new aggregate null, and once caught up each count is
    the input's."""
    from sparkpoint import api

    grown = _start_from_k1(home, url, GROWN, "keys-grown-rocksdb", 3, inp,
                           tmp_path / "driver-grown-rocksdb",
                           "--conf", f"{PROVIDER_CONF}={ROCKSDB_PROVIDER}")
    said = grown.err + grown.out
    assert "written into the new count by their migration" in said, said[-3000:]
    assert f"migrated the state of the operators whose state changed ({len(set(keys))} keys, " \
        "as Spark tasks that read and write the store)" in said
    batch = api.snapshot_show(home, "k1").batch_id
    logs = join(home.job_url("keys-grown-rocksdb"), "checkpoint", "offsets")
    assert ROCKSDB_PROVIDER.encode() in file_io(logs).read_bytes(join(logs, str(batch + 1)))
    checkpoint = spark_url(join(home.job_url("keys-grown-rocksdb"), "checkpoint"))
    assert _grown_state(spark, checkpoint, batch) == Counter(
        (key, count, None) for key, count in Counter(keys).items())
    assert _grown_state(spark, checkpoint, None) == Counter(
        (key, count, len(key) if key in more else None)
        for key, count in Counter(keys + more).items())


def _provider_moved(spark: Any, home: Home, url: str, inp: str, tmp_path: Path,
                    expected: Counter[str], *options: str) -> None:
    """``keys-rocksdb-3`` started from snapshot k1 (HDFS-provider state, 4 partitions) with
    the RocksDB provider and 3 partitions asked for, on the cluster: it says the tasks
    repartitioned the state in the store and wrote RocksDB versions, the driver fetched no
    state file, Spark opens the state with RocksDB (the offsets log says so), its state at
    the start is the snapshot's, each key in the partition Spark's hash gives it for 3
    (Spark's reader on both), and once caught up each key's count is the input's."""
    from sparkpoint import api

    moved = sparkpoint(home, "run", str(JOB), "--job", "keys-rocksdb-3", "--from-snapshot",
                       "k1", "--master", url, "--conf", "spark.sql.shuffle.partitions=3",
                       "--conf", f"{PROVIDER_CONF}={ROCKSDB_PROVIDER}",
                       "--conf", "spark.executor.memory=512m", "--param", f"input={inp}",
                       "--until-caught-up", *options, timeout=600,
                       env={"SPARKPOINT_SCRATCH": str(tmp_path / "driver-provider")})
    assert moved.code == 0, moved.err[-3000:]
    assert "(HDFS state, keys rehashed as Spark places them, written as RocksDB versions, " \
        "in Spark tasks that read and write the store)" in moved.err + moved.out
    _fetched_no_state(tmp_path / "driver-provider", _KEYS_AND_VALUES + r"|\d+\.zip")
    checkpoint = spark_url(join(home.job_url("keys-rocksdb-3"), "checkpoint"))
    batch = api.snapshot_show(home, "k1").batch_id
    logs = join(home.job_url("keys-rocksdb-3"), "checkpoint", "offsets")
    offsets = file_io(logs).read_bytes(join(logs, str(batch + 1)))
    assert ROCKSDB_PROVIDER.encode() in offsets
    snapshot = Counter(_state_rows(spark, open_snapshot_store(home).checkpoint_path("k1"),
                                   batch, 4))
    assert Counter(_state_rows(spark, checkpoint, batch, 3)) == snapshot and snapshot
    assert _job_keys(spark, home, "keys-rocksdb-3") == Counter(expected.items())


def _prune_on_cluster(spark: Any, home: Home, url: str, where: str, selects: Any,
                      partitions: int, tmp_path: Path, *options: str) -> None:
    """``snapshot prune k1 k1-pruned`` of the key counts on the cluster: it says it ran as
    tasks in the store, the driver fetched no file of keys and values (HDFS-provider deltas
    and snapshots, RocksDB SSTs; the new snapshot's export reads each RocksDB version's zip,
    its metadata; on HDFS the export still passes the rewritten files through the driver's
    process, without keeping them), and the pruned snapshot's state (Spark's reader) is
    k1's without the keys ``selects`` (Python's reading of ``where``), each key in its
    partition; k1 still verifies."""
    from sparkpoint import api

    driver_scratch = tmp_path / "driver-prune"
    pruned = sparkpoint(home, "snapshot", "prune", "k1", "k1-pruned", "--operator",
                        "key_counts", "--where", where, "--master", url, "--json", *options,
                        timeout=600, env={"SPARKPOINT_SCRATCH": str(driver_scratch)})
    assert pruned.code == 0, pruned.err[-3000:]
    done = pruned.json()
    assert done["rewritten_by"] == "spark_tasks"
    assert "Spark tasks that read and write the store" in pruned.err + pruned.out
    _fetched_no_state(driver_scratch, _KEYS_AND_VALUES)
    store = open_snapshot_store(home)
    batch = api.snapshot_show(home, "k1").batch_id
    original = Counter(_state_rows(spark, store.checkpoint_path("k1"), batch, partitions))
    kept = Counter({row: n for row, n in original.items() if not selects(row[0])})
    assert 0 < sum(kept.values()) < sum(original.values())
    assert done["rows_removed"] == sum(original.values()) - sum(kept.values())
    assert Counter(_state_rows(spark, store.checkpoint_path("k1-pruned"), batch,
                               partitions)) == kept
    assert api.snapshot_verify(home, "k1") == []
    assert api.snapshot_verify(home, "k1-pruned") == []


def test_start_into_another_partition_count_from_an_s3_home(
    other_host_cluster: str, spark: Any, hdfs_server: Any, s3_server: Any, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest,
) -> None:
    """The same move with the home on S3: the tasks' S3 client is given the endpoint and
    credentials of the application's s3a settings (the workers' environment has none)."""
    from sparkpoint import api

    url = other_host_cluster
    monkeypatch.setenv("SPARKPOINT_SCRATCH", str(tmp_path / "machine"))
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    home = Home.resolve(f"s3://{s3_server.new_bucket()}/home")
    inp = join(hdfs_server.new_dir(), "in")
    keys = [f"k{n:05d}" for n in range(1500)] + [f"k{n:05d}" for n in range(0, 1500, 7)]
    _write_keys(spark, inp, keys)
    api.run(home, JOB, "keys", params={"input": inp},
            conf=_HDFS_STATE, until_caught_up=True, spark=spark)
    api.snapshot_create(home, "keys", "k1")
    more = keys[:200] + [f"s{n:03d}" for n in range(50)]
    _write_keys(spark, inp, more)
    _reach_bucket(spark, home, request)
    _start_into_3(spark, home, url, inp, tmp_path, Counter(keys + more), *_s3a_options())


def _reach_bucket(spark: Any, home: Home, request: pytest.FixtureRequest) -> None:
    """This session's state reader reaches the bucket as the jobs of a home there do: with
    the s3a settings and Spark's FileSystem-based checkpoint file manager (a collected
    FileContext closes its S3A client under a stream still read: one CI run failed so in
    Spark's state reader; tests/integration/test_s3a_file_context.py). The manager is the
    session's default again for the tests after this one."""
    request.addfinalizer(read_bucket_with(spark, str(home.url)))


def _s3a_options() -> list[str]:
    """s3a's jars where each worker reads them, on its executors' class path (a cluster's
    image would hold them): Hadoop looks s3a's classes up there, not among the jars an
    application ships."""
    jars = sorted(str(jar) for jar in S3A_JARS.glob("*.jar"))
    return ["--conf", f"spark.jars={s3a_jars()}",
            "--conf", f"spark.executor.extraClassPath={':'.join(jars)}"]


def test_rocksdb_start_into_another_partition_count_from_an_s3_home(
    other_host_cluster: str, spark: Any, hdfs_server: Any, s3_server: Any, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest,
) -> None:
    """The same move with RocksDB state (sparkpoint's default): the tasks fetch each old
    partition's zip and SSTs from the bucket and upload the new partitions' versions."""
    from sparkpoint import api

    url = other_host_cluster
    monkeypatch.setenv("SPARKPOINT_SCRATCH", str(tmp_path / "machine"))
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    home = Home.resolve(f"s3://{s3_server.new_bucket()}/home")
    inp = join(hdfs_server.new_dir(), "in")
    keys = [f"r{n:05d}" for n in range(1800)] + [f"r{n:05d}" for n in range(0, 1800, 3)]
    _write_keys(spark, inp, keys)
    api.run(home, JOB, "keys", params={"input": inp},
            conf={"spark.sql.shuffle.partitions": "4"}, until_caught_up=True, spark=spark)
    api.snapshot_create(home, "keys", "k1")
    assert api.snapshot_show(home, "k1").state_store_provider.endswith(
        "RocksDBStateStoreProvider")
    more = keys[:300] + [f"t{n:03d}" for n in range(40)]
    _write_keys(spark, inp, more)
    _reach_bucket(spark, home, request)
    _start_into_3(spark, home, url, inp, tmp_path, Counter(keys + more), *_s3a_options(),
                  kind="RocksDB")
    _grown_from_k1(spark, home, url, inp, tmp_path, keys, more, *_s3a_options())
    _prune_on_cluster(spark, home, url, "key < 'r00500' OR key LIKE '%7'",
                      lambda key: key < "r00500" or key.endswith("7"), 4, tmp_path,
                      *_s3a_options())


def _grown_from_k1(spark: Any, home: Home, url: str, inp: str, tmp_path: Path,
                   keys: list[str], more: list[str], *options: str) -> None:
    """The version with an aggregate more (GROWN), started from snapshot k1 on the cluster
    with k1's partitions: Spark's state reader on the executors reads the old state in the
    store (copied there by S3 itself, by Spark tasks on HDFS), sparkpoint's JVM tasks upload
    each partition's new version there; the driver fetches no state file. The state at the
    start is k1's counts (``keys``), the new aggregate null (it saw no row); once caught up
    with the input written since (``more``), each count is the input's and the new
    aggregate is set for the keys read since."""
    from sparkpoint import api

    grown = _start_from_k1(home, url, GROWN, "keys-grown", 4, inp, tmp_path / "driver-grown",
                           *options)
    assert f"migrated the state of the operators whose state changed ({len(set(keys))} keys, " \
        "as Spark tasks that read and write the store)" in grown.err + grown.out
    checkpoint = spark_url(join(home.job_url("keys-grown"), "checkpoint"))
    batch = api.snapshot_show(home, "k1").batch_id
    assert _grown_state(spark, checkpoint, batch) == Counter(
        (key, count, None) for key, count in Counter(keys).items())
    assert _grown_state(spark, checkpoint, None) == Counter(
        (key, count, len(key) if key in more else None)
        for key, count in Counter(keys + more).items())


def _rehearsed_on_cluster(spark: Any, home: Home, url: str, inp: str, tmp_path: Path,
                          keys: list[str], more: list[str], conf: dict[str, str],
                          *options: str) -> None:
    """The job (JOB) run on with ``more`` here, then GROWN rehearsed against it from k1 on
    the cluster: the rehearsal's checkpoint and output are in the store (the executors
    cannot write the driver's disk), its state migrated there; it replays the job's batch
    of ``more``: one row per key of ``more``, its count all the input's (the snapshot's state
    resumed) and its new aggregate set. The driver fetched no state file; nothing of the
    rehearsal is left in the store."""
    from sparkpoint import api

    api.run(home, JOB, "keys", params={"input": inp}, conf=conf, until_caught_up=True,
            spark=spark)
    driver_scratch = tmp_path / "driver-rehearse"
    rehearsed = sparkpoint(home, "rehearse", str(GROWN), "--against", "keys",
                           "--from-snapshot", "k1", "--master", url,
                           "--conf", "spark.executor.memory=512m", "--json", *options,
                           timeout=600, env={"SPARKPOINT_SCRATCH": str(driver_scratch)})
    assert rehearsed.code == 0, rehearsed.err[-3000:]
    done = rehearsed.json()
    assert done["new_rows"] == len(set(more)) and done["equal"] is None, done
    counts = Counter(keys + more)
    shown = done["examples"]["new"]
    assert shown and all(row["key"] in more and row["count"] == counts[row["key"]]
                         and row["longest"] == len(row["key"]) for row in shown), shown
    _fetched_no_state(driver_scratch, r"\d+\.zip|" + _KEYS_AND_VALUES)
    scratch = join(home.location, ".scratch", "rehearse")
    assert file_io(scratch).list_names(scratch) == []


# Files that hold keys and values (a RocksDB zip holds the version's metadata).
_KEYS_AND_VALUES = r"\d+\.(delta|snapshot|changelog)|.*\.sst"


def _start_from_k1(home: Home, url: str, job_file: Path, job: str, partitions: int,
                   inp: str, driver_scratch: Path, *options: str) -> Result:
    """``job`` (``job_file``) started from snapshot k1 on the cluster into ``partitions``
    partitions and run until caught up: it succeeds, and the driver fetched the snapshot's
    logs and metadata only (no state file, not even a RocksDB zip)."""
    started = sparkpoint(home, "run", str(job_file), "--job", job, "--from-snapshot", "k1",
                         "--master", url, "--conf", f"spark.sql.shuffle.partitions={partitions}",
                         "--conf", "spark.executor.memory=512m", "--param", f"input={inp}",
                         "--until-caught-up", *options, timeout=600,
                         env={"SPARKPOINT_SCRATCH": str(driver_scratch)})
    assert started.code == 0, started.err[-3000:]
    _fetched_no_state(driver_scratch, r"\d+\.zip|" + _KEYS_AND_VALUES)
    return started


def _fetched_no_state(driver_scratch: Path, state_names: str) -> None:
    """The command fetched files into ``driver_scratch``, none whose name ``state_names``
    matches."""
    fetched = [p for p in driver_scratch.rglob("*") if p.is_file()]
    assert fetched and not [p for p in fetched if re.fullmatch(state_names, p.name)]


def _grown_state(spark: Any, checkpoint: str, batch: int | None) -> Counter[tuple[Any, ...]]:
    """(key, count, longest) of GROWN's state at ``batch`` (the last by default), by Spark's
    state reader: the count's buffer and the max's, by position."""
    reader = spark.read.format("statestore")
    if batch is not None:
        reader = reader.option("batchId", batch)
    rows = reader.load(checkpoint).collect()
    return Counter((row.key.key, row.value[0], row.value[1]) for row in rows)


def _start_into_3(spark: Any, home: Home, url: str, inp: str, tmp_path: Path,
                  expected: Counter[str], *options: str, kind: str = "HDFS") -> None:
    """``keys-3`` started from snapshot k1 into 3 partitions on the cluster and run until
    caught up: its state at the start is the snapshot's (Spark's reader on both), each key
    in the partition Spark's hash gives it, and the state it ends with is ``expected``
    (counted here from the input)."""
    from sparkpoint import api

    moved = _start_from_k1(home, url, JOB, "keys-3", 3, inp, tmp_path / "driver", *options)
    assert f"({kind} state, keys rehashed as Spark places them, in Spark tasks that read and " \
        "write the store)" in moved.err + moved.out

    manifest = api.snapshot_show(home, "k1")
    snapshot = Counter(_state_rows(spark, open_snapshot_store(home).checkpoint_path("k1"),
                                   manifest.batch_id, 4))
    started = Counter(_state_rows(spark, spark_url(join(home.job_url("keys-3"), "checkpoint")),
                                  manifest.batch_id, 3))
    assert started == snapshot and snapshot
    assert _job_keys(spark, home, "keys-3") == Counter(expected.items())


def _state_rows(spark: Any, checkpoint: Any, batch: int,
                partitions: int) -> list[tuple[str, int]]:
    """(key, count) of the state at ``batch``, by Spark's state reader, checking that each
    key is in the partition Spark's hash of it gives for ``partitions``."""
    from pyspark.sql import functions as F

    frame = spark.read.format("statestore").option("batchId", batch).load(str(checkpoint))
    rows = frame.select("partition_id", F.expr(f"pmod(hash(key.*), {partitions})").alias("want"),
                        "key.key", "value.count").collect()
    misplaced = [row for row in rows if row.partition_id != row.want]
    assert not misplaced, misplaced[:5]
    return [(row.key, row["count"]) for row in rows]


def _one_error_line(err: str, code: str, remedy: str) -> None:
    """The command's error: one line, typed, naming what to do; no traceback."""
    lines = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and f"[{code}]" in lines[0] and remedy in lines[0], err[-3000:]
    assert "Traceback" not in err
