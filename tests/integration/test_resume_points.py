"""Upgrading a changed job from a snapshot with a resume point: state follows names, the
combined output equals what the job produces uninterrupted (or the independently computed
rows), and refusals change nothing."""

from __future__ import annotations

import datetime as dt
import json
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from sparkpoint import api
from sparkpoint.storage.home import Home
from sparkpoint.testing import Click, expected_hourly_counts, output_rows, write_clicks
from tests.support.cli import sparkpoint
from tests.support.shared_start import SharedStart, build_once

pytestmark = pytest.mark.spark
JOB = Path(__file__).resolve().parent.parent / "data" / "jobs" / "clicks_variants.py"


def _params(tmp: Path, out: str, variant: str, **extra: str) -> dict[str, str]:
    return {"input": str(tmp / "in"), "output": str(tmp / out), "variant": variant, **extra}


def _run(spark: object, home: Home, job: str, params: dict[str, str], **kw: Any) -> api.RunResult:
    return api.run(home, JOB, job, params=params, until_caught_up=True,
                   spark=spark, **kw)  # type: ignore[arg-type]


def _write_point(tmp: Path, data: dict[str, Any]) -> Path:
    path = tmp / "resume.yaml"
    path.write_text(yaml.safe_dump({"version": 1, **data}))
    return path


@dataclass(frozen=True)
class V1Start:
    """v1 ran over slices 0-3 of ``root``/in and was snapshotted as 's1'; slices 4-8 arrived
    since. ``events`` are the clicks of slices 0-8."""

    home: Home
    root: Path
    events: list[Click]


@pytest.fixture(scope="module")
def v1_built(spark: object, tmp_path_factory: pytest.TempPathFactory
             ) -> tuple[SharedStart, list[Click]]:
    events: list[Click] = []

    def build(root: Path) -> None:
        home = Home(root / "home")
        events.extend(write_clicks(root / "in", range(0, 4)))
        _run(spark, home, "v1", _params(root, "out1", "v1"))
        api.snapshot_create(home, "v1", "s1")
        events.extend(write_clicks(root / "in", range(4, 9)))

    return build_once(tmp_path_factory, "v1-snapshot", build), events


@pytest.fixture
def v1(v1_built: tuple[SharedStart, list[Click]]) -> V1Start:
    """The same start for every test, built once (tests/support/shared_start.py)."""
    start, events = v1_built
    root = start.fresh()
    return V1Start(Home(root / "home"), root, list(events))


def test_inserted_operator_between_two_resumed_ones(
    spark: object, v1: V1Start
) -> None:
    plan = api.plan(v1.home, JOB, params=_params(v1.root, "out2", "inserted"),
                    from_snapshot="s1", spark=spark)  # type: ignore[arg-type]
    assert plan.ok, plan.problems
    actions = {op.name: (op.action, op.operator_id) for op in plan.operators}
    # Spark numbers operators from the sink: the new dedupe takes id 1, the old dedupe moves.
    assert actions == {"hourly_counts": ("resume", 0), "recent_ids": ("initialize", 1),
                       "dedup_clicks": ("resume", 2)}
    _run(spark, v1.home, "v2", _params(v1.root, "out2", "inserted"), from_snapshot="s1")
    combined = output_rows(spark, v1.root / "out1") + output_rows(spark, v1.root / "out2")  # type: ignore[arg-type]
    assert combined == expected_hourly_counts(v1.events)


def test_renamed_operators_resume_from_their_old_names(
    spark: object, v1: V1Start
) -> None:
    point = _write_point(v1.root, {
        "sources": {"clicks": {"mode": "resume", "snapshot": "s1"}},
        "state": {"unique_clicks": {"mode": "resume", "snapshot": "s1",
                                    "operator": "dedup_clicks"},
                  "counts_per_hour": {"mode": "resume", "snapshot": "s1",
                                      "operator": "hourly_counts"}}})
    _run(spark, v1.home, "v2", _params(v1.root, "out2", "renamed"), resume_point=point)
    combined = output_rows(spark, v1.root / "out1") + output_rows(spark, v1.root / "out2")  # type: ignore[arg-type]
    assert combined == expected_hourly_counts(v1.events)


