"""Checkpoint format v2 (``spark.sql.streaming.stateStore.checkpointFormatVersion=2``, the
format stateful real-time mode needs): RocksDB state files named ``<version>_<id>`` with the
commit log naming the id of each partition's version, and changelogs naming the files they
build on (their lineage). A snapshot takes exactly the files of the ids the commit names, and
a job started from it continues with nothing lost or counted twice, and a rehearsal from it
replays the old job's batches."""

from __future__ import annotations

import datetime as dt
import re
from collections import Counter
from pathlib import Path

import pytest

from sparkpoint import api
from sparkpoint.checkpoint.layout import CHECKPOINT_FORMAT_CONF, Checkpoint
from sparkpoint.checkpoint.retained import batch_time
from sparkpoint.snapshot.past import batch_at
from sparkpoint.snapshot.store import open_snapshot_store
from sparkpoint.storage.home import Home
from sparkpoint.testing import expected_hourly_counts, output_rows, write_clicks
from tests.support import spark_examples as ex
from tests.support.cli import sparkpoint

pytestmark = pytest.mark.spark
JOB = Path(__file__).resolve().parent.parent / "data" / "jobs" / "clicks_variants.py"
FORMAT_V2 = {"spark.sql.streaming.stateStore.checkpointFormatVersion": "2"}
CHANGELOG = "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled"
UNIQUE_NAME = re.compile(r"^\d+_[0-9a-f-]{36}\.(zip|changelog)$")


def test_a_format_v2_job_is_snapshotted_and_continued_from_the_snapshot(
    spark: object, home: Home, tmp_path: Path
) -> None:
    """With changelog checkpointing: the versions are changelogs named by their lineage."""
    conf = {**FORMAT_V2, CHANGELOG: "true"}
    first = write_clicks(tmp_path / "in", range(0, 4))
    params = {"input": str(tmp_path / "in"), "output": str(tmp_path / "out1")}
    api.run(home, JOB, "v1", params=params, conf=conf, until_caught_up=True,
            spark=spark)  # type: ignore[arg-type]
    committed = Checkpoint(home.checkpoint_dir("v1"))
    batch = committed.require_latest_committed_batch()
    ids = committed.commit(batch).state_unique_ids
    assert ids and all(len(partition) == 1 for op in ids.values() for partition in op)

    api.snapshot_create(home, "v1", "s1")
    taken = Checkpoint(open_snapshot_store(home).checkpoint_path("s1"))
    state_files = [p.name for p in taken.root.glob("state/*/[0-9]*/*") if p.is_file()
                   and p.name != "schema"]
    assert state_files and all(UNIQUE_NAME.match(name) or name.endswith(".crc")
                               for name in state_files), state_files
    # Only the files of the ids the commit names (and what they build on): every id in a
    # zip or changelog name is the commit's or one a kept changelog's lineage names.
    assert {name.split("_")[1].split(".")[0] for name in state_files
            if name.startswith(f"{batch + 1}_")} == {
        i for op in ids.values() for partition in op for i in partition}

    later = write_clicks(tmp_path / "in", range(4, 9))
    api.run(home, JOB, "v2", params={**params, "output": str(tmp_path / "out2")}, conf=conf,
            from_snapshot="s1", until_caught_up=True, spark=spark)  # type: ignore[arg-type]
    continued = Checkpoint(home.checkpoint_dir("v2"))
    assert continued.commit(continued.require_latest_committed_batch()).version == 2
    combined = output_rows(spark, tmp_path / "out1") + output_rows(
        spark, tmp_path / "out2")  # type: ignore[arg-type]
    assert combined == expected_hourly_counts(first + later)
    # Drained, it emits its open hours too.
    api.drain(home, "v2", spark=spark)  # type: ignore[arg-type]
    combined = output_rows(spark, tmp_path / "out1") + output_rows(
        spark, tmp_path / "out2")  # type: ignore[arg-type]
    assert combined == expected_hourly_counts(first + later, delay=-dt.timedelta(days=1))
    # A rehearsal from the snapshot against the old job, once that job read the same input:
    # the same job file makes the same rows, so the outputs compare equal.
    api.run(home, JOB, "v1", params=params, conf=conf, until_caught_up=True,
            spark=spark)  # type: ignore[arg-type]
    rehearsed = api.rehearse(home, JOB, "v1", from_snapshot="s1",
                             spark=spark).to_dict()  # type: ignore[arg-type]
    assert rehearsed["equal"] is True, rehearsed
    assert rehearsed["old_rows"] == rehearsed["new_rows"] > 0
    # Reading commands report what they can of such a job and snapshot.
    for args in (["jobs", "show", "v2"], ["snapshot", "show", "s1"], ["jobs", "list"]):
        shown = sparkpoint(home, *args)
        assert shown.code == 0 and "Traceback" not in shown.err, (args, shown.err)


