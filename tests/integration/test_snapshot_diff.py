"""`snapshot diff A B`: the keys only in A, only in B and in both with other values, per
operator, compared with the same counts computed here in Python from each snapshot's rows as
Spark's state reader returns them (the diff pairs them in Spark, by their JSON)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from sparkpoint import api
from sparkpoint.snapshot.store import open_snapshot_store
from sparkpoint.storage.home import Home
from sparkpoint.testing import write_clicks
from tests.conftest import EXAMPLES
from tests.support.cli import sparkpoint

pytestmark = pytest.mark.spark
CLICKS = EXAMPLES / "clicks_job.py"
KINDS = Path(__file__).resolve().parent.parent / "data" / "jobs" / "kinds.py"


def _hashable(value: Any) -> Any:
    """A Row (or a nested one) as nested tuples, comparable and hashable."""
    if hasattr(value, "asDict"):
        return tuple(sorted((k, _hashable(v)) for k, v in value.asDict().items()))
    if isinstance(value, list):
        return tuple(_hashable(v) for v in value)
    return value


def _rows(spark: Any, home: Home, snapshot: str, operator: str,
          join_side: str | None = None) -> list[tuple[Any, Any]]:
    """(key, value) of every row of the operator's state in the snapshot."""
    manifest = api.snapshot_show(home, snapshot)
    entry = manifest.operator(operator)
    assert entry is not None
    reader = (spark.read.format("statestore").option("batchId", manifest.batch_id)
              .option("operatorId", entry.operator_id))
    if join_side is not None:
        reader = reader.option("joinSide", join_side)
    frame = reader.load(str(open_snapshot_store(home).checkpoint_path(snapshot)))
    return [(_hashable(r.key), _hashable(r.value)) for r in frame.collect()]


def _expected_keys(a: list[tuple[Any, Any]], b: list[tuple[Any, Any]]) -> dict[str, int]:
    in_a, in_b = dict(a), dict(b)
    assert len(in_a) == len(a) and len(in_b) == len(b), "a key twice in one state"
    both = in_a.keys() & in_b.keys()
    changed = sum(1 for key in both if in_a[key] != in_b[key])
    return {"only_in_a": len(in_a.keys() - in_b.keys()),
            "only_in_b": len(in_b.keys() - in_a.keys()),
            "changed": changed, "same": len(both) - changed}


def _counts(part: Any) -> dict[str, int]:
    return {"only_in_a": part.only_in_a, "only_in_b": part.only_in_b,
            "changed": part.changed, "same": part.same}


def test_diff_counts_every_kind_of_key_difference_of_a_running_job(
    spark: Any, home: Home, tmp_path: Path
) -> None:
    inp, out = tmp_path / "in", tmp_path / "out"
    params = {"input": str(inp), "output": str(out), "files_per_batch": "1"}
    for slices, snapshot in ((range(0, 1), "s0"), (range(1, 2), "s1"), (range(2, 4), "s3")):
        write_clicks(inp, slices)
        api.run(home, CLICKS, "clicks", params=params, until_caught_up=True, spark=spark)
        api.snapshot_create(home, "clicks", snapshot)

    seen: Counter[str] = Counter()
    for a, b in (("s0", "s1"), ("s1", "s3"), ("s1", "s1")):
        diff = api.snapshot_diff(home, a, b, rows=2, spark=spark)
        assert [op.name for op in diff.operators] == ["hourly_counts", "dedup_clicks"]
        for op in diff.operators:
            [part] = op.parts
            expected = _expected_keys(_rows(spark, home, a, op.name),
                                      _rows(spark, home, b, op.name))
            assert _counts(part) == expected, (a, b, op.name)
            seen.update(kind for kind, n in expected.items() if n)
            for kind in ("only_in_a", "only_in_b", "changed"):
                assert len(part.examples.get(kind, [])) == min(2, expected[kind])
            for example in part.examples.get("changed", []):
                assert example["a"] != example["b"]
    # The job's input made every kind of difference somewhere: none of them is vacuous.
    assert set(seen) == {"only_in_a", "only_in_b", "changed", "same"}, seen

    # The same through the CLI, as JSON and as text; one operator only.
    shown = sparkpoint(home, "snapshot", "diff", "s0", "s1", "--operator", "hourly_counts",
                       "--json")
    assert shown.code == 0, shown.err
    [op] = shown.json()["operators"]
    assert op["operator"] == "hourly_counts"
    assert {k: op["parts"][0][k] for k in ("only_in_a", "only_in_b", "changed", "same")} == \
        _expected_keys(_rows(spark, home, "s0", "hourly_counts"),
                       _rows(spark, home, "s1", "hourly_counts"))
    text = sparkpoint(home, "snapshot", "diff", "s1", "s3")
    assert text.code == 0, text.err
    assert "hourly_counts (aggregation)" in text.out and "dedup_clicks (dedupe)" in text.out
    assert "A: snapshot 's1' (job 'clicks'" in text.out