def test_removed_operator_is_dropped_only_when_said(
    spark: object, v1: V1Start
) -> None:
    refused = sparkpoint(v1.home, "plan", str(JOB), "--from-snapshot", "s1", "--json",
                         *_cli_params(_params(v1.root, "out2", "no_dedupe")))
    assert refused.code == 3
    assert any("dedup_clicks" in p and "drop" in p for p in refused.json()["problems"])
    point = _write_point(v1.root, {
        "sources": {"clicks": {"mode": "resume", "snapshot": "s1"}},
        "state": {"hourly_counts": {"mode": "resume", "snapshot": "s1"}},
        "drop": [{"snapshot": "s1", "operator": "dedup_clicks"}]})
    _run(spark, v1.home, "v2", _params(v1.root, "out2", "no_dedupe"), resume_point=point)
    combined = output_rows(spark, v1.root / "out1") + output_rows(spark, v1.root / "out2")  # type: ignore[arg-type]
    # Slices 0-3 were deduplicated by v1's state; slices 4-8 count their repeats too.
    before = [c for c in v1.events if int(c.event_id[1:].split("-")[0]) < 4]
    after = [c for c in v1.events if int(c.event_id[1:].split("-")[0]) >= 4]
    assert combined == _counts(list({(c.event_id, c.ts): c for c in before}.values()) + after,
                               final=v1.events)


def _counts(clicks: list[Click], final: list[Click]) -> Counter[Any]:
    """Hourly counts of ``clicks`` without deduplication, closed by ``final``'s watermark."""
    import datetime as dt

    watermark = max(c.ts for c in final) - dt.timedelta(minutes=10)
    counts: Counter[Any] = Counter()
    for click in clicks:
        start = click.ts.replace(minute=0, second=0, microsecond=0)
        if start + dt.timedelta(hours=1) <= watermark:
            counts[(start.replace(tzinfo=None), click.user)] += 1
    return Counter((s, s + dt.timedelta(hours=1), u, n) for (s, u), n in counts.items())


def _cli_params(params: dict[str, str]) -> list[str]:
    return [arg for k, v in params.items() for arg in ("--param", f"{k}={v}")]


def test_renamed_and_added_sources(
    spark: object, v1: V1Start
) -> None:
    # Other events over the same hours as the slices still to come on the renamed source.
    extra = write_clicks(v1.root / "extra", range(4, 9), seed=11)
    point = _write_point(v1.root, {
        "sources": {"clicks2": {"mode": "resume", "snapshot": "s1", "source": "clicks"},
                    "extra": {"mode": "initialize", "start": "earliest"}},
        "state": {"dedup_clicks": {"mode": "resume", "snapshot": "s1"},
                  "hourly_counts": {"mode": "resume", "snapshot": "s1"}}})
    params = _params(v1.root, "out2", "two_sources", extra_input=str(v1.root / "extra"))
    plan = api.plan(v1.home, JOB, params=params, resume_point=point, spark=spark)  # type: ignore[arg-type]
    assert plan.ok, plan.problems
    assert {s.name: s.action for s in plan.sources} == {"clicks2": "resume",
                                                         "extra": "initialize"}
    _run(spark, v1.home, "v2", params, resume_point=point)
    combined = output_rows(spark, v1.root / "out1") + output_rows(spark, v1.root / "out2")  # type: ignore[arg-type]
    # The renamed source did not re-read slices 0-3 (no double counts); the new one was read
    # from its start.
    assert combined == expected_hourly_counts(v1.events + extra)


