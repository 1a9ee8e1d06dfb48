"""A home on S3 (moto's server on loopback, Spark through s3a) and on HDFS (a
MiniDFSCluster): jobs run with their checkpoint in the home, are snapshotted and continued
from the snapshot with nothing lost; the job's lock is taken in the home itself."""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import json
import re
import shutil
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from sparkpoint import api
from sparkpoint.checkpoint.rocksdb_state import HDFS_PROVIDER, ROCKSDB_PROVIDER
from sparkpoint.crash_points import CRASH_ENV, CRASH_EXIT_CODE
from sparkpoint.storage.fileio import join
from sparkpoint.storage.home import Home
from sparkpoint.storage.stores import file_io
from sparkpoint.testing import Click, expected_hourly_counts, output_rows, write_clicks
from tests.conftest import EXAMPLES, SHUFFLE_PARTITIONS, s3a_jars
from tests.support.cli import sparkpoint, wait_for
from tests.support.cli import sparkpoint as run_cli
from tests.support.s3 import S3Server

JOB = EXAMPLES / "clicks_job.py"
TIMERS = Path(__file__).resolve().parents[1] / "data" / "jobs" / "timers.py"
pytestmark = pytest.mark.spark


def _s3a_jars() -> str:
    return s3a_jars()


def _run_args(job: str, inp: Path, out: Path) -> list[str]:
    return ["run", str(JOB), "--job", job, "--param", f"input={inp}", "--param",
            f"output={out}", "--param", "files_per_batch=1", "--conf",
            f"spark.sql.shuffle.partitions={SHUFFLE_PARTITIONS}", "--conf",
            f"spark.jars={_s3a_jars()}", "--until-caught-up"]


@pytest.mark.parametrize(("cache_deleted", "provider"),
                         [(False, HDFS_PROVIDER), (True, ROCKSDB_PROVIDER)],
                         ids=["cache-kept-hdfs-provider", "cache-deleted-rocksdb"])
def test_job_with_its_home_on_s3_runs_snapshots_and_continues(
    spark: object, s3_server: S3Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    cache_deleted: bool, provider: str,
) -> None:
    """With ``cache_deleted`` every local working copy is deleted before every command: the
    home is the truth, so the results are the same. The state's files are copied inside
    the store by the snapshot and by the start, whatever the state store provider."""
    bucket = s3_server.new_bucket()
    monkeypatch.setenv("SPARKPOINT_SCRATCH", str(tmp_path / "machine_a"))
    home = Home.resolve(f"s3://{bucket}/home")

    def sparkpoint(_home: Home, *args: str, env: dict[str, str] | None = None) -> Any:
        if cache_deleted:
            for machine in ("machine_a", "machine_b"):
                shutil.rmtree(tmp_path / machine, ignore_errors=True)
        return run_cli(home, *args, env=env)

    inp = tmp_path / "in"
    events = write_clicks(inp, range(0, 3))
    first = sparkpoint(home, *_run_args("v1", inp, tmp_path / "out1"), "--conf",
                       f"spark.sql.streaming.stateStore.providerClass={provider}")
    assert first.code == 0, first.err
    # Spark wrote the checkpoint in the bucket (s3a), sparkpoint the job record beside it.
    keys = s3_server.keys(bucket, "home/jobs/v1/")
    assert "home/jobs/v1/job.json" in keys
    assert any(key.startswith("home/jobs/v1/checkpoint/commits/") for key in keys)
    assert any(key.startswith("home/jobs/v1/checkpoint/state/") for key in keys)
    # Of the job's lease only its newest generation stays, let go by the run.
    leases = [key for key in keys if key.startswith("home/jobs/v1/lease/")]
    assert len(leases) == 1, leases
    assert json.loads(s3_server.client().get_object(
        Bucket=bucket, Key=leases[0])["Body"].read())["released"]

    shown = sparkpoint(home, "jobs", "show", "v1", "--json")
    assert shown.code == 0, shown.err
    last_batch = shown.json()["batch"]
    created = sparkpoint(home, "snapshot", "create", "v1", "s1", "--json")
    assert created.code == 0, created.err
    assert created.json()["batch_id"] == last_batch
    assert any(key.startswith("home/snapshots/") for key in s3_server.keys(bucket, "home/"))
    _assert_state_copied_inside_the_store(s3_server, bucket, "v1", "s1",
                                          tmp_path / "machine_a" / "files",
                                          ".sst" if provider == ROCKSDB_PROVIDER else ".delta")

    # Continued from another machine: a fresh local working copy of the same home.
    events += write_clicks(inp, range(3, 6))
    if cache_deleted:
        _start_refused_when_a_copied_file_changed(s3_server, bucket, "s1", lambda: sparkpoint(
            home, *_run_args("v2", inp, tmp_path / "out2"), "--from-snapshot", "s1",
            env={"SPARKPOINT_SCRATCH": str(tmp_path / "machine_b")}),
            lambda: sparkpoint(home, "snapshot", "verify", "s1"))
    second = sparkpoint(home, *_run_args("v2", inp, tmp_path / "out2"), "--from-snapshot", "s1",
                        env={"SPARKPOINT_SCRATCH": str(tmp_path / "machine_b")})
    assert second.code == 0, second.err
    # The start copied the snapshot's state inside the store: none of it came to machine b.
    fetched = [str(p) for p in (tmp_path / "machine_b").rglob("*") if p.suffix in
               (".sst", ".zip", ".changelog", ".delta", ".snapshot")]
    assert not fetched, f"state files passed through the starting machine: {fetched}"
    listed = sparkpoint(home, "jobs", "list", "--json")
    assert listed.code == 0, listed.err
    batches = {row["name"]: row["batch"] for row in listed.json()}
    assert batches["v1"] == last_batch and batches["v2"] > last_batch
    assert set(batches) == {"v1", "v2"}

    combined = output_rows(spark, tmp_path / "out1") + output_rows(spark, tmp_path / "out2")  # type: ignore[arg-type]
    expected = expected_hourly_counts(events)
    assert expected, "no window closes: the test input is too small"
    assert combined == expected