def test_diff_refuses_an_unknown_operator_or_snapshot_in_one_line(home: Home,
                                                                   tmp_path: Path) -> None:
    """Refused before any state is read, with the names there are."""
    from tests.support.golden_job import GOLDEN, JOB, install_clicks_job

    install_clicks_job(home, GOLDEN, JOB, tmp_path / "job.py")
    api.snapshot_create(home, JOB, "g1")
    for args, code, said in (
        (("g1", "g1", "--operator", "nope"), "UNKNOWN_OPERATOR",
         "operators of 'g1': hourly_counts, dedup_clicks"),
        (("g1", "missing"), "UNKNOWN_SNAPSHOT", "snapshots: g1"),
    ):
        refused = sparkpoint(home, "snapshot", "diff", *args)
        assert refused.code not in (0, 1), refused.err
        lines = [line for line in refused.err.splitlines() if line.startswith("error:")]
        assert len(lines) == 1 and f"[{code}]" in lines[0] and said in lines[0], refused.err
        assert "Traceback" not in refused.err


def _expected_rows(a: list[tuple[Any, Any]], b: list[tuple[Any, Any]]) -> dict[str, int]:
    in_a, in_b = Counter(a), Counter(b)
    return {"only_in_a": sum((in_a - in_b).values()), "only_in_b": sum((in_b - in_a).values()),
            "changed": 0, "same": sum((in_a & in_b).values())}


def test_diff_of_a_stream_stream_join_compares_each_sides_buffered_rows(
    spark: Any, home: Home, tmp_path: Path
) -> None:
    params = {"kind": "join", "version": "v1", "input": str(tmp_path / "in"),
              "views_input": str(tmp_path / "views"), "output": str(tmp_path / "out")}
    for slices, snapshot in ((range(0, 2), "j1"), (range(2, 5), "j2")):
        write_clicks(tmp_path / "in", slices)
        write_clicks(tmp_path / "views", slices, seed=11)
        api.run(home, KINDS, "joined", params=params, until_caught_up=True, spark=spark)
        api.snapshot_create(home, "joined", snapshot)
    join = next(op.name for op in api.snapshot_show(home, "j1").operators
                if op.kind == "stream_stream_join")

    diff = api.snapshot_diff(home, "j1", "j2", operator=join, rows=3, spark=spark)
    [op] = diff.operators
    assert [part.part for part in op.parts] == ["left rows", "right rows"]
    for part, side in zip(op.parts, ("left", "right"), strict=True):
        expected = _expected_rows(_rows(spark, home, "j1", join, side),
                                  _rows(spark, home, "j2", join, side))
        assert _counts(part) == expected, side
        assert expected["only_in_a"] + expected["only_in_b"] > 0, side
        assert len(part.examples.get("only_in_b", [])) == min(3, expected["only_in_b"])
