"""``snapshot inspect`` reads a snapshot's state without a JVM: its row counts and decoded keys
equal what Spark's own state data source reader finds, and state that no watermark can
evict is flagged (in ``jobs show`` too) while watermarked state is not."""

from __future__ import annotations

import datetime as dt
import json
import shutil
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from sparkpoint import api
from sparkpoint.runtime.progress import read_state_rows
from sparkpoint.storage.home import Home
from sparkpoint.testing import write_clicks
from tests.conftest import EXAMPLES
from tests.support.cli import sparkpoint
from tests.support.state_formats import CHANGELOG, every_state_format

pytestmark = pytest.mark.spark

UNBOUNDED_DEDUPE = '''
from pyspark.sql import functions as F
import sparkpoint as sp

def build(spark, ctx):
    clicks = (spark.readStream.name("clicks")
              .schema("event_id STRING, user STRING, url STRING, ts TIMESTAMP")
              .json(ctx.require_param("input")))
    seen = ctx.stateful("seen_events", clicks.dropDuplicates(["event_id"]))
    return seen.writeStream.format("noop").outputMode("append")
'''


def _plain(value: Any) -> Any:
    """A row of Spark's reader in the form inspect prints: objects, ISO UTC times."""
    if hasattr(value, "asDict"):
        return {k: _plain(v) for k, v in value.asDict().items()}
    if isinstance(value, dt.datetime):  # the tests' session runs in UTC
        return value.isoformat(timespec="milliseconds") + "Z"
    return value


def _reader(spark: Any, checkpoint: Path, operator_id: int) -> list[tuple[int, str]]:
    frame = (spark.read.format("statestore").option("operatorId", operator_id)
             .load(str(checkpoint)))
    return [(row["partition_id"], json.dumps(_plain(row["key"]), sort_keys=True))
            for row in frame.collect()]