def _assert_state_copied_inside_the_store(server: S3Server, bucket: str, job: str,
                                          snapshot: str, cache: Path, kind: str) -> None:
    """The snapshot's state files were copied by the store (CopyObject), not through
    sparkpoint: each carries the SHA-256 the store computed, equal to the SHA-256 of the
    job's own file computed here, and no SST came to this machine."""
    client = server.client()
    manifest = json.loads(client.get_object(
        Bucket=bucket, Key=f"home/snapshots/{snapshot}/manifest.json")["Body"].read())
    copied = [entry for entry in manifest["files"] if entry.get("etag")]
    assert any(entry["path"].endswith(kind) for entry in copied), manifest["files"]
    for entry in copied:
        assert entry["path"].startswith("checkpoint/state/") and entry["xxh3_128"] is None
        rel = entry["path"][len("checkpoint/"):]
        body = client.get_object(Bucket=bucket,
                                 Key=f"home/jobs/{job}/checkpoint/{rel}")["Body"].read()
        assert entry["sha256"] == base64.b64encode(hashlib.sha256(body).digest()).decode()
        assert entry["bytes"] == len(body)
    fetched = [p.name for p in cache.rglob(f"*{kind}")] if cache.is_dir() else []
    assert not fetched, f"state files passed through this machine: {fetched}"


def _start_refused_when_a_copied_file_changed(server: S3Server, bucket: str, snapshot: str,
                                              start: Any, verify: Any) -> None:
    """One of the snapshot's state files changed in the store, same size: the start copies
    it inside the store and finds the SHA-256 of the copy differ from the one recorded, so
    it stops with one clear line, and ``snapshot verify`` (which reads the store) names
    the file; the file put back, the next start of the same job name rolls back what the
    refused one left."""
    client = server.client()
    manifest = json.loads(client.get_object(
        Bucket=bucket, Key=f"home/snapshots/{snapshot}/manifest.json")["Body"].read())
    victim = max((entry for entry in manifest["files"] if entry.get("sha256")),
                 key=lambda entry: entry["bytes"])
    key = f"home/snapshots/.files/etag/{victim['etag']}-{victim['bytes']}"
    original = client.get_object(Bucket=bucket, Key=key)["Body"].read()
    client.put_object(Bucket=bucket, Key=key, Body=bytes([original[0] ^ 0xFF]) + original[1:])
    refused = start()
    assert refused.code == 3, refused.err
    assert "SNAPSHOT_DAMAGED" in refused.err and "corrupted" in refused.err, refused.err
    assert "Traceback" not in refused.err
    verified = verify()
    assert verified.code == 3 and victim["path"] in verified.out, verified.out + verified.err
    client.put_object(Bucket=bucket, Key=key, Body=original)
    assert verify().code == 0