def test_a_format_v2_snapshot_starts_a_job_with_other_partitions_in_format_v2(
    spark: object, home: Home, tmp_path: Path
) -> None:
    """Spark's own offline repartition moves the v2 state (with new ids) before the start.
    The new run gives no stateStore.checkpointFormatVersion (its session has the default,
    1): the snapshot's format is kept, by the repartition (run in the format of the
    snapshot's commit) and by the job (Spark continues a query in the format of its latest
    commit). On main the repartition ran in the session's format and Spark refused it
    (STATE_CHECKPOINT_FORMAT_VERSION_MISMATCH), failing the start. Without changelog
    checkpointing: every version is a zip."""
    first = write_clicks(tmp_path / "in", range(0, 3))
    params = {"input": str(tmp_path / "in"), "output": str(tmp_path / "out1")}
    api.run(home, JOB, "v1", params=params, conf={**FORMAT_V2, CHANGELOG: "false"},
            until_caught_up=True, spark=spark)  # type: ignore[arg-type]
    taken = api.snapshot_create(home, "v1", "s1").batch_id
    later = write_clicks(tmp_path / "in", range(3, 6))
    assert spark.conf.get(CHECKPOINT_FORMAT_CONF) == "1"  # type: ignore[attr-defined]
    api.run(home, JOB, "v2", params={**params, "output": str(tmp_path / "out2")},
            conf={CHANGELOG: "false", "spark.sql.shuffle.partitions": "3"},
            from_snapshot="s1", until_caught_up=True, spark=spark)  # type: ignore[arg-type]
    continued = Checkpoint(home.checkpoint_dir("v2"))
    # Spark's repartition batch, then the job's own batches over the new input.
    after = [batch for batch in continued.commit_ids() if batch > taken]
    assert len(after) > 1
    for batch in after:
        commit = continued.commit(batch)
        assert commit.version == 2, batch
        assert commit.state_unique_ids and all(
            len(partitions) == 3 for partitions in commit.state_unique_ids.values()), batch
    combined = output_rows(spark, tmp_path / "out1") + output_rows(
        spark, tmp_path / "out2")  # type: ignore[arg-type]
    assert combined == expected_hourly_counts(first + later)
    # Spark's repartition batch carries the time of the batch it repartitions: '--at' that
    # time takes the repartitioned batch (the newest with that time).
    repartitioned = after[0]
    moment = batch_time(continued.offsets(taken))
    assert batch_time(continued.offsets(repartitioned)) == moment
    assert batch_at("v2", continued, moment) == repartitioned


