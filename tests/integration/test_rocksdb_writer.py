"""``snapshot prune`` of RocksDB state in Spark tasks (sparkpoint's ``RocksDbKeyRemoval``: the
RocksDB Spark ships, rocksdbjni, opens the version with the store's own OPTIONS, deletes the
keys Spark's ``NoPrefixKeyStateEncoder`` stored, compacts and packs the version as Spark's
``RocksDBFileManager`` does): the pruned state, read back by
Spark's state reader, is the original less exactly the keys Spark's reader selects, the same
as Spark's own state rewriter and the driver's rewrite give; a version made of changelogs
goes to Spark's rewriter instead.

Spark fact pinned here: Spark 4.3 opens RocksDB state stores with rocksdbjni 9.8.4
(``RocksDB.rocksdbVersion()``, null until ``RocksDB.loadLibrary()``), and rocksdict 0.3.29
writes with RocksDB 9.8.4 too (its OPTIONS files say so): the files sparkpoint's RocksDB
writer (checkpoint/rocksdb_writer.py, the repartition's) writes are written by the RocksDB
that reads them.
"""

from __future__ import annotations

import json
import random
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from sparkpoint import api
from sparkpoint.checkpoint import rocksdb_writer
from sparkpoint.checkpoint.providers import ROCKSDB
from sparkpoint.checkpoint.rocksdb_state import ROCKSDB_PROVIDER, read_zip_metadata
from sparkpoint.snapshot import prune
from sparkpoint.snapshot.store import open_snapshot_store
from sparkpoint.spark import own_jar, state_prune
from sparkpoint.spark.version import spark_rocksdb_version
from sparkpoint.storage.home import Home
from tests.conftest import REPO

JOB = REPO / "tests" / "data" / "jobs" / "typed_keys.py"
CHANGELOG = "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled"
WHERE = "i >= 0 OR tags IS NULL"
pytestmark = pytest.mark.spark


def _rows(count: int, seed: int) -> list[dict[str, Any]]:
    pick = random.Random(seed)
    return [{
        "s": pick.choice(["ana", "bo", "ç-ü", "", "long " * 9]) + str(pick.randint(0, 999)),
        "i": pick.randint(-5, 5), "l": pick.choice([0, 1 << 40, -(1 << 50)]),
        "d": pick.choice([0.5, -0.0, 1e300]), "m": pick.choice(["1.5", "-99999.999"]),
        "day": f"2026-01-{pick.randint(1, 28):02d}", "ts": "2026-01-01T00:00:00Z",
        "b": pick.random() < 0.5, "nested": pick.choice([{"name": "x", "n": 1}, None]),
        "tags": pick.choice([["a"], ["a", None], None]), "maybe": pick.choice([None, "x"]),
    } for _ in range(count)]


def _keys(spark: Any, checkpoint: str, batch: int, where: str | None = None) -> Counter[str]:
    frame = spark.read.format("statestore").option("batchId", batch).load(checkpoint)
    if where is not None:
        frame = frame.select("key", "key.*").filter(where)
    return Counter(json.dumps(row.key.asDict(recursive=True), default=str, sort_keys=True)
                   for row in frame.collect())


def _snapshot_keys(spark: Any, home: Home, name: str) -> Counter[str]:
    batch = api.snapshot_show(home, name).batch_id
    return _keys(spark, str(open_snapshot_store(home).checkpoint_path(name)), batch)


def _typed_snapshot(spark: Any, home: Home, tmp_path: Path, conf: dict[str, str]) -> None:
    """The typed-key counts of 6,000 rows in 8 RocksDB partitions, snapshotted as 's1'."""
    inp = tmp_path / "in"
    inp.mkdir()
    for seed in (1, 2):
        (inp / f"{seed}.json").write_text(
            "\n".join(json.dumps(row) for row in _rows(3000, seed)) + "\n")
    api.run(home, JOB, "typed", params={"input": str(inp)},
            conf={"spark.sql.streaming.stateStore.providerClass": ROCKSDB_PROVIDER,
                  "spark.sql.shuffle.partitions": "8", **conf},
            until_caught_up=True, spark=spark)
    api.snapshot_create(home, "typed", "s1")