def _all_windows(clicks: list[Click]) -> Counter[tuple[object, ...]]:
    """Every hourly window of the input, closed or not: what a drained job has emitted."""
    return expected_hourly_counts(clicks, delay=-dt.timedelta(days=365))


def test_job_with_its_home_on_hdfs_runs_snapshots_continues_takes_a_startpoint_and_drains(
    spark: object, hdfs_server: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SPARKPOINT_SCRATCH", str(tmp_path / "scratch"))
    home = Home.resolve(join(hdfs_server.new_dir(), "home"))
    inp = tmp_path / "in"

    def run(job: str, out: str, **options: Any) -> None:
        api.run(home, JOB, job, params={"input": str(inp), "output": str(tmp_path / out),
                                        "files_per_batch": "1"},
                until_caught_up=True, spark=spark, **options)  # type: ignore[arg-type]

    def out_rows() -> Counter[tuple[object, ...]]:
        return output_rows(spark, tmp_path / "out1") + output_rows(spark, tmp_path / "out2")  # type: ignore[arg-type]

    events = write_clicks(inp, range(0, 3))
    run("v1", "out1")
    in_hdfs = file_io(home.location).walk_sizes(home.checkpoint_location("v1"))
    assert any(rel.startswith("commits/") for rel in in_hdfs)
    assert any(rel.startswith("state/") for rel in in_hdfs)
    snapshot = api.snapshot_create(home, "v1", "s1")
    assert snapshot.job == "v1"
    # Only the state version the snapshot holds came down to this machine (its cache of
    # immutable state files); nothing else of the job is kept here.
    zips_there = {rel.rsplit("/", 1)[1] for rel in in_hdfs if rel.endswith(".zip")}
    zips_here = {path.name for path in (tmp_path / "scratch").rglob("*.zip")}
    assert zips_here == {f"{snapshot.batch_id + 1}.zip"} and len(zips_there) > 1
    assert not list((tmp_path / "scratch").rglob("job.json"))

    events += write_clicks(inp, range(3, 6))
    run("v2", "out2", from_snapshot="s1")
    assert out_rows() == expected_hourly_counts(events)

    # A backlog the continued job skips with a startpoint (applied at its next start), then
    # fresh input it reads.
    write_clicks(inp, range(6, 8))
    assert api.startpoint_set(home, "v2", "clicks", "latest").stored
    run("v2", "out2")
    assert api.startpoint_list(home, "v2") == {}
    assert out_rows() == expected_hourly_counts(events)
    events += write_clicks(inp, range(8, 10))
    run("v2", "out2")

    drained = api.drain(home, "v2", snapshot="d1", spark=spark)  # type: ignore[arg-type]
    assert drained.residual == []
    assert {op.name: op.rows for op in drained.operators} == {"hourly_counts": 0,
                                                              "dedup_clicks": 0}
    assert api.job_view(home, "v2").status == "drained"
    assert [m.name for m in api.snapshot_list(home, "v2")] == ["d1"]

    # Every window of the clicks the jobs read (not the skipped backlog), computed here.
    assert out_rows() == _all_windows(events)


def test_start_from_a_snapshot_cut_off_after_its_upload_is_rolled_back_and_rebuilt(
    spark: object, hdfs_server: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SPARKPOINT_SCRATCH", str(tmp_path / "machine_a"))
    home = Home.resolve(join(hdfs_server.new_dir(), "home"))
    inp = tmp_path / "in"
    params = {"input": str(inp), "output": str(tmp_path / "out1"), "files_per_batch": "1"}
    events = write_clicks(inp, range(0, 3))
    api.run(home, JOB, "v1", params=params, until_caught_up=True, spark=spark)  # type: ignore[arg-type]
    api.snapshot_create(home, "v1", "s1")
    events += write_clicks(inp, range(3, 5))

    point = "restore.published"
    crashed = sparkpoint(home, "run", str(JOB), "--job", "v2", "--from-snapshot", "s1",
                         "--param", f"input={inp}", "--param", f"output={tmp_path / 'out2'}",
                         "--param", "files_per_batch=1", "--until-caught-up",
                         env={CRASH_ENV: point})
    assert crashed.code == CRASH_EXIT_CODE, crashed.err
    assert f"crash point {point}" in crashed.err
    # The checkpoint reached HDFS, the record naming it did not: no job v2 yet.
    assert file_io(home.location).walk_sizes(home.checkpoint_location("v2"))
    assert [view.record.name for view in api.jobs_list(home)] == ["v1"]

    # The same start again, from another machine: rolled back, rebuilt, run.
    monkeypatch.setenv("SPARKPOINT_SCRATCH", str(tmp_path / "machine_b"))
    other = Home.resolve(home.location)
    echoed: list[str] = []
    api.run(other, JOB, "v2", params={**params, "output": str(tmp_path / "out2")},
            from_snapshot="s1", until_caught_up=True, spark=spark,  # type: ignore[arg-type]
            echo=echoed.append)
    assert any("took over the lease" in line for line in echoed), echoed
    assert [view.record.name for view in api.jobs_list(other)] == ["v1", "v2"]
    combined = output_rows(spark, tmp_path / "out1") + output_rows(spark, tmp_path / "out2")  # type: ignore[arg-type]
    assert combined == expected_hourly_counts(events)

    deleted = api.jobs_delete(other, "v2")
    assert deleted["deleted"] and deleted["checkpoint_bytes"] > 0
    assert not file_io(home.location).walk_sizes(other.job_url("v2"))
    assert [view.record.name for view in api.jobs_list(home)] == ["v1"]


def test_past_snapshots_and_rehearsal_on_an_s3_home_from_fresh_machines(
    spark: object, s3_server: S3Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--at`` with a batch's time as ``jobs show`` lists it on another machine takes that
    batch, and rehearse reads the home. The times are Spark's own batch times: the batches
    of a job on S3 are told apart whatever second the store stamps their commits with (on
    main the S3 modification times were used, to the second). Before that, the commit
    times were the download times of the machine asking (so '--at' a commit time found no
    batch), and rehearse read only the local working copy (a machine that had not run the
    job got UNKNOWN_JOB)."""
    bucket = s3_server.new_bucket()
    home = Home.resolve(f"s3://{bucket}/home")
    inp = tmp_path / "in"
    write_clicks(inp, range(0, 3))

    def on(machine: str, *args: str) -> Any:
        return sparkpoint(home, *args, env={"SPARKPOINT_SCRATCH": str(tmp_path / machine)})

    assert on("a", *_run_args("v1", inp, tmp_path / "out1")).code == 0
    shown = on("b", "jobs", "show", "v1", "--json")
    assert shown.code == 0, shown.err
    held = {entry["batch"]: entry["batch_time"]
            for entry in shown.json()["snapshottable_batches"]}
    assert 1 in held and max(held) > 1, held

    at = on("b", "snapshot", "create", "v1", "s1", "--at", held[1], "--json")
    assert at.code == 0, at.err[-2000:]
    assert at.json()["batch_id"] == 1

    # The rehearsal works in the store (its executors could be on other hosts): cut off
    # after its first batch, it leaves its scratch there, which the next rehearsals on this
    # machine remove (its process is gone). Two rehearse at once, each in a scratch of its
    # own that the other's cleanup leaves alone (its process is alive): both compare equal;
    # kept with --keep, one's scratch holds its checkpoint and output, written through s3a,
    # and the other's is gone.
    rehearse = ("rehearse", str(JOB), "--against", "v1", "--from-snapshot", "s1",
                "--param", f"input={inp}", "--param", f"output={tmp_path / 'unused'}",
                "--conf", f"spark.jars={_s3a_jars()}", "--fail-on-diff", "--json")
    scratch = f"s3://{bucket}/home/.scratch/rehearse"
    cut = sparkpoint(home, *rehearse, env={"SPARKPOINT_SCRATCH": str(tmp_path / "c"),
                                           CRASH_ENV: "rehearse.batch_replayed"})
    assert cut.code == CRASH_EXIT_CODE, cut.err[-3000:]
    left = file_io(scratch).list_names(scratch)
    assert len(left) == 1, left
    def apart(machine: str, *args: str) -> Any:  # a process of its own, as two users run
        return sparkpoint(home, *args, env={"SPARKPOINT_SCRATCH": str(tmp_path / machine)},
                          process=True)

    with ThreadPoolExecutor(2) as pool:
        first = pool.submit(apart, "c", *rehearse, "--keep")
        # The second starts (and cleans up) once the first's scratch is in the store.
        wait_for(lambda: first.done() or set(file_io(scratch).list_names(scratch)) - set(left),
                 240, "the first rehearsal's scratch")
        second = pool.submit(apart, "d", *rehearse)
        rehearsed, other = first.result(), second.result()
    for done in (rehearsed, other):
        assert done.code == 0, done.err[-3000:]
        assert done.json()["equal"], done.out
    removal = f"removed {scratch}/{left[0]}, left by an interrupted rehearsal"
    assert removal in rehearsed.err + other.err
    kept = re.search(r"scratch kept: (\S+)", rehearsed.err)
    assert kept and kept.group(1).startswith(scratch + "/"), rehearsed.err
    written = file_io(scratch).walk_sizes(kept.group(1))
    assert any(rel.startswith("home/jobs/rehearsal/checkpoint/commits/") for rel in written)
    assert any(rel.startswith("output/_spark_metadata/") for rel in written), sorted(written)
    assert file_io(scratch).list_names(scratch) == [kept.group(1).rsplit("/", 1)[1]]


def test_transform_with_state_started_from_a_snapshot_on_an_hdfs_home_runs_on_another_machine(
    spark: object, hdfs_server: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """transformWithState names its schema files by absolute path in its operator metadata
    v2. A checkpoint built from a snapshot for a home on HDFS names them at the home's URL,
    so another machine runs it. On main they named the first machine's working copy: with
    that copy gone, Spark could not read the schemas."""
    monkeypatch.setenv("SPARKPOINT_SCRATCH", str(tmp_path / "machine_a"))
    home = Home.resolve(join(hdfs_server.new_dir(), "home"))
    clicks = write_clicks(tmp_path / "in", range(0, 3))
    params = {"mode": "EventTime", "input": str(tmp_path / "in"),
              "output": str(tmp_path / "out1")}
    api.run(home, TIMERS, "v1", params=params, until_caught_up=True,
            spark=spark)  # type: ignore[arg-type]
    api.snapshot_create(home, "v1", "s1")
    v2 = {**params, "output": str(tmp_path / "out2")}
    api.run(home, TIMERS, "v2", params=v2, from_snapshot="s1", until_caught_up=True,
            spark=spark)  # type: ignore[arg-type]
    io = file_io(home.location)
    v2_metadata = [rel for rel in io.walk_sizes(home.checkpoint_location("v2"))
                   if "/_metadata/v2/" in rel]
    assert v2_metadata
    text = io.read_bytes(join(home.checkpoint_location("v2"), v2_metadata[0])).decode()
    assert f"{home.checkpoint_location('v2')}/state/" in text
    assert "machine_a" not in text

    shutil.rmtree(tmp_path / "machine_a")
    monkeypatch.setenv("SPARKPOINT_SCRATCH", str(tmp_path / "machine_b"))
    elsewhere = Home.resolve(home.location)
    clicks += write_clicks(tmp_path / "in", range(3, 5))
    api.run(elsewhere, TIMERS, "v2", params=v2, until_caught_up=True,
            spark=spark)  # type: ignore[arg-type]
    api.drain(elsewhere, "v2", spark=spark)  # type: ignore[arg-type]
    expected = Counter((user, n) for user, n in Counter(c.user for c in clicks).items())
    assert output_rows(spark, tmp_path / "out2") == expected  # type: ignore[arg-type]