def test_new_source_starting_at_a_timestamp_skips_older_files(
    spark: object, v1: V1Start
) -> None:
    write_clicks(v1.root / "extra", range(4, 7), seed=11)
    # The cut lies between the older files and the later ones (test mtimes run ahead of the
    # clock by a few ms to stay strictly increasing).
    newest_ms = max(p.stat().st_mtime_ns for p in (v1.root / "extra").iterdir()) // 1_000_000
    cut = dt.datetime.fromtimestamp((newest_ms + 1) / 1000, dt.UTC)
    later = write_clicks(v1.root / "extra", range(7, 9), seed=11)
    point = _write_point(v1.root, {
        "sources": {"clicks2": {"mode": "resume", "snapshot": "s1", "source": "clicks"},
                    "extra": {"mode": "initialize",
                              "start": {"timestamp": cut.isoformat()}}},
        "state": {n: {"mode": "resume", "snapshot": "s1"}
                  for n in ("dedup_clicks", "hourly_counts")}})
    params = _params(v1.root, "out2", "two_sources", extra_input=str(v1.root / "extra"))
    shown = sparkpoint(v1.home, "plan", str(JOB), "--resume-point", str(point), "--json",
                       *_cli_params(params))
    assert shown.code == 0, shown.out
    rows = {row["name"]: row for row in shown.json()["sources"]}
    assert rows["extra"]["action"] == "initialize"
    assert rows["extra"]["offset"] == {"logOffset": 0}
    assert any("skips 3 of 5 files" in w for w in shown.json()["warnings"])
    _run(spark, v1.home, "v2", params, resume_point=point)
    combined = output_rows(spark, v1.root / "out1") + output_rows(spark, v1.root / "out2")  # type: ignore[arg-type]
    assert combined == expected_hourly_counts(v1.events + later)


def test_new_source_starting_at_latest_skips_its_backlog_only(
    spark: object, v1: V1Start
) -> None:
    write_clicks(v1.root / "extra", range(4, 9), seed=11)
    point = _write_point(v1.root, {
        "sources": {"clicks2": {"mode": "resume", "snapshot": "s1", "source": "clicks"},
                    "extra": {"mode": "initialize", "start": "latest"}},
        "state": {n: {"mode": "resume", "snapshot": "s1"}
                  for n in ("dedup_clicks", "hourly_counts")}})
    params = _params(v1.root, "out2", "two_sources", extra_input=str(v1.root / "extra"))
    _run(spark, v1.home, "v2", params, resume_point=point)
    # Files arriving after the start are read by the next run of the same job.
    more = write_clicks(v1.root / "in", range(9, 11))
    fresh = write_clicks(v1.root / "extra", range(9, 11), seed=11)
    _run(spark, v1.home, "v2", params)
    combined = output_rows(spark, v1.root / "out1") + output_rows(spark, v1.root / "out2")  # type: ignore[arg-type]
    assert combined == expected_hourly_counts(v1.events + more + fresh)


def test_reordered_then_removed_sources(
    spark: object, v1: V1Start
) -> None:
    both = {"clicks2": {"mode": "resume", "snapshot": "s2"},
            "extra": {"mode": "resume", "snapshot": "s2"}}
    state = {name: {"mode": "resume", "snapshot": "s2"}
             for name in ("dedup_clicks", "hourly_counts")}
    extra = write_clicks(v1.root / "extra", range(4, 9), seed=11)
    # v2 = two sources (see test_renamed_and_added_sources), snapshotted as s2.
    point = _write_point(v1.root, {
        "sources": {"clicks2": {"mode": "resume", "snapshot": "s1", "source": "clicks"},
                    "extra": {"mode": "initialize"}},
        "state": {n: {"mode": "resume", "snapshot": "s1"} for n in state}})
    extra_input = str(v1.root / "extra")
    _run(spark, v1.home, "v2", _params(v1.root, "out2", "two_sources", extra_input=extra_input),
         resume_point=point)
    api.snapshot_create(v1.home, "v2", "s2")
    more = write_clicks(v1.root / "in", range(9, 11))
    extra += write_clicks(v1.root / "extra", range(9, 11), seed=11)
    # v3 reads the same two sources in the other order: offsets follow names, not positions.
    point = _write_point(v1.root, {"sources": both, "state": state})
    _run(spark, v1.home, "v3", _params(v1.root, "out3", "reordered", extra_input=extra_input),
         resume_point=point)
    api.snapshot_create(v1.home, "v3", "s3")
    more += write_clicks(v1.root / "in", range(11, 13))
    # v4 stops reading extra; nothing of it is re-read or lost before that.
    point = _write_point(v1.root, {
        "sources": {"clicks2": {"mode": "resume", "snapshot": "s3"}},
        "state": {n: {"mode": "resume", "snapshot": "s3"} for n in state}})
    _run(spark, v1.home, "v4", _params(v1.root, "out4", "clicks2"), resume_point=point)
    combined = sum((output_rows(spark, v1.root / f"out{i}")  # type: ignore[arg-type]
                    for i in range(1, 5)), Counter())
    assert combined == expected_hourly_counts(v1.events + more + extra)