def test_a_snapshot_moves_a_job_to_format_v2_and_back_when_asked(
    spark: object, home: Home, tmp_path: Path
) -> None:
    """A job's own stateStore.checkpointFormatVersion, given at a start from a snapshot,
    moves its state between the formats (Spark alone would keep the commit's format)."""
    clicks = write_clicks(tmp_path / "in", range(0, 3))
    base = {"input": str(tmp_path / "in")}
    api.run(home, JOB, "v1", params={**base, "output": str(tmp_path / "out1")},
            conf={CHANGELOG: "true"}, until_caught_up=True, spark=spark)  # type: ignore[arg-type]
    api.snapshot_create(home, "v1", "s1")
    for step, (job, fmt) in enumerate((("two", "2"), ("one", "1")), start=2):
        clicks += write_clicks(tmp_path / "in", range(step + 1, step + 2))
        api.run(home, JOB, job, params={**base, "output": str(tmp_path / f"out{step}")},
                conf={CHANGELOG: "true", "spark.sql.streaming.stateStore.checkpointFormatVersion":
                      fmt}, from_snapshot=f"s{step - 1}", until_caught_up=True,
                spark=spark)  # type: ignore[arg-type]
        moved = Checkpoint(home.checkpoint_dir(job))
        commit = moved.commit(moved.require_latest_committed_batch())
        assert commit.version == int(fmt) and bool(commit.state_unique_ids) == (fmt == "2")
        api.snapshot_create(home, job, f"s{step}")
    combined = sum((output_rows(spark, tmp_path / f"out{i}")  # type: ignore[arg-type]
                    for i in (1, 2, 3)), Counter())
    assert combined == expected_hourly_counts(clicks)


AD_JOIN = Path(__file__).resolve().parent.parent / "data" / "jobs" / "spark_example_ad_join.py"


def test_a_format_v2_stream_stream_join_is_snapshotted_inspected_continued_and_moved(
    spark: object, home: Home, tmp_path: Path
) -> None:
    """The guide's join of ad impressions and clicks, four state stores a partition: in
    format v2 Spark 4.3's commit names one id per partition and store, in the order of the
    operator's metadata (left-keyToNumValues, left-keyWithIndexToValue, right-keyToNumValues,
    right-keyWithIndexToValue); the snapshot takes exactly those files. A job continues from
    it, and another moves the join's state to format v1 and back. Before: snapshots of v2
    joins and moves of joins to v2 were refused."""
    params = {"impressions": str(tmp_path / "impressions"), "clicks": str(tmp_path / "clicks"),
              "files_per_batch": "1"}
    written = [ex.write_ads(tmp_path / "impressions", tmp_path / "clicks", range(0, 3))]
    api.run(home, AD_JOIN, "v1", params={**params, "output": str(tmp_path / "out1")},
            conf=FORMAT_V2, until_caught_up=True, spark=spark)  # type: ignore[arg-type]
    committed = Checkpoint(home.checkpoint_dir("v1"))
    batch = committed.require_latest_committed_batch()
    [ids] = committed.commit(batch).state_unique_ids.values()
    stores = ["left-keyToNumValues", "left-keyWithIndexToValue", "right-keyToNumValues",
              "right-keyWithIndexToValue"]
    for partition, partition_ids in enumerate(ids):
        assert len(partition_ids) == 4
        for store, unique_id in zip(stores, partition_ids, strict=True):
            # Spark's own pairing of ids and stores: the id names a file of that store.
            found = list((committed.root / "state" / "0" / str(partition) / store).glob(
                f"{batch + 1}_{unique_id}.*"))
            assert found, (partition, store, unique_id)

    api.snapshot_create(home, "v1", "s1")
    taken = Checkpoint(open_snapshot_store(home).checkpoint_path("s1"))
    kept = {p.name.split("_")[1].split(".")[0] for p in taken.root.glob("state/0/*/*/*")
            if UNIQUE_NAME.match(p.name) and p.name.startswith(f"{batch + 1}_")}
    assert kept == {i for partition_ids in ids for i in partition_ids}
    # Read through the ids the commit names, store by store.
    [inspected] = api.snapshot_inspect(home, "s1").operators
    [shown] = api.snapshot_show(home, "s1").operators
    assert inspected.kind == "stream_stream_join" and inspected.rows == shown.rows > 0

    # A chain of jobs, each from the previous one's snapshot, over new input each time:
    # in format v2, then moved to v1, then back to v2 into 3 partitions (Spark's offline
    # repartition of the four stores), then drained.
    steps = (("v2", "2", 2), ("to-v1", "1", 2), ("back-to-v2", "2", 3))
    for number, (job, fmt, partitions) in enumerate(steps, start=2):
        written.append(ex.write_ads(tmp_path / "impressions", tmp_path / "clicks",
                                    range(number + 1, number + 2)))
        api.run(home, AD_JOIN, job, params={**params, "output": str(tmp_path / f"out{number}")},
                conf={"spark.sql.streaming.stateStore.checkpointFormatVersion": fmt,
                      "spark.sql.shuffle.partitions": str(partitions)},
                from_snapshot=f"s{number - 1}", until_caught_up=True,
                spark=spark)  # type: ignore[arg-type]
        moved = Checkpoint(home.checkpoint_dir(job))
        commit = moved.commit(moved.require_latest_committed_batch())
        assert commit.version == int(fmt), job
        unique = commit.state_unique_ids.values()
        assert all(len(op) == partitions and all(len(ids) == 4 for ids in op)
                   for op in unique), job
        api.snapshot_create(home, job, f"s{number}")
    drained = api.drain(home, "back-to-v2", spark=spark)  # type: ignore[arg-type]
    assert drained.residual == []
    impressions = [i for part in written for i in part[0]]
    clicks = [c for part in written for c in part[1]]
    combined = sum((output_rows(spark, tmp_path / f"out{i}")  # type: ignore[arg-type]
                    for i in (1, 2, 3, 4)), Counter())
    assert combined == ex.expected_ad_matches(impressions, clicks)


