"""Which committed batches a checkpoint still holds completely, from its listings alone."""

from __future__ import annotations

import datetime as dt
import json
import os
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sparkpoint.checkpoint.layout import Checkpoint
from sparkpoint.checkpoint.retained import iso_utc, loadable_versions, snapshottable_batches
from sparkpoint.checkpoint.rocksdb_state import HDFS_PROVIDER, ROCKSDB_PROVIDER
from sparkpoint.errors import BatchNotHeldError
from sparkpoint.snapshot.past import batch_at, parse_time, require_held

T0 = dt.datetime(2026, 11, 23, 14, 0, tzinfo=dt.UTC)


def _checkpoint(root: Path, batches: range, provider: str, partitions: int = 2) -> Checkpoint:
    """Logs for ``batches``, Spark's batch times one minute apart from T0, one operator.
    Every commit file has one modification time, T0: batches are never told apart by it."""
    (root / "offsets").mkdir(parents=True)
    (root / "commits").mkdir()
    (root / "metadata").write_text('{"id":"q"}')
    for batch in batches:
        when = T0 + dt.timedelta(minutes=batch)
        meta = json.dumps({"batchWatermarkMs": 0,
                           "batchTimestampMs": int(when.timestamp() * 1000),
                           "conf": {"spark.sql.streaming.stateStore.providerClass": provider}})
        (root / "offsets" / str(batch)).write_text(f"v1\n{meta}\n{{}}")
        commit = root / "commits" / str(batch)
        commit.write_text('v1\n{"nextBatchWatermarkMs":0}')
        os.utime(commit, (T0.timestamp(), T0.timestamp()))
    op = root / "state" / "0" / "_metadata"
    op.mkdir(parents=True)
    (op / "metadata").write_text("v1\n" + json.dumps({
        "operatorInfo": {"operatorId": 0, "operatorName": "dedupe"},
        "stateStoreInfo": [{"storeName": "default", "numColsPrefixKey": 0,
                            "numPartitions": partitions}]}))
    return Checkpoint(root)


def _files(checkpoint: Checkpoint, partition: int, *names: str) -> None:
    pdir = checkpoint.root / "state" / "0" / str(partition)
    pdir.mkdir(parents=True, exist_ok=True)
    for name in names:
        (pdir / name).write_bytes(b"")


def _held(checkpoint: Checkpoint) -> list[int]:
    return [entry.batch for entry in snapshottable_batches(checkpoint)]


def test_hdfs_needs_a_snapshot_or_every_delta_in_every_partition(tmp_path: Path) -> None:
    ckpt = _checkpoint(tmp_path, range(0, 7), HDFS_PROVIDER)
    # Partition 0: deltas 1..7 but 3 cleaned, snapshot 4 written: versions 1, 2, 4..7.
    _files(ckpt, 0, "1.delta", "2.delta", "4.delta", "5.delta", "4.snapshot", "6.delta",
           "7.delta")
    # Partition 1: everything up to 6 but 7.delta missing.
    _files(ckpt, 1, *(f"{v}.delta" for v in range(1, 7)))
    # Batch K needs version K+1: 0 -> 1, 1 -> 2, 3 -> 4, 4 -> 5, 5 -> 6 (6 -> 7 not in p1).
    assert _held(ckpt) == [0, 1, 3, 4, 5]


def test_offsets_of_the_previous_batch_are_needed(tmp_path: Path) -> None:
    ckpt = _checkpoint(tmp_path, range(0, 5), ROCKSDB_PROVIDER, partitions=1)
    _files(ckpt, 0, "1.zip", "3.zip", "4.changelog", "5.changelog")
    (ckpt.root / "offsets" / "1").unlink()  # batches 1 and 2 lose a log entry they need
    # Version 1 (batch 0) from 1.zip; 2 has no changelog; 4, 5 from 3.zip + changelogs.
    assert _held(ckpt) == [0, 3, 4]


def test_at_picks_the_newest_batch_with_a_time_by_then_and_never_an_older_one(
    tmp_path: Path,
) -> None:
    ckpt = _checkpoint(tmp_path, range(2, 8), HDFS_PROVIDER, partitions=1)
    _files(ckpt, 0, "2.snapshot", *(f"{v}.delta" for v in range(3, 9)))
    (ckpt.root / "offsets" / "2").unlink()  # batch 3 is listed but not held, 2 has no time
    held = snapshottable_batches(ckpt)
    assert [entry.batch for entry in held] == [4, 5, 6, 7]
    # The times listed are Spark's batch times (the commit files all have T0's).
    assert [entry.batch_time for entry in held] == [
        T0 + dt.timedelta(minutes=m) for m in (4, 5, 6, 7)]
    at = T0 + dt.timedelta(minutes=5, seconds=30)
    assert batch_at("j", ckpt, at) == 5
    for entry in held:  # at, not only before: a listed time takes its batch
        assert batch_at("j", ckpt, parse_time(iso_utc(entry.batch_time))) == entry.batch
    assert batch_at("j", ckpt, T0 + dt.timedelta(days=1)) == 7
    with pytest.raises(BatchNotHeldError, match=r"newest batch with a time at or before .* is "
                                                r"batch 3, which it no longer holds"):
        batch_at("j", ckpt, T0 + dt.timedelta(minutes=3, seconds=1))
    # Batch 2's offsets entry (its time) was cleaned up: refused with the range held.
    for before in (T0 + dt.timedelta(minutes=2, seconds=30), T0):
        with pytest.raises(BatchNotHeldError, match=r"no batch it records has a time at or "
                                                    r"before .*; its checkpoint holds batches "
                                                    r"4 \(time 2026-11-23T14:04:00.000Z\) to 7"):
            batch_at("j", ckpt, before)
    with pytest.raises(BatchNotHeldError, match=r"holds batches 4 \(time "
                                                r"2026-11-23T14:04:00.000Z\) to 7 \(time "
                                                r"2026-11-23T14:07:00.000Z\)"):
        require_held("j", ckpt, 2)


def test_time_without_zone_is_local_time(monkeypatch: pytest.MonkeyPatch) -> None:
    import time

    monkeypatch.setenv("TZ", "Europe/Paris")
    time.tzset()
    try:
        assert parse_time("2026-11-23T15:00") == T0 + dt.timedelta(hours=0)
        assert parse_time("2026-11-23T14:00:00Z") == T0
        assert parse_time("2026-11-23T16:00:00+02:00") == T0
    finally:
        monkeypatch.undo()
        time.tzset()


def test_rocksdb_changelogs_before_the_first_zip_rebuild_from_the_empty_store(
    tmp_path: Path,
) -> None:
    ckpt = _checkpoint(tmp_path, range(0, 4), ROCKSDB_PROVIDER, partitions=1)
    _files(ckpt, 0, "1.changelog", "2.changelog", "3.changelog", "4.zip")
    assert _held(ckpt) == [0, 1, 2, 3]
    (ckpt.root / "state" / "0" / "0" / "2.changelog").unlink()
    assert _held(ckpt) == [0, 3]


@given(st.sets(st.integers(1, 30), max_size=12), st.sets(st.integers(1, 30)),
       st.sets(st.integers(1, 30)))
def test_loadable_versions_follow_the_newest_base_and_the_steps_after_it(
    versions: set[int], bases: set[int], steps: set[int]
) -> None:
    def by_definition(version: int) -> bool:
        base = max((b for b in bases if b <= version), default=0)
        return all(step in steps for step in range(base + 1, version + 1))

    assert loadable_versions(versions, bases, steps) == {v for v in versions if by_definition(v)}