def _home_tree(home: Home) -> list[Path]:
    """Everything in the home but its logs directory, which a command that starts Spark
    makes for error logs; a refusal must leave no log file in it either."""
    logs = home.root / "logs"
    assert not [p for p in logs.rglob("*") if p.is_file()]
    return sorted(p for p in home.root.rglob("*") if p != logs and logs not in p.parents)


def test_refusals_exit_3_name_the_entry_and_create_nothing(
    spark: object, v1: V1Start
) -> None:
    point = _write_point(v1.root, {
        "sources": {"clicks": {"mode": "resume", "snapshot": "s1"},
                    "ghost": {"mode": "initialize"}},
        "state": {"hourly_counts": {"mode": "resume", "snapshot": "s1",
                                    "operator": "dedup_clicks"},
                  "dedup_clicks": {"mode": "resume", "snapshot": "nope"}}})
    before = _home_tree(v1.home)
    result = sparkpoint(v1.home, "run", str(JOB), "--job", "v2", "--resume-point", str(point),
                        *_cli_params(_params(v1.root, "out2", "v1")))
    assert result.code == 3, result.err
    for fragment in ("sources.ghost", "state.hourly_counts", "operator kind changed",
                     "snapshot 'nope' does not exist"):
        assert fragment in result.err, (fragment, result.err)
    assert "Traceback" not in result.err
    assert _home_tree(v1.home) == before
    assert not (v1.root / "out2").exists()


@pytest.mark.parametrize(("variant", "operator", "fragment"), [
    ("rekeyed", "dedup_clicks", "key schema changed"),
    ("listed", "hourly_counts", "aggregate collect_list(url) added: its buffer is an object "
     "Spark serializes"),
])
def test_schema_changes_are_refused_before_anything_starts(
    spark: object, v1: V1Start,
    variant: str, operator: str, fragment: str,
) -> None:
    before = _home_tree(v1.home)
    result = sparkpoint(v1.home, "run", str(JOB), "--job", "v2", "--from-snapshot", "s1",
                        *_cli_params(_params(v1.root, "out2", variant)))
    assert result.code == 3, result.err
    assert f"state.{operator}" in result.err and fragment in result.err
    assert _home_tree(v1.home) == before
    assert not (v1.root / "out2").exists()


def test_plan_json_and_resume_point_build(
    spark: object, v1: V1Start
) -> None:
    built = sparkpoint(v1.home, "resume-point", "build", str(JOB), "s1", "-o",
                       str(v1.root / "rp.yaml"),
                       *_cli_params(_params(v1.root, "out2", "inserted")))
    assert built.code == 0, built.err
    point = yaml.safe_load((v1.root / "rp.yaml").read_text())
    assert point["state"]["recent_ids"] == {"mode": "initialize"}
    assert point["state"]["dedup_clicks"]["mode"] == "resume"
    shown = sparkpoint(v1.home, "plan", str(JOB), "--resume-point", str(v1.root / "rp.yaml"),
                       "--json", *_cli_params(_params(v1.root, "out2", "inserted")))
    assert shown.code == 0, shown.err
    plan = json.loads(shown.out)
    assert plan["ok"] is True and plan["problems"] == []
    for row in plan["operators"]:
        assert {"name", "action", "from", "compatible", "reason"} <= row.keys()
    assert {r["name"]: r["action"] for r in plan["operators"]} == {
        "hourly_counts": "resume", "recent_ids": "initialize", "dedup_clicks": "resume"}
    assert not (v1.root / "out2").exists()
    assert not v1.home.job_dir("plan").exists()


