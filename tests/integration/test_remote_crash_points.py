"""Crash points of the commands that change a job, on a home in S3 (moto's server, Spark
through s3a) with its snapshots in the same store: a start from a snapshot (whose state is
copied inside the store), a drain and a startpoint application, each cut off at every one of
its points (``SPARKPOINT_CRASH_AT``: the process ends at once, as ``kill -9`` would) and
finished or rolled back by the next ordinary command, from another machine.

The points of one command are walked in one test, on one job, one after the other: each
cut-off is checked and finished before the next point is tried, so that a later point sees
what a finished earlier one left (and the suite does not start a job per point). What the
user ends up with is compared with rows computed from the input, without Spark.

Every point of these commands is walked on a local home (test_restore_crash.py,
test_crash_points.py), where the protocols are the same code; here, for the suite's time,
the points where a home in a store differs: each recovery path once (a start rolled back
before and after its files reached the store, and after it was published; a drain rolled
back after its offsets changed and finished after its batch committed), and every point of
a startpoint application.
"""

from __future__ import annotations

import shutil
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from sparkpoint import api
from sparkpoint.crash_points import CRASH_ENV, CRASH_EXIT_CODE, CRASH_POINTS
from sparkpoint.storage.home import Home
from sparkpoint.storage.stores import file_io
from sparkpoint.testing import expected_hourly_counts, output_rows, write_clicks
from tests.conftest import EXAMPLES, SHUFFLE_PARTITIONS, s3a_jars
from tests.integration.test_drain import JOB as DRAIN_JOB
from tests.integration.test_drain import expected_all_windows
from tests.integration.test_startpoints import JOB as PASSTHROUGH_JOB
from tests.integration.test_startpoints import _rows
from tests.support.cli import Result, sparkpoint
from tests.support.s3 import S3Server
from tests.support.s3a_reads import read_bucket_with

JOB = EXAMPLES / "clicks_job.py"
pytestmark = pytest.mark.spark

# A start that keeps the snapshot's partitions copies its state inside the store; the
# repartition points are walked on a local home (test_restore_crash.py), as are the lock's
# and the sink log's (the output here is local).
RESTORE_POINTS = ["restore.assembled", "restore.files_uploaded", "restore.published"]
DRAIN_POINTS = ["drain.offsets_written", "drain.batch_committed"]
PUBLISHED_AT = {"restore.published", "restore.sink_seeded"}
STATE_SUFFIXES = (".sst", ".zip", ".changelog", ".delta", ".snapshot")


def _s3a_jars() -> str:
    return s3a_jars()


def _crash(home: Home, point: str, machine: Path, *args: str) -> Result:
    cut = sparkpoint(home, *args, env={CRASH_ENV: point, "SPARKPOINT_SCRATCH": str(machine)})
    assert cut.code == CRASH_EXIT_CODE, (point, cut.code, cut.err[-3000:])
    assert f"crash point {point}" in cut.err
    return cut