@every_state_format
def test_inspect_matches_sparks_state_reader_and_flags_unbounded_state(
    spark: Any, home: Home, tmp_path: Path, provider: str, changelog: str
) -> None:
    conf = {"spark.sql.streaming.stateStore.providerClass": provider, CHANGELOG: changelog}
    inp = tmp_path / "in"
    write_clicks(inp, range(0, 4))
    api.run(home, EXAMPLES / "clicks_job.py", "clicks", conf=conf, until_caught_up=True,
            params={"input": str(inp), "output": str(tmp_path / "out")}, spark=spark)
    api.snapshot_create(home, "clicks", "watermarked")
    job_file = tmp_path / "unbounded_job.py"
    job_file.write_text(UNBOUNDED_DEDUPE)
    api.run(home, job_file, "dedupe", conf=conf, until_caught_up=True,
            params={"input": str(inp)}, spark=spark)
    api.snapshot_create(home, "dedupe", "unbounded")

    report = sparkpoint(home, "snapshot", "inspect", "watermarked", "--rows", "1000",
                        "--json")
    assert report.code == 0, report.err
    operators = {op["name"]: op for op in report.json()["operators"]}
    assert set(operators) == {"dedup_clicks", "hourly_counts"}
    # Spark's reader on a copy, so that nothing can touch the snapshot itself.
    copy = tmp_path / "reader-copy"
    shutil.copytree(home.snapshots_dir / "watermarked" / "checkpoint", copy)
    # The manifest's rows came from Spark's progress of the batch, recorded by the run (no
    # state was read to count them), and equal the keys Spark's reader finds.
    manifest = api.snapshot_show(home, "watermarked")
    recorded = read_state_rows(home.job_dir("clicks"))[manifest.batch_id]
    assert [name for name, _rows in recorded] == ["stateStoreSave", "dedupe"]
    # Counted on request by reading the state, beside the manifest's rows.
    counted = sparkpoint(home, "snapshot", "show", "watermarked", "--count", "--json")
    assert counted.code == 0, counted.err
    counted_rows = {op["name"]: op["counted_rows"] for op in counted.json()["operators"]}
    for op in operators.values():
        spark_rows = _reader(spark, copy, op["operator_id"])
        assert spark_rows, f"{op['name']}: the state is empty, the test proves nothing"
        entry = manifest.operator(op["name"])
        assert entry is not None
        assert entry.rows == recorded[op["operator_id"]][1] == len(spark_rows)
        assert counted_rows[op["name"]] == len(spark_rows)
        per_partition = Counter(partition for partition, _key in spark_rows)
        assert {p["partition"]: p["rows"] for p in op["partitions"]} == \
            {p: per_partition.get(p, 0) for p in range(2)}
        assert op["rows"] == len(spark_rows)
        decoded = Counter((s["partition"], json.dumps(s["key"], sort_keys=True))
                          for s in op["sample"])
        assert decoded == Counter(spark_rows)
        assert op["boundedness"]["status"] == "bounded", op["boundedness"]
        assert op["bytes"] == sum(p["bytes"] for p in op["partitions"]) > 0
    window = operators["hourly_counts"]["event_time"]
    assert window["column"] == "window"
    starts = [json.loads(key)["window"]["start"] for _p, key in
              _reader(spark, copy, operators["hourly_counts"]["operator_id"])]
    assert window["min"] == min(starts)
    assert sparkpoint(home, "snapshot", "verify", "watermarked").code == 0

    flagged = sparkpoint(home, "snapshot", "inspect", "unbounded", "--json")
    assert flagged.code == 0, flagged.err
    (seen,) = flagged.json()["operators"]
    assert seen["name"] == "seen_events" and seen["kind"] == "dedupe"
    assert seen["boundedness"]["status"] == "unbounded"
    assert "no key column carries an event-time watermark" in seen["boundedness"]["reason"]
    assert "withWatermark" in seen["boundedness"]["fix"]
    assert seen["rows"] == len({c["event_id"] for c in _events(inp)})
    text = sparkpoint(home, "snapshot", "inspect", "unbounded")
    assert "UNBOUNDED: no key column" in text.out and "fix: add withWatermark" in text.out

    shown = sparkpoint(home, "jobs", "show", "dedupe", "--json").json()["state_checks"]
    assert [(c["operator"], c["status"]) for c in shown] == [("seen_events", "unbounded")]
    assert {c["status"] for c in
            sparkpoint(home, "jobs", "show", "clicks", "--json").json()["state_checks"]} == \
        {"bounded"}

    only = sparkpoint(home, "snapshot", "inspect", "watermarked", "--operator", "hourly_counts",
                      "--json")
    assert [op["name"] for op in only.json()["operators"]] == ["hourly_counts"]
    unknown = sparkpoint(home, "snapshot", "inspect", "watermarked", "--operator", "nope")
    assert unknown.code == 4 and "[UNKNOWN_OPERATOR]" in unknown.err


def _events(directory: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for path in sorted(directory.glob("*.json"))
            for line in path.read_text().splitlines() if line.strip()]


def test_groups_without_a_timeout_are_flagged(
    spark: Any, home: Home, tmp_path: Path
) -> None:
    inp = tmp_path / "in"
    write_clicks(inp, range(0, 2))
    job = Path(__file__).resolve().parent.parent / "data" / "jobs" / "pandas_state.py"
    api.run(home, job, "counts", until_caught_up=True, spark=spark,
            params={"input": str(inp), "output": str(tmp_path / "out")})
    api.snapshot_create(home, "counts", "s")

    report = sparkpoint(home, "snapshot", "inspect", "s", "--json")
    assert report.code == 0, report.err
    (op,) = report.json()["operators"]
    assert op["kind"] == "flat_map_groups_with_state"
    assert op["rows"] == len({c["user"] for c in _events(inp)})
    assert op["boundedness"]["status"] == "unbounded"
    assert "GroupStateTimeout.NoTimeout" in op["boundedness"]["reason"]
    shown = sparkpoint(home, "jobs", "show", "counts", "--json").json()["state_checks"]
    assert [(c["operator"], c["status"]) for c in shown] == [("click_counts", "unbounded")]