BRANCHES = Path(__file__).resolve().parent.parent / "data" / "jobs" / "branches.py"


def _tagged(branch: str, clicks: list[Click]) -> Counter[Any]:
    return Counter({(branch, *row): n for row, n in expected_hourly_counts(clicks).items()})


def test_merge_two_jobs_then_split_them_again(spark: object, home: Home, tmp_path: Path) -> None:
    inputs = {"input_a": str(tmp_path / "a"), "input_b": str(tmp_path / "b")}
    events = {"a": write_clicks(tmp_path / "a", range(0, 3)),
              "b": write_clicks(tmp_path / "b", range(0, 3), seed=11)}

    def run(job: str, branches: str, out: str, **kw: Any) -> None:
        api.run(home, BRANCHES, job, params={**inputs, "branches": branches,
                                             "output": str(tmp_path / out)},
                until_caught_up=True, spark=spark, **kw)  # type: ignore[arg-type]

    run("job_a", "a", "out_a")
    run("job_b", "b", "out_b")
    api.snapshot_create(home, "job_a", "sa")
    api.snapshot_create(home, "job_b", "sb")
    events["a"] += write_clicks(tmp_path / "a", range(3, 6))
    events["b"] += write_clicks(tmp_path / "b", range(3, 6), seed=11)

    merge = _write_point(tmp_path, {
        "sources": {b: {"mode": "resume", "snapshot": f"s{b}"} for b in "ab"},
        "state": {f"{kind}_{b}": {"mode": "resume", "snapshot": f"s{b}"}
                  for b in "ab" for kind in ("dedup", "counts")}})
    run("merged", "a,b", "out_ab", resume_point=merge)
    api.snapshot_create(home, "merged", "sab")
    events["a"] += write_clicks(tmp_path / "a", range(6, 9))
    events["b"] += write_clicks(tmp_path / "b", range(6, 9), seed=11)

    for keep, other in (("a", "b"), ("b", "a")):
        split = _write_point(tmp_path, {
            "sources": {keep: {"mode": "resume", "snapshot": "sab"}},
            "state": {f"{kind}_{keep}": {"mode": "resume", "snapshot": "sab"}
                      for kind in ("dedup", "counts")},
            "drop": [{"snapshot": "sab", "operator": f"{kind}_{other}"}
                     for kind in ("dedup", "counts")]})
        run(f"split_{keep}", keep, f"out_split_{keep}", resume_point=split)

    outputs = sum((output_rows(spark, tmp_path / name)  # type: ignore[arg-type]
                   for name in ("out_a", "out_b", "out_ab", "out_split_a", "out_split_b")),
                  Counter())
    assert outputs == _tagged("a", events["a"]) + _tagged("b", events["b"])


def test_shuffle_partitions_changed_repartitions_rocksdb_state(
    spark: object, v1: V1Start
) -> None:
    from sparkpoint.checkpoint.layout import Checkpoint

    _run(spark, v1.home, "v2", _params(v1.root, "out2", "v1"), from_snapshot="s1",
         conf={"spark.sql.shuffle.partitions": "4"})
    ckpt = Checkpoint(v1.home.checkpoint_dir("v2"))
    batch = ckpt.require_latest_committed_batch()
    assert ckpt.offsets(batch).conf["spark.sql.shuffle.partitions"] == "4"
    combined = output_rows(spark, v1.root / "out1") + output_rows(spark, v1.root / "out2")  # type: ignore[arg-type]
    assert combined == expected_hourly_counts(v1.events)
    # Spark's restart planning writes spark.sql.streaming.internal.stateStore.partitions into
    # the session; left there, every later new query of the session would get 4 partitions.
    _run(spark, v1.home, "fresh", _params(v1.root, "out3", "v1"))
    fresh = Checkpoint(v1.home.checkpoint_dir("fresh"))
    assert fresh.offsets(fresh.require_latest_committed_batch()).conf[
        "spark.sql.shuffle.partitions"] == "2"


