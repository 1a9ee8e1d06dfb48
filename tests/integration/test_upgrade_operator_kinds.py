"""Each stateful operator kind keeps its state through an upgrade that inserts an operator
before it (so Spark's operator ids shift): the combined output equals an uninterrupted run."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from sparkpoint import api
from sparkpoint.storage.home import Home
from sparkpoint.testing import output_rows, write_clicks

pytestmark = pytest.mark.spark
JOB = Path(__file__).resolve().parent.parent / "data" / "jobs" / "kinds.py"
Reference = Callable[[str], Counter[tuple[Any, ...]]]


def _params(root: Path, kind: str, version: str, out: str) -> dict[str, str]:
    return {"kind": kind, "version": version, "input": str(root / "in"),
            "views_input": str(root / "views"), "output": str(root / out)}


def _write_slices(root: Path, slices: range) -> None:
    write_clicks(root / "in", slices)
    write_clicks(root / "views", slices, seed=11)


@pytest.fixture(scope="module")
def reference_output(spark: object, tmp_path_factory: pytest.TempPathFactory) -> Reference:
    """The v1 job of a kind run without sparkpoint's snapshots over the same two slices of
    input as the tests, in its own home: made once per kind and compared with by every test
    of that kind (its output depends on neither the state store provider nor the partition
    count, which the tests vary)."""
    made: dict[str, Counter[tuple[Any, ...]]] = {}

    def of(kind: str) -> Counter[tuple[Any, ...]]:
        if kind not in made:
            root = tmp_path_factory.mktemp(f"reference-{kind}")
            for slices in (range(0, 3), range(3, 6)):
                _write_slices(root, slices)
                api.run(Home(root / "home"), JOB, "reference",
                        params=_params(root, kind, "v1", "ref"),
                        until_caught_up=True, spark=spark)  # type: ignore[arg-type]
            made[kind] = output_rows(spark, root / "ref")  # type: ignore[arg-type]
            assert made[kind], f"the reference run of {kind} emitted nothing"
        return made[kind]

    return of


@pytest.mark.parametrize("kind", ["session", "join", "pandas", "within"])
def test_operator_kind_survives_an_inserted_operator(
    spark: object, home: Home, tmp_path: Path, kind: str, reference_output: Reference
) -> None:
    _write_slices(tmp_path, range(0, 3))

    def run(job: str, version: str, out: str, **kw: object) -> None:
        api.run(home, JOB, job, params=_params(tmp_path, kind, version, out), until_caught_up=True,
                spark=spark, **kw)  # type: ignore[arg-type]

    run("old", "v1", "out1")
    api.snapshot_create(home, "old", "s1")
    _write_slices(tmp_path, range(3, 6))
    plan = api.plan(home, JOB, params=_params(tmp_path, kind, "v2", "out2"), from_snapshot="s1",
                    spark=spark)  # type: ignore[arg-type]
    assert plan.ok, plan.problems
    moved = [op for op in plan.operators if op.action == "resume"]
    assert moved and all(op.compatible for op in moved)
    run("new", "v2", "out2", from_snapshot="s1")
    combined = output_rows(spark, tmp_path / "out1") + output_rows(spark, tmp_path / "out2")  # type: ignore[arg-type]
    assert combined == reference_output(kind)


HDFS = "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider"
ROCKSDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"


@pytest.mark.parametrize(("kind", "provider"), [
    ("session", HDFS), ("join", HDFS), ("pandas", HDFS), ("within", HDFS),
    ("join", ROCKSDB)], ids=["session", "join", "pandas", "within", "join-rocksdb"])
def test_operator_kind_survives_repartitioning_state(
    spark: object, home: Home, tmp_path: Path, kind: str, provider: str,
    reference_output: Reference,
) -> None:
    """Spark cannot repartition HDFS-provider state, and moves RocksDB state slowly;
    sparkpoint moves every key (join keys, session keys without their window, grouping
    keys) to where Spark now looks for it. RocksDB: the join's four stores, moved by
    sparkpoint's tasks (upgrade/rocksdb_repartition.py), not by Spark's repartition."""
    _write_slices(tmp_path, range(0, 3))

    def run(job: str, out: str, partitions: int, **kw: object) -> None:
        conf = {"spark.sql.streaming.stateStore.providerClass": provider,
                "spark.sql.shuffle.partitions": str(partitions)}
        api.run(home, JOB, job, params=_params(tmp_path, kind, "v1", out), until_caught_up=True,
                conf=conf, spark=spark, **kw)  # type: ignore[arg-type]

    run("old", "out1", 2)
    api.snapshot_create(home, "old", "s1")
    _write_slices(tmp_path, range(3, 6))
    said: list[str] = []
    run("new", "out2", 3, from_snapshot="s1", echo=said.append)
    assert any("keys rehashed" in line for line in said), said
    _assert_restored_keys_where_spark_looks(spark, home, kind)
    combined = output_rows(spark, tmp_path / "out1") + output_rows(spark, tmp_path / "out2")  # type: ignore[arg-type]
    assert combined == reference_output(kind)


def _assert_restored_keys_where_spark_looks(spark: object, home: Home, kind: str) -> None:
    """Read the state as restored (before the new job's first batch) with Spark's state
    reader: every key must sit in pmod(hash(clustering columns), 3)."""
    from pyspark.sql import functions as F

    from sparkpoint.checkpoint.layout import Checkpoint

    ckpt = Checkpoint(home.checkpoint_dir("new"))
    restored = min(ckpt.commit_ids())
    checked = 0
    for operator in ckpt.operators():
        name = operator.operator_name
        columns = "key.user" if name == "sessionWindowStateStoreSaveExec" else "key.*"
        sides = ["left", "right"] if name == "symmetricHashJoin" else [None]
        for side in sides:
            reader = (spark.read.format("statestore")  # type: ignore[attr-defined]
                      .option("operatorId", operator.operator_id).option("batchId", restored))
            if side is not None:
                reader = reader.option("joinSide", side)
            rows = (reader.load(str(ckpt.root))
                    .select("partition_id", F.expr(f"pmod(hash({columns}), 3)").alias("want"))
                    .collect())
            assert all(r.partition_id == r.want for r in rows), (name, side)
            checked += len(rows)
    assert checked > 0, "no restored state to check"
