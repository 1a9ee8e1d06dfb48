"""A job on a real Spark standalone cluster (a master and two workers, each worker its own
process with its own work directory, started from the pip package with sbin/spark-daemon.sh)
whose home, and so checkpoint, is on HDFS (the MiniDFSCluster): launched by spark-submit,
snapshotted while it runs, continued on the cluster by `sparkpoint run --master` from the
snapshot. The executors write the state to HDFS, not to a disk the driver shares."""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sparkpoint.storage.fileio import join
from sparkpoint.storage.home import Home
from sparkpoint.storage.stores import file_io
from sparkpoint.testing import expected_hourly_counts, output_rows, sink_files_up_to, write_clicks
from tests.conftest import EXAMPLES
from tests.support.cli import _env, sparkpoint, wait_for
from tests.support.spark_cluster import standalone_cluster

pytestmark = [pytest.mark.spark, pytest.mark.cluster]
JOB = EXAMPLES / "clicks_job.py"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    root = tmp_path_factory.mktemp("cluster")
    with standalone_cluster(root, 1) as url:
        yield url, root / "logs"


def _executor_workers(logs: Path, app_name: str) -> set[str]:
    """Workers the master launched the named application's executors on, from its log."""
    import re

    text = "".join(p.read_text() for p in logs.glob("*Master*.out"))
    ids = re.findall(rf"Registered app {re.escape(app_name)} with ID (\S+)", text)
    assert ids, f"the master never registered {app_name}"
    return {worker for app_id in ids for worker in
            re.findall(rf"Launching executor {re.escape(app_id)}/\d+ on worker (\S+)", text)}


def _task_executors(events_dir: Path, app_name: str, stage_text: str) -> set[str]:
    """Executors that ran tasks of the named application's stages whose name or details
    mention ``stage_text``, from Spark's event log."""
    import json

    for log in events_dir.iterdir():
        events = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
        if not any(e.get("Event") == "SparkListenerApplicationStart"
                   and e.get("App Name") == app_name for e in events):
            continue
        stages = {info["Stage ID"] for e in events if e.get("Event") == "SparkListenerJobStart"
                  for info in e.get("Stage Infos", [])
                  if stage_text in info.get("Stage Name", "") + info.get("Details", "")}
        return {e["Task Info"]["Executor ID"] for e in events
                if e.get("Event") == "SparkListenerTaskEnd" and e.get("Stage ID") in stages}
    raise AssertionError(f"no event log of {app_name} in {events_dir}")


def _log_events(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, conf: str = "") -> Path:
    """Every application started from here on writes Spark's event log (its tasks and where
    they ran) into the returned directory; ``conf``: more lines of spark-defaults.conf."""
    events_dir = tmp_path / "events"
    events_dir.mkdir()
    conf_dir = tmp_path / "spark-conf"
    conf_dir.mkdir()
    (conf_dir / "spark-defaults.conf").write_text(
        f"spark.eventLog.enabled true\nspark.eventLog.dir {events_dir.as_uri()}\n"
        # One plain JSON file per application (Spark 4 rolls and compresses by default).
        "spark.eventLog.rolling.enabled false\nspark.eventLog.compress false\n" + conf)
    monkeypatch.setenv("SPARK_CONF_DIR", str(conf_dir))
    return events_dir


def _state_keys(spark: Any, home: Home, snapshot: str, operator: str) -> Counter[Any]:
    """An operator's keys in a snapshot, as Spark's state reader sees them."""
    from sparkpoint import api
    from sparkpoint.snapshot.store import open_snapshot_store

    manifest = api.snapshot_show(home, snapshot)
    entry = manifest.operator(operator)
    assert entry is not None
    frame = (spark.read.format("statestore")  # type: ignore[attr-defined]
             .option("batchId", manifest.batch_id).option("operatorId", entry.operator_id)
             .load(str(open_snapshot_store(home).checkpoint_path(snapshot))))
    return Counter(tuple(row.key) for row in frame.collect())


def _committed_batches(home: Home, job: str) -> int:
    """Batches the job has committed, read from its checkpoint in the home (HDFS)."""
    commits = join(home.job_url(job), "checkpoint", "commits")
    return sum(1 for name in file_io(home.location).list_names(commits) if name.isdigit())