JOBS = Path(__file__).resolve().parent.parent / "data" / "jobs"
JOIN_STORES = ["left-keyToNumValues", "left-keyWithIndexToValue", "right-keyToNumValues",
               "right-keyWithIndexToValue"]


def _store_reader(spark: Any, checkpoint: Path, operator_id: int,
                  store: str) -> list[tuple[int, str]]:
    frame = (spark.read.format("statestore").option("operatorId", operator_id)
             .option("storeName", store).load(str(checkpoint)))
    return [(row["partition_id"], json.dumps(_plain(row["key"]), sort_keys=True))
            for row in frame.collect()]


@pytest.mark.parametrize("job,kind,changelog,stores", [
    # Session windows on RocksDB keep their keys in the prefix-scan encoding
    # (RocksDBStateEncoder.scala, PrefixKeyScanStateEncoder): numColsPrefixKey = 1 (user).
    ("drain_kinds.py", "session", "false", {"sessions": ["default"]}),
    ("drain_kinds.py", "session", "true", {"sessions": ["default"]}),
    ("drain_kinds.py", "outer", "false", {"clicks_views": JOIN_STORES}),
    ("drain_kinds.py", "within", "false", {"first_visits": ["default"]}),
    ("kinds.py", "pandas", "false", {"running_counts": ["default"],
                                     "dedup_clicks": ["default"]}),
], ids=["session", "session-changelog", "join", "within-watermark", "pandas-state"])
def test_inspect_decodes_every_kind_on_rocksdb_as_sparks_reader(
    spark: Any, home: Home, tmp_path: Path, job: str, kind: str, changelog: str,
    stores: dict[str, list[str]],
) -> None:
    """sparkpoint's defaults (RocksDB): every store's decoded keys and row counts equal
    those of Spark's state reader."""
    inp, views = tmp_path / "in", tmp_path / "views"
    write_clicks(inp, range(0, 3))
    write_clicks(views, range(0, 3), seed=3)
    api.run(home, JOBS / job, kind, until_caught_up=True, spark=spark,
            conf={CHANGELOG: changelog},
            params={"input": str(inp), "views_input": str(views), "kind": kind,
                    "output": str(tmp_path / "out")})
    created = sparkpoint(home, "snapshot", "create", kind, "s")
    assert created.code == 0, created.err
    # stdout holds the result alone; stderr no step-by-step lines of the export.
    assert len(created.out.splitlines()) == 1 and created.out.startswith("snapshot 's'")
    assert "operator 0" not in created.err and "copying" not in created.err, created.err

    report = sparkpoint(home, "snapshot", "inspect", "s", "--rows", "1000", "--json")
    assert report.code == 0, report.err
    assert report.json()["state_store_provider"].endswith("RocksDBStateStoreProvider")
    operators = {op["name"]: op for op in report.json()["operators"]}
    assert set(operators) == set(stores)
    copy = tmp_path / "reader-copy"
    shutil.copytree(home.snapshots_dir / "s" / "checkpoint", copy)
    for name, op in operators.items():
        spark_rows: Counter[int] = Counter()
        for store in stores[name]:
            read = _store_reader(spark, copy, op["operator_id"], store)
            assert read, f"{name}/{store}: the state is empty, the test proves nothing"
            decoded = Counter((s["partition"], json.dumps(s["key"], sort_keys=True))
                              for s in op["sample"] if s["store"] == store)
            assert decoded == Counter(read), (name, store)
            spark_rows.update(partition for partition, _key in read)
        assert {p["partition"]: p["rows"] for p in op["partitions"]} == \
            {p: spark_rows.get(p, 0) for p in range(2)}
        assert op["rows"] == sum(spark_rows.values())
    text = sparkpoint(home, "snapshot", "inspect", "s", "--rows", "3", "--all-partitions")
    assert text.code == 0 and "CHECKPOINT_FORMAT" not in text.err, text.err
