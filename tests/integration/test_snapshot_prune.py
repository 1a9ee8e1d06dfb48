"""``snapshot prune`` on real Spark: the new snapshot lacks exactly the matching keys (read
back with Spark's own state reader), the original is byte-identical, and a job started from
the pruned snapshot behaves as if those keys had never been there, while the reference job
started from the original does not."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest

from sparkpoint import api
from sparkpoint.checkpoint.rocksdb_state import HDFS_PROVIDER, ROCKSDB_PROVIDER
from sparkpoint.crash_points import CRASH_ENV, CRASH_EXIT_CODE, CRASH_POINTS
from sparkpoint.snapshot.store import open_snapshot_store
from sparkpoint.storage.home import Home
from sparkpoint.storage.local import walk_files
from sparkpoint.testing import output_rows
from tests.conftest import REPO
from tests.support.cli import sparkpoint
from tests.support.s3 import S3Server

JOB = REPO / "tests" / "data" / "jobs" / "prune_kinds.py"
JOIN_JOB = REPO / "tests" / "data" / "jobs" / "kinds.py"
PROVIDERS = pytest.mark.parametrize("provider", [ROCKSDB_PROVIDER, HDFS_PROVIDER],
                                    ids=["rocksdb", "hdfs"])
T0 = dt.datetime(2026, 1, 1)
pytestmark = pytest.mark.spark

Event = tuple[str, int]  # (user, minutes after T0)

_mtime_ns = 0


def _write(directory: Path, name: str, events: Iterable[Event]) -> None:
    """One input file, written atomically with a modification time after every earlier one
    (Spark's file source reads new files in that order)."""
    global _mtime_ns
    directory.mkdir(parents=True, exist_ok=True)
    lines = [json.dumps({"event_id": f"{name}-{i}", "user": user, "url": "/",
                         "ts": (T0 + dt.timedelta(minutes=minute)).isoformat() + "Z"})
             for i, (user, minute) in enumerate(events)]
    tmp = directory / f".{name}.tmp"
    tmp.write_text("\n".join(lines) + "\n")
    _mtime_ns = max(_mtime_ns + 10_000_000, os.stat(tmp).st_mtime_ns)
    os.utime(tmp, ns=(_mtime_ns, _mtime_ns))
    os.replace(tmp, directory / f"{name}.json")


def _digests(root: Path) -> dict[str, str]:
    return {path.relative_to(root).as_posix(): hashlib.sha256(path.read_bytes()).hexdigest()
            for path in walk_files(root)}


def _state_keys(spark: Any, home: Home, snapshot: str) -> Counter[Any]:
    """The operator's keys in a snapshot, as Spark's state reader sees them."""
    manifest = api.snapshot_show(home, snapshot)
    frame = (spark.read.format("statestore").option("batchId", manifest.batch_id)
             .load(str(open_snapshot_store(home).checkpoint_path(snapshot))))
    return Counter(_plain(row.key) for row in frame.collect())


def _plain(value: Any) -> Any:
    if hasattr(value, "asDict"):
        return tuple(_plain(item) for item in value)
    return value


def _run(spark: Any, home: Home, job: str, kind: str, inp: Path, out: Path, provider: str,
         from_snapshot: str | None = None) -> None:
    api.run(home, JOB, job, params={"kind": kind, "input": str(inp), "output": str(out)},
            conf={"spark.sql.streaming.stateStore.providerClass": provider},
            until_caught_up=True, from_snapshot=from_snapshot, spark=spark)


@PROVIDERS
def test_pruned_dedupe_keys_are_emitted_again(
    spark: Any, home: Home, tmp_path: Path, provider: str
) -> None:
    inp = tmp_path / "in"
    first = [("ana", 1), ("bo", 2), ("cy", 3), ("dee", 4), ("ana", 5)]
    _write(inp, "a", first)
    _run(spark, home, "origin", "dedupe", inp, tmp_path / "out0", provider)
    api.snapshot_create(home, "origin", "s1")
    original = _digests(home.snapshots_dir / "s1")

    pruned_users = {"ana", "cy"}
    done = sparkpoint(home, "snapshot", "prune", "s1", "s1p", "--operator", "first_users",
                      "--where", "user IN ('ana', 'cy')", "--json")
    assert done.code == 0, done.err
    report = done.json()
    seen = {user for user, _ in first}
    assert report == {
        "snapshot": "s1", "new_snapshot": "s1p", "operator": "first_users",
        "where": "user IN ('ana', 'cy')", "batch": api.snapshot_show(home, "s1").batch_id,
        "rows_before": len(seen), "rows_after": len(seen - pruned_users),
        "rows_removed": len(pruned_users), "bytes_before": report["bytes_before"],
        "bytes_after": api.snapshot_show(home, "s1p").operator("first_users").bytes,  # type: ignore[union-attr]
        "partitions_rewritten": report["partitions_rewritten"],
        # Either provider's state is rewritten by Spark tasks, one per partition with matches
        # (test_rocksdb_writer.py compares the ways a RocksDB store is rewritten).
        "rewritten_by": "spark_tasks",
    }
    assert report["bytes_before"] == api.snapshot_show(home, "s1").operator("first_users").bytes  # type: ignore[union-attr]
    assert _state_keys(spark, home, "s1p") == Counter((u,) for u in seen - pruned_users)
    assert _state_keys(spark, home, "s1") == Counter((u,) for u in seen)
    assert _digests(home.snapshots_dir / "s1") == original
    assert api.snapshot_verify(home, "s1p") == []
    assert api.snapshot_show(home, "s1p").batch_id == api.snapshot_show(home, "s1").batch_id

    later = [("ana", 10), ("bo", 11), ("eli", 12), ("cy", 13)]
    _write(inp, "b", later)
    _run(spark, home, "pruned", "dedupe", inp, tmp_path / "pruned", provider, "s1p")
    _run(spark, home, "reference", "dedupe", inp, tmp_path / "reference", provider, "s1")
    later_users = {user for user, _ in later}
    # Users the state still remembers are not emitted again; pruned ones are, like new ones.
    expected_pruned = Counter((u,) for u in later_users - (seen - pruned_users))
    expected_reference = Counter((u,) for u in later_users - seen)
    assert output_rows(spark, tmp_path / "pruned") == expected_pruned
    assert output_rows(spark, tmp_path / "reference") == expected_reference
    assert expected_pruned != expected_reference
    assert _digests(home.snapshots_dir / "s1") == original


def _window(minute: int) -> tuple[dt.datetime, dt.datetime]:
    start = T0 + dt.timedelta(minutes=minute // 10 * 10)
    return start, start + dt.timedelta(minutes=10)


def _counts(events: Iterable[Event]) -> Counter[tuple[Any, ...]]:
    return Counter((*_window(minute), user) for user, minute in events)


@PROVIDERS
def test_pruned_windows_restart_from_zero(
    spark: Any, home: Home, tmp_path: Path, provider: str
) -> None:
    inp = tmp_path / "in"
    # Watermark after this input: 00:14 - 10 minutes = 00:04; every window stays open.
    first = [("ana", 1), ("bo", 2), ("ana", 12), ("bo", 13), ("cy", 14)]
    _write(inp, "a", first)
    _run(spark, home, "origin", "windowed", inp, tmp_path / "out0", provider)
    assert output_rows(spark, tmp_path / "out0") == Counter()
    api.snapshot_create(home, "origin", "s1")
    original = _digests(home.snapshots_dir / "s1")

    cut = T0 + dt.timedelta(minutes=10)
    result = api.snapshot_prune(home, "s1", "s1p", "counts",
                                f"window.end <= '{cut:%Y-%m-%d %H:%M:%S}'", spark=spark)
    in_state = _counts(first)
    kept = Counter({(start, end, user): n for (start, end, user), n in in_state.items()
                    if end > cut})
    assert result.rows_before == len(in_state)
    assert result.rows_removed == len(in_state) - len(kept) > 0
    assert result.rows_after == len(kept)
    assert result.manifest.operator("counts").rows == len(kept)  # type: ignore[union-attr]
    assert _state_keys(spark, home, "s1p") == Counter(((s, e), u) for s, e, u in kept)
    assert _digests(home.snapshots_dir / "s1") == original
    nothing = api.snapshot_prune(home, "s1", "same", "counts", "user = 'nobody'", spark=spark)
    assert (nothing.rows_removed, nothing.partitions_rewritten) == (0, [])
    assert nothing.rows_after == nothing.rows_before == len(in_state)
    assert _state_keys(spark, home, "same") == _state_keys(spark, home, "s1")

    # Late for neither job (after the snapshot's watermark 00:04), the last event moves the
    # watermark to 00:40, which closes and emits the windows of 00:00 and 00:10.
    later = [("ana", 8), ("bo", 9), ("bo", 16), ("dee", 50)]
    _write(inp, "b", later)
    _run(spark, home, "pruned", "windowed", inp, tmp_path / "pruned", provider, "s1p")
    _run(spark, home, "reference", "windowed", inp, tmp_path / "reference", provider, "s1")
    watermark = T0 + dt.timedelta(minutes=40)
    everything = _counts(first) + _counts(later)
    pruned_view = kept + _counts(later)  # the pruned windows count only what came after
    expected_reference = Counter({(s, e, u, n): 1 for (s, e, u), n in everything.items()
                                  if e <= watermark})
    expected_pruned = Counter({(s, e, u, n): 1 for (s, e, u), n in pruned_view.items()
                               if e <= watermark})
    assert output_rows(spark, tmp_path / "reference") == expected_reference
    assert output_rows(spark, tmp_path / "pruned") == expected_pruned
    assert expected_pruned != expected_reference


def test_prune_refusals_change_nothing(spark: Any, home: Home, tmp_path: Path) -> None:
    inp = tmp_path / "in"
    _write(inp, "a", [("ana", 1), ("bo", 2)])
    _write(tmp_path / "views", "a", [("ana", 1)])
    _run(spark, home, "dedupe", "dedupe", inp, tmp_path / "out", ROCKSDB_PROVIDER)
    api.snapshot_create(home, "dedupe", "s1")
    api.run(home, JOIN_JOB, "join", params={"kind": "join", "input": str(inp),
                                            "views_input": str(tmp_path / "views"),
                                            "output": str(tmp_path / "join_out")},
            until_caught_up=True, spark=spark)
    api.snapshot_create(home, "join", "sj")
    before = _digests(home.snapshots_dir)

    unsupported = sparkpoint(home, "snapshot", "prune", "sj", "x", "--operator",
                             "clicks_views", "--where", "user = 'ana'")
    assert unsupported.code == 4, unsupported.err
    assert "[PRUNE_UNSUPPORTED]" in unsupported.err and "stream_stream_join" in unsupported.err
    assert len(unsupported.err.strip().splitlines()) == 1

    unknown = sparkpoint(home, "snapshot", "prune", "s1", "x", "--operator", "nope",
                         "--where", "user = 'ana'", "--json")
    assert unknown.code == 4
    assert unknown.json()["error"]["code"] == "UNKNOWN_OPERATOR"
    assert "first_users" in unknown.json()["error"]["message"]

    taken = sparkpoint(home, "snapshot", "prune", "s1", "sj", "--operator", "first_users",
                       "--where", "user = 'ana'")
    assert taken.code == 4 and "[NAME_TAKEN]" in taken.err

    bad = sparkpoint(home, "snapshot", "prune", "s1", "x", "--operator", "first_users",
                     "--where", "url = '/'", "--json")
    assert bad.code == 3, bad.err
    error = bad.json()["error"]
    assert error["code"] == "INVALID_PREDICATE"
    assert "user string" in error["message"] and "url = '/'" in error["message"]

    failing = sparkpoint(home, "snapshot", "prune", "s1", "x", "--operator", "first_users",
                         "--where", "cast(user AS INT) = 1")
    assert failing.code == 3, failing.err
    assert "[INVALID_PREDICATE]" in failing.err and "CAST" in failing.err

    assert _digests(home.snapshots_dir) == before
    assert "x" not in [m.name for m in api.snapshot_list(home)]


PRUNE_POINTS = [p for p in CRASH_POINTS if p.startswith("prune.")]


@pytest.mark.parametrize("point", PRUNE_POINTS)
def test_prune_cut_off_publishes_nothing_and_can_be_run_again(
    spark: Any, home: Home, tmp_path: Path, point: str
) -> None:
    inp = tmp_path / "in"
    _write(inp, "a", [("ana", 1), ("bo", 2), ("cy", 3)])
    _run(spark, home, "origin", "dedupe", inp, tmp_path / "out", ROCKSDB_PROVIDER)
    api.snapshot_create(home, "origin", "s1")
    original = _digests(home.snapshots_dir / "s1")
    args = ("snapshot", "prune", "s1", "s1p", "--operator", "first_users", "--where",
            "user = 'bo'")

    cut = sparkpoint(home, *args, env={CRASH_ENV: point})
    assert cut.code == CRASH_EXIT_CODE, cut.err
    assert f"crash point {point}" in cut.err
    assert [m.name for m in api.snapshot_list(home)] == ["s1"]
    assert _digests(home.snapshots_dir / "s1") == original

    # Run again in this process: the cut-off is the CLI's, the retry an ordinary prune.
    again = api.snapshot_prune(home, "s1", "s1p", "first_users", "user = 'bo'", spark=spark)
    assert again.rows_removed == 1
    assert _state_keys(spark, home, "s1p") == Counter([("ana",), ("cy",)])
    assert _digests(home.snapshots_dir / "s1") == original
    # The cut-off run's scratch copy was removed by the next prune.
    assert not any((home.scratch_dir / "prune").iterdir())


def test_prune_on_s3_publishes_through_the_object_store(
    spark: Any, s3_server: S3Server, tmp_path: Path
) -> None:
    home = Home(tmp_path / "home", f"s3://{s3_server.new_bucket()}/snaps")
    inp = tmp_path / "in"
    _write(inp, "a", [("ana", 1), ("bo", 2), ("cy", 3)])
    _run(spark, home, "origin", "dedupe", inp, tmp_path / "out0", ROCKSDB_PROVIDER)
    api.snapshot_create(home, "origin", "s1")
    original = api.snapshot_show(home, "s1").to_json()

    assert home.snapshots is not None
    done = sparkpoint(home, "--snapshots", home.snapshots, "snapshot", "prune", "s1", "s1p",
                      "--operator", "first_users", "--where", "user <> 'bo'", "--json")
    assert done.code == 0, done.err
    assert done.json()["rows_removed"] == 2
    assert [m.name for m in api.snapshot_list(home)] == ["s1", "s1p"]
    assert api.snapshot_verify(home, "s1p") == [] and api.snapshot_verify(home, "s1") == []
    assert api.snapshot_show(home, "s1").to_json() == original
    assert _state_keys(spark, home, "s1p") == Counter([("bo",)])

    _write(inp, "b", [("ana", 10), ("bo", 11)])
    _run(spark, home, "pruned", "dedupe", inp, tmp_path / "pruned", ROCKSDB_PROVIDER, "s1p")
    assert output_rows(spark, tmp_path / "pruned") == Counter([("ana",)])


def test_prune_in_the_store_cut_off_at_each_point_is_run_again_and_leaves_nothing(
    spark: Any, s3_server: S3Server, tmp_path: Path,
) -> None:
    """With the snapshots on S3 the prune runs in the store (a scratch checkpoint under
    ``.scratch/prune/`` there, Spark's reader and sparkpoint's JVM tasks); cut off at each
    of its points, it lists nothing new and leaves the original whole; the next prune
    removes the cut-off one's scratch prefix (its process is gone) and writes the pruned
    snapshot, whose state is the original's without the matching keys. (RocksDB state;
    the HDFS provider's prune in the store runs on the other-host cluster, on HDFS.)"""
    provider = ROCKSDB_PROVIDER
    from sparkpoint.storage.stores import file_io

    snapshots = f"s3://{s3_server.new_bucket()}/snaps"
    home = Home(tmp_path / "home", snapshots)
    inp = tmp_path / "in"
    users = [(f"u{n:03d}", n) for n in range(60)]
    _write(inp, "a", users)
    _run(spark, home, "origin", "dedupe", inp, tmp_path / "out0", provider)
    api.snapshot_create(home, "origin", "s1")
    original = api.snapshot_show(home, "s1").to_json()
    args = ("--snapshots", snapshots, "snapshot", "prune", "s1", "s1p", "--operator",
            "first_users", "--where", "user < 'u020' OR user LIKE '%5'", "--json")
    scratch = f"{snapshots}/.scratch/prune"
    for point in PRUNE_POINTS:
        cut = sparkpoint(home, *args, env={CRASH_ENV: point})
        assert cut.code == CRASH_EXIT_CODE, cut.err
        assert [m.name for m in api.snapshot_list(home)] == ["s1"], point
        assert api.snapshot_show(home, "s1").to_json() == original
        assert file_io(snapshots).list_names(scratch), point  # the cut-off one's prefix
    done = sparkpoint(home, *args)
    assert done.code == 0, done.err
    assert "Spark tasks that read and write the store" in done.err + done.out
    kept = [(user,) for user, _n in users if not (user < "u020" or user.endswith("5"))]
    assert done.json()["rows_removed"] == len(users) - len(kept)
    assert done.json()["rewritten_by"] == "spark_tasks"
    assert file_io(snapshots).list_names(scratch) == []
    assert api.snapshot_verify(home, "s1p") == [] and api.snapshot_verify(home, "s1") == []
    assert _state_keys(spark, home, "s1p") == Counter(kept)


def test_rows_come_over_as_their_stored_bytes_in_one_call(spark: Any) -> None:
    """Spark fact pinned (4.3.0): an ``InternalRow[]`` of UnsafeRows, Java-serialized, holds
    each row as ``writeExternal`` writes it (length, fields, bytes); read back, the bytes
    equal each row's own ``getBytes()``, for keys of every width and a string of > 1 KiB
    (split over several block data records)."""
    from sparkpoint.spark.row_bytes import (
        RowStreamError,
        iter_rows_bytes,
        parse_rows,
        rows_bytes,
    )

    frame = spark.createDataFrame(
        [("a", 1, None), ("b" * 3000, 2, 2.5), ("", -3, 0.0)], "s STRING, n INT, d DOUBLE")
    java_rows = frame._jdf.queryExecution().executedPlan().executeCollect()
    expected = [bytes(java_rows[i].getBytes()) for i in range(len(java_rows))]
    assert rows_bytes(spark, java_rows) == expected
    assert len(expected) == 3 and len(expected[1]) > 3000
    # Taken from Spark's collected iterator two rows per call, in the same order.
    collected = frame._jdf.queryExecution().executedPlan().executeCollectIterator()
    assert list(iter_rows_bytes(spark, collected._2(), 2)) == expected
    with pytest.raises(RowStreamError):
        parse_rows(b"not a stream")
    with pytest.raises(RowStreamError):
        parse_rows(b"\xac\xed\x00\x05\x75\x72")  # cut off