def _watch_rocksdb_tasks(monkeypatch: pytest.MonkeyPatch, watched: Any) -> None:
    """Prune's RocksDB removal by Spark tasks replaced by ``watched`` (in the provider's row
    of prune's table, where prune looks it up)."""
    row = prune._PRUNING[ROCKSDB.class_name]
    monkeypatch.setitem(prune._PRUNING, ROCKSDB.class_name, replace(row, by_tasks=watched))


def test_rocksdict_writes_with_the_rocksdb_spark_reads_state_with(spark: Any) -> None:
    assert spark_rocksdb_version(spark) == (9, 8, 4)
    assert rocksdb_writer.writer_version() == (9, 8, 4)


def test_rocksdb_prune_by_tasks_equals_sparks_rewriter_and_the_driver(
    spark: Any, home: Home, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _typed_snapshot(spark, home, tmp_path, {})
    manifest = api.snapshot_show(home, "s1")
    before = _snapshot_keys(spark, home, "s1")
    matching = _keys(spark, str(open_snapshot_store(home).checkpoint_path("s1")),
                     manifest.batch_id, WHERE)
    assert matching and len(matching) < len(before) and len(before) > 1000

    taken: list[str] = []
    native = prune._prune_rocksdb_by_tasks

    def watched(*args: Any, **kwargs: Any) -> Any:
        result = native(*args, **kwargs)
        taken.append("writer" if result is not None else "other")
        return result

    _watch_rocksdb_tasks(monkeypatch, watched)
    by_writer = api.snapshot_prune(home, "s1", "by-writer", "typed_counts", WHERE, spark=spark)
    # A session whose jar lacks the removal task: Spark's state rewriter does it.
    monkeypatch.setattr(own_jar, "loadable",
                        lambda _spark, name: name != state_prune.ROCKSDB_KEY_REMOVAL)
    by_rewriter = api.snapshot_prune(home, "s1", "by-rewriter", "typed_counts", WHERE,
                                     spark=spark)
    # A caller's session without sparkpoint's jar, keys Spark's rewriter cannot select.
    monkeypatch.setattr(own_jar, "loadable", lambda _spark, _name: False)
    monkeypatch.setattr(prune, "partition_key_fields", lambda *_args: [])
    by_driver = api.snapshot_prune(home, "s1", "by-driver", "typed_counts", WHERE, spark=spark)
    assert taken == ["writer", "other", "other"]

    for result, way in ((by_writer, "spark_tasks"), (by_rewriter, "spark_tasks"),
                        (by_driver, "driver")):
        assert result.rewritten_by == way
        assert _snapshot_keys(spark, home, result.new_snapshot) == before - matching
        assert result.rows_removed == sum(matching.values())
        assert result.rows_after == sum(before.values()) - sum(matching.values())
        assert api.snapshot_verify(home, result.new_snapshot) == []
    # Each rewritten version records its keys as Spark's commit does (Spark's load takes
    # the count from there), and its SSTs hold no deleted key: no larger than Spark's own.
    pruned = open_snapshot_store(home).checkpoint_path("by-writer")
    zips = sorted(Path(pruned).glob(f"state/0/*/{manifest.batch_id + 1}.zip"))
    assert len(zips) == 8
    assert sum(read_zip_metadata(z)["numKeys"] for z in zips) == result.rows_after
    assert by_writer.bytes_after <= by_rewriter.bytes_after


def test_rocksdb_prune_counts_the_keys_when_spark_tracked_no_count(
    spark: Any, home: Home, tmp_path: Path
) -> None:
    # With trackTotalNumberOfRows off, Spark records numKeys -1 in each version (RocksDB
    # then counts nothing on load): the writer counts the keys itself before and after.
    _typed_snapshot(spark, home, tmp_path,
                    {"spark.sql.streaming.stateStore.rocksdb.trackTotalNumberOfRows": "false"})
    manifest = api.snapshot_show(home, "s1")
    original = open_snapshot_store(home).checkpoint_path("s1")
    zips = sorted(Path(original).glob(f"state/0/*/{manifest.batch_id + 1}.zip"))
    assert zips and {read_zip_metadata(z)["numKeys"] for z in zips} == {-1}
    before = _snapshot_keys(spark, home, "s1")
    matching = _keys(spark, str(original), manifest.batch_id, WHERE)
    assert matching and len(matching) < len(before)

    result = api.snapshot_prune(home, "s1", "pruned", "typed_counts", WHERE, spark=spark)
    assert result.rewritten_by == "spark_tasks"
    assert result.rows_removed == sum(matching.values())
    assert _snapshot_keys(spark, home, "pruned") == before - matching
    assert api.snapshot_verify(home, "pruned") == []


def test_rocksdb_changelog_versions_are_pruned_by_sparks_rewriter(
    spark: Any, home: Home, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _typed_snapshot(spark, home, tmp_path, {CHANGELOG: "true"})
    pruned_dir = Path(open_snapshot_store(home).checkpoint_path("s1"))
    assert list(pruned_dir.glob("state/0/*/*.changelog")), "no changelog was written"
    before = _snapshot_keys(spark, home, "s1")
    matching = _keys(spark, str(pruned_dir), api.snapshot_show(home, "s1").batch_id, WHERE)
    declined: list[bool] = []
    native = prune._prune_rocksdb_by_tasks

    def watched(*args: Any, **kwargs: Any) -> Any:
        result = native(*args, **kwargs)
        declined.append(result is None)
        return result

    _watch_rocksdb_tasks(monkeypatch, watched)
    result = api.snapshot_prune(home, "s1", "pruned", "typed_counts", WHERE, spark=spark)
    assert declined == [True] and result.rewritten_by == "spark_tasks"
    assert _snapshot_keys(spark, home, "pruned") == before - matching
    assert api.snapshot_verify(home, "pruned") == []


def test_rocksdb_state_moved_to_other_partitions_sits_where_spark_looks(
    spark: Any, home: Home, tmp_path: Path
) -> None:
    """A start into 3 partitions from a snapshot of 5: every key of the dedupe (users whose
    names are 1 to 40 characters long, so keys of many lengths) sits where Spark's hash
    partitioning puts it, read back by Spark's state reader, none lost or doubled; users
    already seen are not emitted again, new ones once."""
    from pyspark.sql import functions as F

    from sparkpoint.checkpoint.layout import Checkpoint

    def write(name: str, users: list[str]) -> None:
        rows = [{"event_id": f"{name}-{i}", "user": user, "url": "/",
                 "ts": "2026-01-01T00:00:00Z"} for i, user in enumerate(users)]
        (tmp_path / "in").mkdir(exist_ok=True)
        tmp = tmp_path / "in" / f".{name}.tmp"
        tmp.write_text("\n".join(json.dumps(row) for row in rows) + "\n")
        tmp.rename(tmp_path / "in" / f"{name}.json")

    first = [("u" * (i % 40 + 1)) + str(i) for i in range(400)]
    write("a", first)
    prune_job = REPO / "tests" / "data" / "jobs" / "prune_kinds.py"

    def run(job: str, out: str, partitions: int, **kw: Any) -> None:
        api.run(home, prune_job, job,
                params={"kind": "dedupe", "input": str(tmp_path / "in"),
                        "output": str(tmp_path / out)},
                conf={"spark.sql.streaming.stateStore.providerClass": ROCKSDB_PROVIDER,
                      "spark.sql.shuffle.partitions": str(partitions)},
                until_caught_up=True, spark=spark, **kw)

    run("old", "out1", 5)
    api.snapshot_create(home, "old", "s1")
    before = _snapshot_keys(spark, home, "s1")
    second = first[::3] + [f"new-{i}" * (i % 5 + 1) for i in range(50)]
    write("b", second)
    said: list[str] = []
    run("new", "out2", 3, from_snapshot="s1", echo=said.append)
    assert any("keys rehashed" in line for line in said), said

    ckpt = Checkpoint(home.checkpoint_dir("new"))
    restored = min(ckpt.commit_ids())
    assert restored == api.snapshot_show(home, "s1").batch_id
    frame = (spark.read.format("statestore").option("batchId", restored)
             .load(str(ckpt.root)))
    placed = frame.select("partition_id", F.expr("pmod(hash(key.*), 3)").alias("want"),
                          "key").collect()
    assert placed and all(row.partition_id == row.want for row in placed)
    assert {row.partition_id for row in placed} == {0, 1, 2}
    assert _keys(spark, str(ckpt.root), restored) == before
    emitted = Counter(row.user for row in spark.read.parquet(str(tmp_path / "out2")).collect())
    assert emitted == Counter(user for user in second if user not in set(first))
