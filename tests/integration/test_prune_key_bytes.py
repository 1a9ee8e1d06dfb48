"""``snapshot prune`` of HDFS-provider state by Spark tasks: each selected key, decoded by
Spark's state reader, is encoded back into its stored bytes by sparkpoint's
``UnsafeRowBytes`` (Spark's own encoder). Keys of every common column type must come back
byte for byte: a key that did not would not be found, and the prune would fail."""

from __future__ import annotations

import datetime as dt
import json
import random
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from sparkpoint import api
from sparkpoint.checkpoint.rocksdb_state import HDFS_PROVIDER
from sparkpoint.snapshot.store import open_snapshot_store
from sparkpoint.spark import own_jar
from sparkpoint.storage.home import Home
from tests.conftest import REPO

JOB = REPO / "tests" / "data" / "jobs" / "typed_keys.py"
pytestmark = pytest.mark.spark


def _rows(count: int) -> list[dict[str, Any]]:
    pick = random.Random(7)
    day = dt.date(2026, 1, 1)
    return [{
        "s": pick.choice(["ana", "bo", "ç-ü", "", "long " * 9]), "i": pick.randint(-5, 5),
        "l": pick.choice([0, 1 << 40, -(1 << 50)]), "d": pick.choice([0.5, -0.0, 1e300, 2.25]),
        "m": pick.choice(["1.5", "-99999.999", "0"]),
        "day": (day + dt.timedelta(days=pick.randint(0, 400))).isoformat(),
        "ts": (f"2026-01-0{pick.randint(1, 9)}T0{pick.randint(0, 9)}:00:00."
               f"{pick.randint(0, 999999):06d}Z"),
        "b": pick.random() < 0.5,
        "nested": pick.choice([{"name": "x", "n": 1}, {"name": None, "n": 2}, None]),
        "tags": pick.choice([["a"], ["a", "bb", None], [], None]),
        "maybe": pick.choice([None, "here"]),
    } for _ in range(count)]


def _state_keys(spark: Any, home: Home, snapshot: str) -> Counter[str]:
    manifest = api.snapshot_show(home, snapshot)
    frame = (spark.read.format("statestore").option("batchId", manifest.batch_id)
             .load(str(open_snapshot_store(home).checkpoint_path(snapshot))))
    return Counter(json.dumps(row.key.asDict(recursive=True), default=str, sort_keys=True)
                   for row in frame.collect())


def test_prune_finds_every_selected_key_of_every_type(
    spark: Any, home: Home, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    inp = tmp_path / "in"
    inp.mkdir()
    (inp / "a.json").write_text("\n".join(json.dumps(row) for row in _rows(400)) + "\n")
    api.run(home, JOB, "typed", params={"input": str(inp)},
            conf={"spark.sql.streaming.stateStore.providerClass": HDFS_PROVIDER},
            until_caught_up=True, spark=spark)
    api.snapshot_create(home, "typed", "s1")
    where = "i >= 0 OR tags IS NULL"
    before = _state_keys(spark, home, "s1")
    frame = (spark.read.format("statestore")
             .option("batchId", api.snapshot_show(home, "s1").batch_id)
             .load(str(open_snapshot_store(home).checkpoint_path("s1"))))
    matching = Counter(json.dumps(row.key.asDict(recursive=True), default=str, sort_keys=True)
                       for row in frame.select("key", "key.*").filter(where).collect())
    assert matching and len(matching) < len(before)

    by_tasks = api.snapshot_prune(home, "s1", "by-tasks", "typed_counts", where, spark=spark)
    # A caller's session started without sparkpoint's jar: the driver rewrites.
    monkeypatch.setattr(own_jar, "loadable", lambda _spark, _name: False)
    by_driver = api.snapshot_prune(home, "s1", "by-driver", "typed_counts", where, spark=spark)

    for result, way in ((by_tasks, "spark_tasks"), (by_driver, "driver")):
        assert result.rewritten_by == way
        assert _state_keys(spark, home, result.new_snapshot) == before - matching
        assert result.rows_removed == sum(matching.values())
        assert result.rows_before == sum(before.values())
        assert api.snapshot_verify(home, result.new_snapshot) == []