def _s3_home(s3_server: S3Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Home:
    monkeypatch.setenv("SPARKPOINT_SCRATCH", str(tmp_path / "machine_a"))
    return Home.resolve(f"s3://{s3_server.new_bucket()}/home")


def test_start_from_a_snapshot_on_s3_cut_off_at_each_point_is_rolled_back_and_rebuilt(
    spark: Any, s3_server: S3Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The jobs finishing the cut-off starts run in this test's own SparkSession, which has
    no s3a settings: the in-driver API hands the job's copy of it the home's (on main they
    were lost: Spark copies a session's confs into its Hadoop configuration with their
    ``spark.hadoop.`` prefix, and only strips it when it creates the SparkContext), and the
    caller's session is left without them."""
    home = _s3_home(s3_server, tmp_path, monkeypatch)
    inp = tmp_path / "in"
    events = write_clicks(inp, range(0, 3))
    params = {"input": str(inp), "output": str(tmp_path / "v1"), "files_per_batch": "1"}
    api.run(home, JOB, "v1", params=params, until_caught_up=True, spark=spark)
    api.snapshot_create(home, "v1", "s1")
    events += write_clicks(inp, range(3, 5))
    expected = expected_hourly_counts(events)
    first = output_rows(spark, tmp_path / "v1")

    for point in RESTORE_POINTS:
        job = "after-" + point.split(".", 1)[1].replace("_", "-")
        out = tmp_path / job
        machine = tmp_path / f"machine-{job}"
        _crash(home, point, machine, "run", str(JOB), "--job", job, "--from-snapshot", "s1",
               "--param", f"input={inp}", "--param", f"output={out}",
               "--param", "files_per_batch=1",
               "--conf", f"spark.sql.shuffle.partitions={SHUFFLE_PARTITIONS}",
               "--conf", f"spark.jars={_s3a_jars()}", "--until-caught-up")
        assert job not in [view.record.name for view in api.jobs_list(home)], point
        in_home = file_io(home.location).walk_sizes(home.checkpoint_location(job))
        assert bool(in_home) == (point not in ("restore.job_locked", "restore.assembled")), \
            (point, sorted(in_home)[:5])
        if point == "restore.files_uploaded":
            # The logs are there, the state the store was to copy is not: not a checkpoint
            # any command may continue.
            assert any(rel.startswith("offsets/") for rel in in_home), sorted(in_home)
            assert not any(rel.endswith(STATE_SUFFIXES) for rel in in_home), sorted(in_home)
        shutil.rmtree(machine)  # the machine is gone; the next start runs elsewhere

        said: list[str] = []
        api.run(home, JOB, job, params={**params, "output": str(out)}, from_snapshot="s1",
                until_caught_up=True, spark=spark, echo=said.append)
        rolled_back = point not in ("restore.job_locked", "restore.assembled")
        assert any("interrupted" in line for line in said) == rolled_back, (point, said)
        assert api.job_view(home, job).record.lineage.from_snapshot == "s1"
        # Nothing lost, nothing twice: the first job's windows and the new job's are every
        # window of the input.
        assert first + output_rows(spark, out) == expected, point
    assert sorted(view.record.name for view in api.jobs_list(home)) == \
        sorted(["v1", *("after-" + p.split(".", 1)[1].replace("_", "-")
                        for p in RESTORE_POINTS)])
    assert Counter(api.snapshot_verify(home, "s1")) == Counter()
    assert spark.conf.get("fs.s3a.endpoint", None) is None


# A start into another partition count of HDFS-provider or RocksDB state in a store, or into
# the other state store provider: Spark tasks write the new state files into the home before
# the checkpoint is published. Cut off once they wrote (a repartition: before the old
# partitions' files are dropped from the new checkpoint). (Cut off later, at
# restore.repartitioned, the checkpoint is just as unpublished and rolled back the same way,
# as test_restore_crash.py walks on local disk; once published, whatever it built: walked
# above.)
MOVES = {
    # name: (the snapshot's provider, the start's --conf, its crash point, what it says)
    "hdfs-into-3": ("hdfs", {"spark.sql.shuffle.partitions": "3"},
                    "restore.hdfs_partition_moved", "(HDFS state, keys rehashed"),
    "rocksdb-into-3": ("rocksdb", {"spark.sql.shuffle.partitions": "3"},
                       "restore.hdfs_partition_moved", "(RocksDB state, keys rehashed"),
    "hdfs-to-rocksdb": ("hdfs", {"spark.sql.shuffle.partitions": "2",
                                 "spark.sql.streaming.stateStore.providerClass":
                                 "org.apache.spark.sql.execution.streaming.state."
                                 "RocksDBStateStoreProvider"},
                        "restore.provider_moved", "provider to RocksDB ("),
    "hdfs-to-rocksdb-into-3": ("hdfs", {"spark.sql.shuffle.partitions": "3",
                                        "spark.sql.streaming.stateStore.providerClass":
                                        "org.apache.spark.sql.execution.streaming.state."
                                        "RocksDBStateStoreProvider"},
                               "restore.hdfs_partition_moved", "written as RocksDB versions"),
    "rocksdb-to-hdfs-into-3": ("rocksdb", {"spark.sql.shuffle.partitions": "3",
                                        "spark.sql.streaming.stateStore.providerClass":
                                        "org.apache.spark.sql.execution.streaming.state."
                                        "HDFSBackedStateStoreProvider"},
                               "restore.hdfs_partition_moved", "written as HDFS-backed versions"),
    "rocksdb-to-hdfs": ("rocksdb", {"spark.sql.shuffle.partitions": "2",
                                    "spark.sql.streaming.stateStore.providerClass":
                                    "org.apache.spark.sql.execution.streaming.state."
                                    "HDFSBackedStateStoreProvider"},
                        "restore.provider_moved", "provider to HDFS-backed ("),
}


@dataclass(frozen=True)
class _Origin:
    """A home on S3 whose job v1 (state in one provider) has snapshot s1, the input written
    since, and what the job wrote: the start of every move from that provider."""

    home: Home
    inp: Path
    params: dict[str, str]
    first: Counter[Any]
    expected: Counter[Any]


@pytest.fixture(scope="module")
def origins(spark: Any, s3_server: S3Server, tmp_path_factory: pytest.TempPathFactory
            ) -> Iterator[Callable[[str], _Origin]]:
    """The origin of the moves from each provider, made once per module: the moves start
    jobs of their own from the same snapshot, which they only read (as the suite's time
    asks)."""
    from sparkpoint.checkpoint.layout import PROVIDER_CONF
    from sparkpoint.checkpoint.rocksdb_state import HDFS_PROVIDER, ROCKSDB_PROVIDER

    made: dict[str, _Origin] = {}
    with pytest.MonkeyPatch.context() as patch:

        def origin(provider: str) -> _Origin:
            if provider not in made:
                root = tmp_path_factory.mktemp(f"moves-from-{provider}")
                patch.setenv("SPARKPOINT_SCRATCH", str(root / "machine_a"))
                home = Home.resolve(f"s3://{s3_server.new_bucket()}/home")
                inp = root / "in"
                events = write_clicks(inp, range(0, 3))
                params = {"input": str(inp), "output": str(root / "v1"),
                          "files_per_batch": "1"}
                api.run(home, JOB, "v1", params=params, until_caught_up=True, spark=spark,
                        conf={"spark.sql.shuffle.partitions": "2", PROVIDER_CONF: {
                            "hdfs": HDFS_PROVIDER, "rocksdb": ROCKSDB_PROVIDER}[provider]})
                api.snapshot_create(home, "v1", "s1")
                events += write_clicks(inp, range(3, 5))
                made[provider] = _Origin(home, inp, params, output_rows(spark, root / "v1"),
                                         expected_hourly_counts(events))
            return made[provider]

        yield origin


@pytest.mark.parametrize("move", list(MOVES))
def test_a_start_that_moves_state_on_s3_cut_off_after_its_tasks_wrote_is_rolled_back(
    spark: Any, s3_server: S3Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    move: str, origins: Callable[[str], _Origin],
) -> None:
    """The move's tasks write into the new job's checkpoint in the store before it is
    published: the intent and the checkpoint's ``metadata`` are there first, so a start cut
    off after they wrote is recognised and rolled back by the next, which builds it again."""
    provider, conf, point, says = MOVES[move]
    origin = origins(provider)
    monkeypatch.setenv("SPARKPOINT_SCRATCH", str(tmp_path / "machine_a"))
    home = Home.resolve(origin.home.location)  # its scratch: this test's
    inp, params = origin.inp, origin.params

    job = f"moved-{move}"
    out = tmp_path / job
    machine = tmp_path / f"machine-{job}"
    confs = [arg for key, value in conf.items() for arg in ("--conf", f"{key}={value}")]
    if move == "hdfs-to-rocksdb":
        _damaged_file_refused_by_a_task(s3_server, home, job, [
            "run", str(JOB), "--job", job, "--from-snapshot", "s1", "--param", f"input={inp}",
            "--param", f"output={out}", "--param", "files_per_batch=1", *confs,
            "--conf", f"spark.jars={_s3a_jars()}", "--until-caught-up"])
    _crash(home, point, machine, "run", str(JOB), "--job", job, "--from-snapshot", "s1",
           "--param", f"input={inp}", "--param", f"output={out}",
           "--param", "files_per_batch=1", *confs,
           "--conf", f"spark.jars={_s3a_jars()}", "--until-caught-up")
    in_home = file_io(home.location).walk_sizes(home.checkpoint_location(job))
    # The new partitions' files are in the home: written by the tasks, not uploaded.
    newest = "state/0/2/" if move.endswith("into-3") else "state/0/1/"
    written = [rel for rel in in_home if rel.startswith(newest)]
    assert written, sorted(in_home)
    if "-to-rocksdb" in move:
        assert any(rel.endswith(".zip") for rel in written), written
        assert not [rel for rel in written if rel.endswith((".snapshot", ".delta"))], written
    if "-to-hdfs" in move:
        assert [rel for rel in written if rel.endswith(".snapshot")] == written, written
    assert "metadata" in in_home, sorted(in_home)
    shutil.rmtree(machine)

    said: list[str] = []
    api.run(home, JOB, job, params={**params, "output": str(out)}, from_snapshot="s1",
            conf=conf, until_caught_up=True, spark=spark, echo=said.append)
    assert any("interrupted" in line for line in said), said
    assert any("read and write the store" in line and says in line for line in said), said
    assert origin.first + output_rows(spark, out) == origin.expected
    assert Counter(api.snapshot_verify(home, "s1")) == Counter()


def _damaged_file_refused_by_a_task(server: S3Server, home: Home, job: str,
                                    start: list[str]) -> None:
    """A state file of snapshot s1 changed in the store, same size: the start's task that
    fetches it finds it is not the manifest's and the start stops with the same typed line
    as a fetch by sparkpoint's own process (SNAPSHOT_DAMAGED, exit 3), leaving nothing in
    the home; the file put back, the snapshot verifies again."""
    bucket = str(home.url).removeprefix("s3://").split("/", 1)[0]
    client = server.client()
    manifest = api.snapshot_show(home, "s1")
    victim = max((entry for entry in manifest.files if entry.etag and
                  entry.path.endswith(".delta")), key=lambda entry: entry.bytes)
    key = f"home/snapshots/.files/etag/{victim.etag}-{victim.bytes}"
    original = client.get_object(Bucket=bucket, Key=key)["Body"].read()
    client.put_object(Bucket=bucket, Key=key, Body=bytes([original[0] ^ 0xFF]) + original[1:])
    refused = sparkpoint(home, *start)
    client.put_object(Bucket=bucket, Key=key, Body=original)
    lines = [line for line in refused.err.splitlines() if line.startswith("error:")]
    assert refused.code == 3 and len(lines) == 1, refused.err[-3000:]
    assert lines[0].startswith("error: [SNAPSHOT_DAMAGED] s3://") \
        and lines[0].count("SNAPSHOT_DAMAGED") == 1 \
        and f": {victim.path.removeprefix('checkpoint/')}: expected {victim.bytes} bytes" \
        in lines[0] and "Traceback" not in refused.err, refused.err[-3000:]
    assert not file_io(home.location).walk_sizes(home.checkpoint_location(job))
    assert api.snapshot_verify(home, "s1") == []


def _job_conf() -> dict[str, str]:
    """What the job is run with: recorded with it, so that a command of another machine that
    starts Spark for it (a drain, a run without --conf) has the s3a jars too."""
    return {"spark.sql.shuffle.partitions": str(SHUFFLE_PARTITIONS), "spark.jars": _s3a_jars()}


def test_drain_on_s3_cut_off_at_each_point_is_finished_or_rolled_back_by_the_next_drain(
    spark: Any, s3_server: S3Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = _s3_home(s3_server, tmp_path, monkeypatch)
    clicks = write_clicks(tmp_path / "in", range(0, 3))
    expected = expected_all_windows("tumbling", clicks, [])
    for point in DRAIN_POINTS:
        job = "j-" + point.split(".", 1)[1].replace("_", "-")
        params = {"kind": "tumbling", "input": str(tmp_path / "in"),
                  "views_input": str(tmp_path / "views"), "output": str(tmp_path / job)}
        api.run(home, DRAIN_JOB, job, params=params, conf=_job_conf(), until_caught_up=True,
                spark=spark)
        machine = tmp_path / f"machine-{job}"
        _crash(home, point, machine, "drain", job, "--snapshot", f"d-{job}")
        shutil.rmtree(machine)

        said: list[str] = []
        record = api.drain(home, job, snapshot=f"d-{job}", spark=spark, echo=said.append)
        finished = point in ("drain.batch_committed", "drain.watermark_restored",
                             "drain.recorded")
        assert any("finishing the drain interrupted" in line for line in said) == finished, \
            (point, said)
        # Cut off before its batch ran: rolled back (nothing changed, or its offsets).
        assert any("rolled back an interrupted drain" in line for line in said) == \
            (not finished), (point, said)
        assert record.residual == [] and record.snapshot == f"d-{job}"
        # Every window, each once: what an unbounded run of the input emits.
        assert output_rows(spark, tmp_path / job) == expected, point
        assert {op.rows for op in api.snapshot_show(home, f"d-{job}").operators} == {0}
        assert api.job_view(home, job).status == "drained"
    assert not [key for key in s3_server.keys(home.location.split("/")[2], "home/jobs/")
                if key.endswith("drain-intent.json")]


def test_startpoint_apply_on_s3_cut_off_at_each_point_is_applied_exactly_once(
    spark: Any, s3_server: S3Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = _s3_home(s3_server, tmp_path, monkeypatch)
    for point in [p for p in CRASH_POINTS if p.startswith("startpoint.")]:
        job = "j-" + point.split(".", 1)[1].replace("_", "-")
        inp, out = tmp_path / f"{job}-in", tmp_path / job
        params = {"input": str(inp), "output": str(out)}
        first = write_clicks(inp, range(0, 2))
        api.run(home, PASSTHROUGH_JOB, job, params=params, conf=_job_conf(),
                until_caught_up=True, spark=spark)
        assert api.startpoint_set(home, job, "clicks", "earliest").stored
        later = write_clicks(inp, range(2, 3))
        machine = tmp_path / f"machine-{job}"
        _crash(home, point, machine, "run", str(PASSTHROUGH_JOB), "--job", job,
               "--until-caught-up")
        shutil.rmtree(machine)

        said: list[str] = []
        api.run(home, PASSTHROUGH_JOB, job, params=params, until_caught_up=True, spark=spark,
                echo=said.append)
        assert any("finishing the startpoints interrupted" in line for line in said), \
            (point, said)
        assert api.startpoint_list(home, job) == {}
        applied = api.job_view(home, job).record.startpoints_applied
        assert [a.source for a in applied] == ["clicks"], point
        # Every file read again exactly once from the earliest, as an uninterrupted
        # application reads them, then the new one.
        assert output_rows(spark, out) == _rows(first + first + later), point


# A migrating start in a store (an aggregate added): the old state is placed inside the new
# checkpoint, then Spark tasks write the migrated state there, before it is published.
MIGRATION_POINTS = ["restore.old_state_placed", "restore.state_migrated"]
KEYS_JOB = Path(__file__).resolve().parent.parent / "data" / "jobs" / "key_counts.py"
GROWN_JOB = KEYS_JOB.with_name("key_counts_longest.py")


def test_a_migrating_start_on_s3_cut_off_after_it_wrote_into_the_store_is_rolled_back(
    spark: Any, s3_server: S3Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Cut off once the old state is in the new checkpoint, and once the migrated state is
    (and the old state's copy removed):
    the next start recognises the debris as an interrupted start's, removes it, and migrates
    again; its state is the snapshot's counts, the new aggregate null, whatever the cut."""
    home = _s3_home(s3_server, tmp_path, monkeypatch)
    inp = str(tmp_path / "in")
    keys = [f"c{n:03d}" for n in range(300)] + [f"c{n:03d}" for n in range(0, 300, 3)]
    spark.createDataFrame([(key,) for key in keys], "key string").coalesce(1) \
        .write.parquet(inp)
    conf = {"spark.sql.shuffle.partitions": "2"}
    api.run(home, KEYS_JOB, "keys", params={"input": inp}, conf=conf, until_caught_up=True,
            spark=spark)
    api.snapshot_create(home, "keys", "s1")
    batch = api.snapshot_show(home, "s1").batch_id
    expected = Counter((key, count, None) for key, count in Counter(keys).items())
    # Spark's state reader reaches the bucket with the home's s3a settings, in a session of
    # its own (the shared one stays without them).
    reader = spark.newSession()
    read_bucket_with(reader, str(home.url))

    for point in MIGRATION_POINTS:
        job = "grown-after-" + point.split(".", 1)[1].replace("_", "-")
        machine = tmp_path / f"machine-{job}"
        _crash(home, point, machine, "run", str(GROWN_JOB), "--job", job, "--from-snapshot",
               "s1", "--param", f"input={inp}", "--conf", "spark.sql.shuffle.partitions=2",
               "--conf", f"spark.jars={_s3a_jars()}", "--until-caught-up")
        in_home = file_io(home.location).walk_sizes(home.checkpoint_location(job))
        assert "metadata" in in_home, sorted(in_home)
        placed = [rel for rel in in_home if rel.startswith(".sparkpoint-old-state/state/0/")
                  and rel.endswith(STATE_SUFFIXES)]
        migrated = [rel for rel in in_home if rel.startswith("state/0/")
                    and rel.endswith(STATE_SUFFIXES)]
        # Cut off before the migration: the old state is in place, none migrated; after it:
        # the migrated state is there, the old state's copy already removed.
        assert bool(placed) == (point == "restore.old_state_placed"), sorted(in_home)
        assert bool(migrated) == (point == "restore.state_migrated"), sorted(in_home)
        shutil.rmtree(machine)

        said: list[str] = []
        api.run(home, GROWN_JOB, job, params={"input": inp}, from_snapshot="s1", conf=conf,
                until_caught_up=True, spark=spark, echo=said.append)
        assert any("interrupted" in line for line in said), (point, said)
        assert any("that read and write the store" in line for line in said), (point, said)
        in_home = file_io(home.location).walk_sizes(home.checkpoint_location(job))
        assert not [rel for rel in in_home if rel.startswith(".sparkpoint-old-state")]
        frame = reader.read.format("statestore").option("batchId", batch).load(
            home.checkpoint_location(job))
        assert Counter((row.key.key, row.value[0], row.value[1])
                       for row in frame.collect()) == expected, point
    assert Counter(api.snapshot_verify(home, "s1")) == Counter()
