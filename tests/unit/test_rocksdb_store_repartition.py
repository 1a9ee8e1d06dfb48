"""The RocksDB move in the store (upgrade/rocksdb_store_repartition.py) without Spark: its
plan on a checkpoint whose state files are in a "store" (a local directory here), and its
two kinds of task run by hand as Spark's shuffle would run them. Every key ends in the
partition Spark's hash gives it, the pairs are the old versions' pairs, and a store the
tasks cannot move is left to the staged path."""

from __future__ import annotations

import re
import shutil
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from sparkpoint.checkpoint import rocksdb_writer
from sparkpoint.checkpoint.providers import HDFS_BACKED, ROCKSDB
from sparkpoint.checkpoint.version_files import is_state_data
from sparkpoint.errors import SnapshotDamagedError
from sparkpoint.snapshot.manifest import FileEntry
from sparkpoint.storage.local import checksum_of
from sparkpoint.storage.task_store import task_store
from sparkpoint.upgrade import rocksdb_store_repartition as moving
from sparkpoint.upgrade.rocksdb_repartition import key_partitions

GOLDEN = Path(__file__).resolve().parent.parent / "data" / "golden-rocks"
BATCH = 3  # the golden checkpoint's last batch: state version 4


class _Counter:
    def __init__(self) -> None:
        self.value = 0

    def add(self, amount: int) -> None:
        self.value += amount


@pytest.fixture(autouse=True)
def _same_rocksdb(monkeypatch: pytest.MonkeyPatch) -> None:
    # The session's RocksDB, without a session: rocksdict's own.
    monkeypatch.setattr(moving, "spark_rocksdb_version",
                        lambda _spark: rocksdb_writer.writer_version())


def _in_store(tmp_path: Path) -> tuple[Path, Path, dict[str, str], dict[str, FileEntry]]:
    """The golden checkpoint built in ``staging`` with its state data files in ``store``."""
    staging, store = tmp_path / "staging", tmp_path / "store"
    shutil.copytree(GOLDEN, staging)
    in_store: dict[str, str] = {}
    entries: dict[str, FileEntry] = {}
    for path in sorted(p for p in (staging / "state").rglob("*") if p.is_file()):
        if not is_state_data(path.relative_to(staging / "state").as_posix()):
            continue
        rel = path.relative_to(staging).as_posix()
        moved = store / rel
        moved.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(path, moved)
        size, digest = checksum_of(moved)
        in_store[rel] = str(moved)
        entries[str(moved)] = FileEntry(path=rel, bytes=size, xxh3_128=digest)
    return staging, store, in_store, entries


def _pairs(partition_dir: Path, version: int) -> list[tuple[bytes, bytes]]:
    keys, values = rocksdb_writer.read_arrow(partition_dir, version)
    return list(zip(keys.to_pylist(), values.to_pylist(), strict=True))


def test_the_tasks_place_every_pair_where_spark_hashes_it(tmp_path: Path) -> None:
    staging, store, in_store, entries = _in_store(tmp_path)
    source = task_store(str(store), {})
    move = moving.plan_rocksdb_in_store(None, staging, BATCH, 2, in_store, entries,  # type: ignore[arg-type]
                                        source)
    assert move is not None and len(move.stores) == 2 and len(move.reads) == 4
    wanted, version = 3, BATCH + 1
    read = _Counter()
    shuffled: dict[int, list[tuple[int, bytes]]] = {}
    for part in move.reads:
        for index, data in moving._place(part, move.stores, version, wanted, source,
                                         read):  # type: ignore[arg-type]
            shuffled.setdefault(index, []).append((index, data))
    assert read.value > 0
    target = tmp_path / "target"
    written: list[tuple[str, int]] = []
    for index in range(len(move.stores) * wanted):
        written += moving._write(index, iter(shuffled.get(index, [])), move.stores, version,
                                 wanted, task_store(str(target), {}))
    assert all((target / rel).stat().st_size == size for rel, size in written)
    for number, store_moved in enumerate(move.stores):
        before: Counter[tuple[bytes, bytes]] = Counter()
        for old in range(2):
            before.update(_pairs(store / store_moved.partition_dir(old), version))
        after: Counter[tuple[bytes, bytes]] = Counter()
        for new in range(wanted):
            partition_dir = target / store_moved.partition_dir(new)
            # Every new partition has the version, an empty one too.
            assert (partition_dir / f"{version}.zip").is_file(), (number, new)
            pairs = _pairs(partition_dir, version)
            keys: Any = rocksdb_writer.read_arrow(partition_dir, version)[0]
            placed = key_partitions(keys, store_moved.key_fields, store_moved.hashed_fields,
                                    wanted)
            assert placed is not None and set(placed.tolist()) <= {new}, (number, new)
            after.update(pairs)
        assert after == before and before, number


def test_the_tasks_of_a_move_to_the_hdfs_provider_write_its_snapshot_files(
    tmp_path: Path,
) -> None:
    """A start that also moves the state to the HDFS-backed provider: each new partition's
    task uploads one snapshot file of the version and no RocksDB file, and the (key, value)
    rows of the new partitions, read as the HDFS-backed provider reads them, are the old
    partitions' rows as RocksDB gives them."""
    staging, store, in_store, entries = _in_store(tmp_path)
    source = task_store(str(store), {})
    move = moving.plan_rocksdb_in_store(None, staging, BATCH, 2, in_store, entries,  # type: ignore[arg-type]
                                        source)
    assert move is not None
    wanted, version = 3, BATCH + 1
    shuffled: dict[int, list[tuple[int, bytes]]] = {}
    for part in move.reads:
        for index, data in moving._place(part, move.stores, version, wanted, source,
                                         _Counter()):  # type: ignore[arg-type]
            shuffled.setdefault(index, []).append((index, data))
    target = tmp_path / "target"
    written: list[tuple[str, int]] = []
    for index in range(len(move.stores) * wanted):
        written += moving._write(index, iter(shuffled.get(index, [])), move.stores, version,
                                 wanted, task_store(str(target), {}), into_hdfs=True)
    assert {rel.rsplit("/", 1)[1] for rel, _size in written} == {f"{version}.snapshot"}
    assert len(written) == len(move.stores) * wanted
    for number, moved in enumerate(move.stores):
        before: Counter[tuple[bytes, bytes]] = Counter()
        for old in range(2):
            before.update(ROCKSDB.read_pairs(store / moved.partition_dir(old), version,
                                             moved.encoding))
        after: Counter[tuple[bytes, bytes]] = Counter()
        for new in range(wanted):
            after.update(HDFS_BACKED.read_pairs(target / moved.partition_dir(new), version))
        assert after == before and before, number


def test_a_partition_without_its_versions_zip_is_left_to_the_staged_path(
    tmp_path: Path,
) -> None:
    staging, store, in_store, entries = _in_store(tmp_path)
    del in_store["state/1/1/4.zip"]  # as when version 4 is 3.zip plus a changelog
    assert moving.plan_rocksdb_in_store(None, staging, BATCH, 2, in_store, entries,  # type: ignore[arg-type]
                                        task_store(str(store), {})) is None


def test_a_changed_zip_is_refused_as_damage(tmp_path: Path) -> None:
    staging, store, in_store, entries = _in_store(tmp_path)
    zip_path = Path(in_store["state/0/0/4.zip"])
    zip_path.write_bytes(zip_path.read_bytes() + b"\0")
    with pytest.raises(SnapshotDamagedError, match=re.escape("state/0/0/4.zip")):
        moving.plan_rocksdb_in_store(None, staging, BATCH, 2, in_store, entries,  # type: ignore[arg-type]
                                     task_store(str(store), {}))