def test_partition_change_of_hdfs_state_moves_keys_where_spark_looks(
    spark: object, v1: V1Start
) -> None:
    from pyspark.sql import functions as F

    from sparkpoint.checkpoint.layout import Checkpoint

    hdfs = "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider"
    # The fixture's v1 ran with RocksDB; this one keeps its state in the HDFS provider.
    _run(spark, v1.home, "h1", _params(v1.root, "outh", "v1"),
         conf={"spark.sql.streaming.stateStore.providerClass": hdfs})
    api.snapshot_create(v1.home, "h1", "hs")
    planned = api.plan(v1.home, JOB, params=_params(v1.root, "out2", "v1"), from_snapshot="hs",
                       conf={"spark.sql.shuffle.partitions": "3"},
                       spark=spark)  # type: ignore[arg-type]
    assert planned.ok, planned.problems
    more = write_clicks(v1.root / "in", range(9, 11))
    _run(spark, v1.home, "h2", _params(v1.root, "out2", "v1"), from_snapshot="hs",
         conf={"spark.sql.shuffle.partitions": "3"})
    ckpt = Checkpoint(v1.home.checkpoint_dir("h2"))
    batch = ckpt.require_latest_committed_batch()
    assert ckpt.offsets(batch).conf["spark.sql.shuffle.partitions"] == "3"
    combined = output_rows(spark, v1.root / "outh") + output_rows(spark, v1.root / "out2")  # type: ignore[arg-type]
    assert combined == expected_hourly_counts(v1.events + more)
    # Every key sits in the partition Spark's hash partitioning gives it.
    for operator in ckpt.operators():
        state = (spark.read.format("statestore")  # type: ignore[attr-defined]
                 .option("operatorId", operator.operator_id).option("batchId", batch)
                 .load(str(ckpt.root)))
        placed = state.select("partition_id", F.expr("pmod(hash(key.*), 3)").alias("want"))
        rows = placed.collect()
        assert rows, f"operator {operator.operator_id} has no state to check"
        assert all(r.partition_id == r.want for r in rows)
        assert {r.partition_id for r in rows} == {0, 1, 2}