def test_spark_submit_job_is_managed_snapshotted_while_running_and_continued(
    cluster: tuple[str, Path], spark: object, hdfs_server: Any, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    url, logs = cluster
    monkeypatch.setenv("SPARKPOINT_SCRATCH", str(tmp_path / "machine"))
    events_dir = _log_events(tmp_path, monkeypatch)
    home = Home.resolve(join(hdfs_server.new_dir(), "home"))
    inp, out = tmp_path / "in", tmp_path / "o1"
    events = write_clicks(inp, range(0, 3))
    entry = sparkpoint(home, "submit-entry").out.strip()
    submit = Path(sys.executable).parent / "spark-submit"
    log = tmp_path / "submit.log"
    with open(log, "wb") as handle:
        proc = subprocess.Popen(
            [str(submit), "--master", url, "--deploy-mode", "client",
             "--conf", "spark.sql.shuffle.partitions=2", "--conf", "spark.executor.memory=512m",
             "--name", "clicks-submitted",
             entry, "--home", home.location, "run", str(JOB), "--job", "submitted",
             "--param", f"input={inp}", "--param", f"output={out}",
             "--param", "files_per_batch=1"],
            stdout=handle, stderr=subprocess.STDOUT, env=_env())
    try:
        # One file per batch: three files read once three batches are committed.
        wait_for(lambda: _committed_batches(home, "submitted") == 3, 240, "3 batches", log)
        shown = sparkpoint(home, "jobs", "show", "submitted", "--json").json()
        assert shown["status"] == "running" and shown["master"] == url
        live = sparkpoint(home, "snapshot", "create", "submitted", "s-live", "--json")
        assert live.code == 0, live.err
        live_batch = live.json()["batch_id"]
        events += write_clicks(inp, range(3, 5))
        wait_for(lambda: _committed_batches(home, "submitted") == 5, 240, "5 batches", log)
        stopped = sparkpoint(home, "jobs", "stop", "submitted", "--wait")
        assert stopped.code == 0, stopped.err
        assert proc.wait(timeout=180) == 0, log.read_text()[-3000:]
    finally:
        if proc.poll() is None:
            proc.kill()
    assert sparkpoint(home, "jobs", "show", "submitted", "--json").json()["status"] == "stopped"
    in_hdfs = file_io(home.location).walk_sizes(join(home.job_url("submitted"), "checkpoint"))
    assert any(rel.startswith("state/") for rel in in_hdfs), "the state is not on HDFS"
    # Executors ran on both workers: the state was written by two separate processes.
    assert len(_executor_workers(logs, "clicks-submitted")) == 2

    events += write_clicks(inp, range(5, 7))
    # Into 3 partitions: the RocksDB state is moved by sparkpoint's tasks in the job's
    # session, on the cluster.
    second = sparkpoint(home, "run", str(JOB), "--job", "after-submit", "--from-snapshot",
                        "s-live", "--master", url, "--conf", "spark.sql.shuffle.partitions=3",
                        "--conf", "spark.executor.memory=512m", "--param", f"input={inp}",
                        "--param", f"output={tmp_path / 'o2'}", "--param", "files_per_batch=1",
                        "--until-caught-up", timeout=900)
    assert second.code == 0, second.err[-3000:]
    # Started by the CLI on the cluster this time: a managed job with its lineage.
    shown = sparkpoint(home, "jobs", "show", "after-submit", "--json").json()
    assert shown["master"] == url and shown["lineage"]["from_snapshot"] == "s-live"
    assert len(_executor_workers(logs, "sparkpoint:after-submit")) == 2
    # The move (upgrade/rocksdb_store_repartition.py, the home being on HDFS: each old
    # partition read from the store and hashed, each new one written into it) ran its tasks
    # on the executors of both workers.
    repartition_executors = _task_executors(events_dir, "sparkpoint:after-submit",
                                            "rocksdb_store_repartition.py")
    assert len(repartition_executors) == 2, repartition_executors
    before = output_rows(spark, out, sink_files_up_to(out, live_batch))  # type: ignore[arg-type]
    after = output_rows(spark, tmp_path / "o2")  # type: ignore[arg-type]
    assert before + after == expected_hourly_counts(events)


def _snapshot_of_key_counts(spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                            provider: str, keys: list[str]) -> tuple[Home, Path, Path]:
    """Snapshot 'k1' of the key counts of ``keys`` in 4 partitions of ``provider``'s state,
    made here; returns the home, the job file and the directory of the event logs of every
    application started after (each waits for both executors)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from sparkpoint import api
    from sparkpoint.spark.session import PROVIDER_CONF

    home = Home(tmp_path / "home")  # one host: the executors reach the driver's disk
    # Both executors registered before an application's first job, so that the tasks have
    # both to run on (a standalone application otherwise starts with the first one).
    events_dir = _log_events(tmp_path, monkeypatch,
                             "spark.scheduler.minRegisteredResourcesRatio 1.0\n"
                             "spark.scheduler.maxRegisteredResourcesWaitingTime 120s\n")
    job = Path(__file__).resolve().parent.parent / "data" / "jobs" / "key_counts.py"
    (tmp_path / "in").mkdir()
    pq.write_table(pa.table({"key": keys}), tmp_path / "in" / "part-0.parquet")
    api.run(home, job, "keys", params={"input": str(tmp_path / "in")},
            conf={PROVIDER_CONF: provider, "spark.sql.shuffle.partitions": "4"},
            until_caught_up=True, spark=spark)
    api.snapshot_create(home, "keys", "k1")
    return home, job, events_dir


def test_hdfs_provider_prune_and_repartition_run_as_tasks_on_both_workers(
    cluster: tuple[str, Path], spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """HDFS-provider state (keys of one width) pruned and moved into another partition count
    on the cluster: the rewrites are tasks on the executors of both workers, and the state
    they leave is what Spark's state reader, run here, computes independently."""
    from pyspark.sql import functions as F

    from sparkpoint.checkpoint.layout import Checkpoint
    from sparkpoint.checkpoint.rocksdb_state import HDFS_PROVIDER
    from sparkpoint.spark.session import PROVIDER_CONF

    url, _logs = cluster
    keys = [f"k{n:06d}" for n in range(4000)]
    home, job, events_dir = _snapshot_of_key_counts(spark, tmp_path, monkeypatch,
                                                    HDFS_PROVIDER, keys + keys[:300])
    counts = {key: 2 if index < 300 else 1 for index, key in enumerate(keys)}

    pruned = sparkpoint(home, "snapshot", "prune", "k1", "k1-pruned", "--operator",
                        "key_counts", "--where", "key < 'k001000'", "--master", url,
                        "--json", timeout=600)
    assert pruned.code == 0, pruned.err[-3000:]
    assert pruned.json()["rewritten_by"] == "spark_tasks"
    assert len(_task_executors(events_dir, "sparkpoint:prune", "")) == 2
    kept = {key: n for key, n in counts.items() if key >= "k001000"}
    assert _state_keys(spark, home, "k1-pruned", "key_counts") == Counter(
        (key,) for key in kept)

    # Into 3 partitions from the pruned snapshot: each old partition's records hashed and
    # spilled by one task, each new partition's file written by another.
    moved = sparkpoint(home, "run", str(job), "--job", "keys-3", "--from-snapshot", "k1-pruned",
                       "--master", url, "--conf", "spark.executor.memory=512m",
                       "--conf", f"{PROVIDER_CONF}={HDFS_PROVIDER}",
                       "--conf", "spark.sql.shuffle.partitions=3",
                       "--param", f"input={tmp_path / 'in'}", "--until-caught-up", timeout=900)
    assert moved.code == 0, moved.err[-3000:]
    assert len(_task_executors(events_dir, "sparkpoint:keys-3", "hdfs_repartition.py")) == 2
    ckpt = Checkpoint(home.checkpoint_dir("keys-3"))
    state = (spark.read.format("statestore")
             .option("batchId", ckpt.require_latest_committed_batch()).load(str(ckpt.root)))
    rows = state.select("partition_id", F.expr("pmod(hash(key.*), 3)").alias("want"),
                        "key.key", "value.count").collect()
    assert Counter((r.key, r["count"]) for r in rows) == Counter(kept.items())
    assert all(r.partition_id == r.want for r in rows)


def test_rocksdb_prune_runs_as_jvm_tasks_on_both_workers(
    cluster: tuple[str, Path], spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """RocksDB state pruned on the cluster: sparkpoint's jar reaches both executors, each
    removes its partitions' keys with the RocksDB Spark ships (``RocksDbKeyRemoval``), and
    the state left is what Spark's state reader, run here, computes independently."""
    from sparkpoint import api
    from sparkpoint.checkpoint.rocksdb_state import ROCKSDB_PROVIDER

    url, _logs = cluster
    keys = [f"k{n:06d}" for n in range(4000)]
    home, _job, events_dir = _snapshot_of_key_counts(spark, tmp_path, monkeypatch,
                                                     ROCKSDB_PROVIDER, keys)

    pruned = sparkpoint(home, "snapshot", "prune", "k1", "k1-pruned", "--operator",
                        "key_counts", "--where", "key >= 'k002500'", "--master", url,
                        "--json", timeout=600)
    assert pruned.code == 0, pruned.err[-3000:]
    assert pruned.json()["rewritten_by"] == "spark_tasks"
    assert pruned.json()["rows_removed"] == 1500
    # The stage's call site names the class: its tasks, not Spark's rewriter's.
    assert len(_task_executors(events_dir, "sparkpoint:prune", "RocksDbKeyRemoval")) == 2
    assert _state_keys(spark, home, "k1-pruned", "key_counts") == Counter(
        (key,) for key in keys if key < "k002500")
    assert api.snapshot_verify(home, "k1-pruned") == []