@pytest.mark.parametrize("fmt", ["1", "2"])
def test_rocksdb_changelog_state_moves_to_later_batch_numbers(
    spark: object, home: Home, tmp_path: Path, fmt: str
) -> None:
    """A start from a snapshot with new batch numbers (``--first-batch``; several snapshots of
    different batches move the same way) renumbers the state versions. With changelog
    checkpointing Spark writes its first zip only after several versions, so a young job's
    state is changelogs from version 1 on, which Spark replays onto the empty store: moved,
    they get an empty zip just below the first of them. In format v2 the versions are first
    given plain names, then new ids at the new version. Before: format v2 state was refused
    any move, and moved format v1 changelogs without a zip failed to load."""
    conf = {CHANGELOG: "true", "spark.sql.streaming.stateStore.checkpointFormatVersion": fmt}
    first = write_clicks(tmp_path / "in", range(0, 3))
    params = {"input": str(tmp_path / "in"), "output": str(tmp_path / "out1")}
    api.run(home, JOB, "v1", params=params, conf=conf, until_caught_up=True,
            spark=spark)  # type: ignore[arg-type]
    manifest = api.snapshot_create(home, "v1", "s1")
    taken = Checkpoint(open_snapshot_store(home).checkpoint_path("s1"))
    names = [p.name for p in taken.root.glob("state/*/[0-9]*/*") if p.is_file()]
    assert any(name.endswith(".changelog") for name in names)
    assert not any(name.endswith(".zip") for name in names), \
        "the job wrote a zip already: the test needs changelogs from version 1"

    later = write_clicks(tmp_path / "in", range(3, 6))
    moved_to = manifest.batch_id + 10
    api.run(home, JOB, "v2", params={**params, "output": str(tmp_path / "out2")}, conf=conf,
            from_snapshot="s1", first_batch=moved_to, until_caught_up=True,
            spark=spark)  # type: ignore[arg-type]
    continued = Checkpoint(home.checkpoint_dir("v2"))
    assert continued.require_latest_committed_batch() > moved_to
    assert continued.commit(moved_to).version == int(fmt)
    combined = output_rows(spark, tmp_path / "out1") + output_rows(
        spark, tmp_path / "out2")  # type: ignore[arg-type]
    assert combined == expected_hourly_counts(first + later)