def test_partition_change_of_fixed_width_hdfs_state_streams_keys_where_spark_looks(
    spark: Any, home: Home, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Keys of one width (moved by Spark tasks: one per old partition hashes and spills its
    records, one per new partition writes its snapshot): every key reaches the partition
    Spark's hash partitioning gives it, with its count, as Spark's state reader sees it."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from pyspark.sql import functions as F

    from sparkpoint.checkpoint.layout import Checkpoint
    from sparkpoint.upgrade import hdfs_repartition

    def in_this_process(*_args: object) -> bool:
        raise AssertionError("expected the keys moved by Spark tasks, not in the driver")

    monkeypatch.setattr(hdfs_repartition, "_repartition_rows", in_this_process)

    hdfs = "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider"
    (tmp_path / "in").mkdir()
    keys = [f"k{n:06d}" for n in range(5000)]
    pq.write_table(pa.table({"key": keys + keys[:100]}), tmp_path / "in" / "part-0.parquet")
    job = JOB.parent / "key_counts.py"
    conf = {"spark.sql.streaming.stateStore.providerClass": hdfs,
            "spark.sql.shuffle.partitions": "4"}
    params = {"input": str(tmp_path / "in")}
    api.run(home, job, "f1", params=params, conf=conf, until_caught_up=True, spark=spark)
    api.snapshot_create(home, "f1", "fs")
    api.run(home, job, "f2", params=params, from_snapshot="fs", until_caught_up=True,
            conf={**conf, "spark.sql.shuffle.partitions": "3"}, spark=spark)
    ckpt = Checkpoint(home.checkpoint_dir("f2"))
    state = (spark.read.format("statestore")
             .option("batchId", ckpt.require_latest_committed_batch()).load(str(ckpt.root)))
    rows = state.select("partition_id", F.expr("pmod(hash(key.*), 3)").alias("want"),
                        "key.key", "value.count").collect()
    assert Counter((r.key, r["count"]) for r in rows) == Counter(
        (key, 2 if index < 100 else 1) for index, key in enumerate(keys))
    assert all(r.partition_id == r.want for r in rows)
    assert {r.partition_id for r in rows} == {0, 1, 2}
    # The spill files are gone with the move.
    assert not list((ckpt.local_root / "state").rglob(".repartition-*"))


def test_same_typed_dedupes_swapping_places_keep_their_own_state(
    spark: object, home: Home, tmp_path: Path
) -> None:
    job = JOB.parent / "swap.py"
    write_clicks(tmp_path / "in", range(0, 2))

    def params(order: str, out: str) -> dict[str, str]:
        return {"input": str(tmp_path / "in"), "output": str(tmp_path / out), "order": order}

    api.run(home, job, "v1", params=params("user_first", "o1"), until_caught_up=True,
            spark=spark)  # type: ignore[arg-type]
    api.snapshot_create(home, "v1", "sw")
    api.run(home, job, "v2", params=params("url_first", "o2"), from_snapshot="sw",
            until_caught_up=True, spark=spark)  # type: ignore[arg-type]
    ids = {op.name: op.operator_id for op in api.job_view(home, "v2").record.operators}
    old_ids = {op.name: op.operator_id for op in api.job_view(home, "v1").record.operators}
    assert ids["by_user"] != old_ids["by_user"]  # Spark's positional ids did swap
    for name, field in (("by_user", "user"), ("by_url", "url")):
        keys = (spark.read.format("statestore")  # type: ignore[attr-defined]
                .option("operatorId", ids[name]).load(str(home.checkpoint_dir("v2")))
                .select(f"key.{field}").collect())
        assert keys, name
        values = {row[0] for row in keys}
        assert all(v.startswith("/p/") for v in values) == (field == "url"), (name, values)


def test_plan_reports_every_kind_of_mistake_in_one_run(
    spark: object, v1: V1Start
) -> None:
    """Mistakes of the file itself (a mode misspelt, a drop without its operator) do not
    hide those found against the job and the snapshots: one run of plan lists them all."""
    point = _write_point(v1.root, {
        "sources": {"clicks": {"mode": "resume", "snapshot": "s1", "source": "klicks"},
                    "ghost": {"mode": "initialize"}},
        "state": {"hourly_counts": {"mode": "resume", "snapshot": "s1",
                                    "operator": "dedup_clicks"},
                  "dedup_clicks": {"mode": "resume", "snapshot": "nope"},
                  "recent_ids": {"mode": "resme"}},
        "drop": [{"snapshot": "s1", "operator": "legacy"}, {"snapshot": "s1"}]})
    expected = [
        "state.recent_ids.mode: 'resme' is not one of resume, initialize",  # model
        "drop[1].operator: required but missing",  # model
        "snapshot 'nope' does not exist",  # unknown snapshot
        "sources.clicks: snapshot 's1' has no source 'klicks'",  # unknown source
        "sources.ghost: the job has no source 'ghost'",  # unknown source
        "drop[0]: snapshot 's1' has no operator 'legacy'",  # unknown operator
        "state.hourly_counts: cannot resume from s1/dedup_clicks: operator kind changed",
    ]
    args = ("plan", str(JOB), "--resume-point", str(point),
            *_cli_params(_params(v1.root, "out2", "v1")))
    shown = sparkpoint(v1.home, *args, "--json")
    assert shown.code == 3, shown.err
    problems = shown.json()["problems"]
    for fragment in expected:
        assert [p for p in problems if fragment in p], (fragment, problems)
    # Entries that did not parse are not also called missing.
    assert not [p for p in problems if "no entry" in p or "neither resumed" in p], problems
    text = sparkpoint(v1.home, *args)
    assert text.code == 3 and "Traceback" not in text.err
    for fragment in expected:
        assert fragment in text.out + text.err, (fragment, text.out, text.err)
