"""The HDFS state store files are read and written without a JVM: records round-trip, real
Spark files are reproduced byte for byte, the load rule matches Spark's own state reader, and a
checkpoint compacted to one snapshot per store restarts in Spark like the original."""

from __future__ import annotations

import calendar
import json
import os
import random
import re
import shutil
import struct
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import xxhash
from hypothesis import example, given, settings
from hypothesis import strategies as st

from sparkpoint.checkpoint.hdfs_state import (
    DEFAULT_BLOCK_SIZE,
    count_rows,
    files_for_version,
    load_fixed_version,
    load_version,
    read_records,
    write_fixed_snapshot,
    write_records,
    write_snapshot,
)
from sparkpoint.errors import CheckpointFormatError, UsageError

DATA = Path(__file__).resolve().parent.parent / "data"

# Files written by Spark 4.3 (count aggregation, shuffle partition 0): batch 0 put groups "g0"
# (count 2) and "g2" (count 1); batch 1 changed nothing, which is a file holding only -1.
SPARK_DELTA_WITH_TWO_PUTS = bytes.fromhex(
    "4c5a34426c6f636b2538000000640000000fdf88095300000018000100a302000000100000006730110002"
    "0f00010200001c000302000e300013321a00073000c00100000000000000ffffffff4c5a34426c6f636b15"
    "000000000000000000000000"
)
SPARK_EMPTY_DELTA = bytes.fromhex(
    "4c5a34426c6f636b150400000004000000db804d08ffffffff4c5a34426c6f636b15000000000000000000000000"
)
G0_KEY = bytes.fromhex("000000000000000002000000100000006730000000000000")
G2_KEY = bytes.fromhex("000000000000000002000000100000006732000000000000")
COUNT_2 = bytes.fromhex("00000000000000000200000000000000")
COUNT_1 = bytes.fromhex("00000000000000000100000000000000")

Record = tuple[bytes, bytes | None]


def _header(token: int, compressed: int, original: int, check: int) -> bytes:
    return struct.pack("<8sBiiI", b"LZ4Block", token, compressed, original, check)


def _blocks(data: bytes) -> list[tuple[int, int, int]]:
    """(token, compressed length, decompressed length) of each block."""
    out = []
    pos = 0
    while pos < len(data):
        _, token, clen, dlen, _ = struct.unpack_from("<8sBiiI", data, pos)
        out.append((token, clen, dlen))
        pos += 21 + clen
    return out


# --------------------------------------------------------------------------------------------
# Format


def test_real_spark_delta_is_read_and_rewritten_byte_for_byte() -> None:
    records = read_records(SPARK_DELTA_WITH_TWO_PUTS, "1.delta")
    assert records == [(G0_KEY, COUNT_2), (G2_KEY, COUNT_1)]
    assert write_records(records) == SPARK_DELTA_WITH_TWO_PUTS
    assert [token for token, _, _ in _blocks(SPARK_DELTA_WITH_TWO_PUTS)] == [0x25, 0x15]


def test_a_file_holding_only_the_end_marker_is_an_empty_file() -> None:
    assert read_records(SPARK_EMPTY_DELTA, "2.delta") == []
    assert write_records([]) == SPARK_EMPTY_DELTA


records_strategy = st.lists(
    st.tuples(st.binary(max_size=300), st.one_of(st.none(), st.binary(max_size=300))),
    max_size=60,
)


@settings(max_examples=200, deadline=None)
@given(records=records_strategy, block_size=st.sampled_from([64, 100, 1000, DEFAULT_BLOCK_SIZE]))
def test_written_records_read_back_unchanged(records: list[Record], block_size: int) -> None:
    data = write_records(records, block_size=block_size)
    assert read_records(data, "x.delta") == records
    blocks = _blocks(data)
    assert blocks[-1][0] & 0xF0 == 0x10
    assert blocks[-1][1:] == (0, 0)
    # Every block but the last data block is full, as LZ4BlockOutputStream cuts them.
    assert all(dlen == block_size for _, _, dlen in blocks[:-2])
    assert all(0 < dlen <= block_size for _, _, dlen in blocks[:-1])


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), count=st.integers(1000, 4000))
def test_large_files_span_blocks_and_round_trip(seed: int, count: int) -> None:
    rnd = random.Random(seed)
    records: list[Record] = [
        (
            rnd.randbytes(rnd.randint(8, 64)),
            None if rnd.random() < 0.2 else bytes(rnd.randint(0, 40)) + rnd.randbytes(8),
        )
        for _ in range(count)
    ]
    data = write_records(records)
    assert len(_blocks(data)) > 2
    assert read_records(data, "big.snapshot") == records


def test_blocks_are_compressed_only_when_that_makes_them_smaller() -> None:
    compressible = write_records([(b"k" * 16, bytes(4000))])
    incompressible = write_records([(os.urandom(16), os.urandom(4000))])
    assert [t for t, _, _ in _blocks(compressible)] == [0x25, 0x15]
    assert [t for t, _, _ in _blocks(incompressible)] == [0x15, 0x15]
    assert read_records(incompressible, "x")[0][1] is not None


def test_block_size_sets_the_token_level_and_is_range_checked() -> None:
    data = write_records([(b"k", b"v")], block_size=64 * 1024)
    assert _blocks(data)[0][0] & 0x0F == 6
    assert _blocks(write_records([], block_size=64))[0][0] == 0x10
    with pytest.raises(UsageError, match="block size 63"):
        write_records([], block_size=63)


def test_concatenated_streams_read_as_one_like_spark() -> None:
    # Spark reads with stopOnEmptyBlock=false: an end-of-stream block followed by more blocks
    # continues the same data.
    first = _raw_stream(_i32(1) + b"a" + _i32(1) + b"1")
    second = _raw_stream(_i32(1) + b"b" + _i32(-1) + _i32(-1))
    assert read_records(first + second, "x") == [(b"a", b"1"), (b"b", None)]


def _raw_stream(payload: bytes) -> bytes:
    check = xxhash.xxh32_intdigest(payload, seed=0x9747B28C) & 0x0FFFFFFF
    return _header(0x15, len(payload), len(payload), check) + payload + _header(0x15, 0, 0, 0)


def _i32(value: int) -> bytes:
    return struct.pack(">i", value)


GOOD = write_records([(b"key-1", b"value-1"), (b"key-2", None)])
END = _header(0x15, 0, 0, 0)

MALFORMED: list[tuple[str, bytes, str]] = [
    ("empty", b"", "empty file"),
    ("zstd", b"\x28\xb5\x2f\xfd" + bytes(30), "zstd stream"),
    ("bad magic", b"LZ4Blokk" + GOOD[8:], "bad LZ4 block magic at byte 0"),
    ("short header", GOOD[:10], "truncated LZ4 block header at byte 0"),
    ("bad method", GOOD[:8] + b"\x35" + GOOD[9:], "found token 0x35"),
    ("truncated body", GOOD[:30], "truncated LZ4 block at byte 0"),
    ("no end block", GOOD[: -len(END)], "missing LZ4 end-of-stream block"),
    (
        "bad checksum",
        GOOD[:17] + bytes([GOOD[17] ^ 1]) + GOOD[18:],
        "checksum mismatch in LZ4 block at byte 0",
    ),
    ("end block checksum", GOOD[: -len(END)] + _header(0x15, 0, 0, 7), "has checksum 0x00000007"),
    (
        "raw lengths differ",
        _header(0x15, 4, 5, 0) + b"\xff\xff\xff\xff" + END,
        "inconsistent LZ4 block header",
    ),
    ("too long for level", _header(0x10, 2000, 2000, 0) + bytes(2000) + END, "at most 1024"),
    ("one length zero", _header(0x25, 3, 0, 0) + b"abc" + END, "both zero or both non-zero"),
    ("corrupt lz4", _header(0x25, 3, 40, 0) + b"\xf0\xff\xff" + END, "corrupt LZ4 data"),
    ("no records end", _raw_stream(_i32(1) + b"k" + _i32(1) + b"v"), "expected a key length"),
    ("short key", _raw_stream(_i32(10) + b"k"), "expected key bytes (10 bytes)"),
    ("short value", _raw_stream(_i32(1) + b"k" + _i32(9) + b"v"), "expected value bytes"),
    ("bad key length", _raw_stream(_i32(-2)), "bad key length -2"),
    ("bad value length", _raw_stream(_i32(1) + b"k" + _i32(-5)), "bad value length -5"),
    ("trailing bytes", _raw_stream(_i32(-1) + b"junk"), "4 unexpected bytes after the end"),
]


@pytest.mark.parametrize(
    ("data", "message"), [m[1:] for m in MALFORMED], ids=[m[0] for m in MALFORMED]
)
def test_malformed_files_are_refused_naming_path_and_problem(data: bytes, message: str) -> None:
    with pytest.raises(CheckpointFormatError) as info:
        read_records(data, "/ckpt/state/0/1/7.delta")
    assert "/ckpt/state/0/1/7.delta" in str(info.value)
    assert message in str(info.value)


def test_golden_checkpoint_state_files_round_trip_byte_for_byte() -> None:
    files = sorted(
        p
        for p in (DATA / "golden-hdfs" / "state").rglob("*")
        if p.suffix in (".delta", ".snapshot")
    )
    if not files:
        pytest.skip("no golden HDFS state files in tests/data")
    for path in files:
        data = path.read_bytes()
        assert write_records(read_records(data, str(path))) == data, path


# --------------------------------------------------------------------------------------------
# Directories


def _put(directory: Path, name: str, records: list[Record]) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / name).write_bytes(write_records(records))


def test_load_applies_deltas_in_order_on_top_of_the_newest_snapshot(tmp_path: Path) -> None:
    d = tmp_path / "state" / "0" / "0"
    _put(d, "1.delta", [(b"a", b"1"), (b"b", b"1")])
    _put(d, "2.delta", [(b"a", b"2"), (b"b", None), (b"gone", None)])
    _put(d, "3.delta", [(b"c", b"3")])
    _put(d, "4.delta", [(b"a", None)])
    # Snapshot 2 disagrees with the deltas on purpose: it must win for versions >= 2.
    _put(d, "2.snapshot", [(b"snap", b"s")])
    (d / ".2.snapshot.crc").write_bytes(b"crc\0ignored")
    (d / "_metadata").mkdir()
    (d / ".5.delta.1234.tmp").write_bytes(b"partial")
    (d / "5.delta.crc").write_bytes(b"x")

    assert load_version(d, 0) == {}
    assert load_version(d, 1) == {b"a": b"1", b"b": b"1"}
    assert load_version(d, 2) == {b"snap": b"s"}
    assert load_version(d, 3) == {b"snap": b"s", b"c": b"3"}
    assert load_version(d, 4) == {b"snap": b"s", b"c": b"3"}
    (d / "2.snapshot").unlink()
    assert load_version(d, 4) == {b"c": b"3"}


def test_a_missing_delta_is_reported_with_what_is_there(tmp_path: Path) -> None:
    d = tmp_path / "p"
    _put(d, "1.delta", [])
    _put(d, "3.snapshot", [(b"k", b"v")])
    _put(d, "5.delta", [])
    with pytest.raises(CheckpointFormatError) as info:
        load_version(d, 5)
    text = str(info.value)
    assert str(d) in text
    assert "expected delta files 4..5 on top of snapshot 3, missing 4.delta" in text
    assert "found deltas 1, 5, snapshots 3" in text
    with pytest.raises(CheckpointFormatError, match=r"1\.\.2 on top of an empty state"):
        load_version(d, 2)
    assert load_version(d, 3) == {b"k": b"v"}


def test_files_for_version_names_what_spark_reads(tmp_path: Path) -> None:
    d = tmp_path / "p"
    for name in ("1.delta", "2.delta", "3.delta", "4.delta", "5.delta", "6.delta"):
        _put(d, name, [])
    _put(d, "2.snapshot", [])
    _put(d, "5.snapshot", [])
    (d / ".3.delta.crc").write_bytes(b"x")
    assert files_for_version(d, 1).names() == ["1.delta"]
    assert files_for_version(d, 2).names() == ["2.snapshot"]
    assert files_for_version(d, 4).names() == ["2.snapshot", "3.delta", "4.delta"]
    # A snapshot file past the version is not Spark's base for it.
    assert files_for_version(d, 4).snapshot == 2
    assert files_for_version(d, 6).names() == ["5.snapshot", "6.delta"]
    assert files_for_version(d, 0).names() == []
    (d / "2.snapshot").unlink()
    assert files_for_version(d, 4).names() == ["1.delta", "2.delta", "3.delta", "4.delta"]


# Any records, and records of one key and one value length (or all removals), which are
# counted the vectorized way.
_ANY_RECORDS = st.tuples(st.sampled_from([b"a", b"bb", b"c" * 9, b"", b"d\0"]),
                         st.one_of(st.none(), st.binary(max_size=12)))
def _colliding_keys() -> tuple[bytes, bytes]:
    """Two 16-byte keys the vectorized count hashes alike (it must still tell them apart)."""
    mask = (1 << 64) - 1
    multiplier = 0x9E3779B97F4A7C15
    second_word = 2 ^ (1 * multiplier & mask) ^ (3 * multiplier & mask)
    return struct.pack("<QQ", 1, 2), struct.pack("<QQ", 3, second_word)


_KEYS_16 = [b"k1".ljust(16, b"\0"), b"k2".ljust(16, b"\0"), bytes(16), *_colliding_keys()]
_FIXED_PUTS = st.tuples(st.sampled_from(_KEYS_16), st.sampled_from([b"v" * 8, bytes(8)]))
_FIXED_REMOVALS = st.tuples(st.sampled_from(_KEYS_16), st.none())
_DELTA = st.one_of(st.lists(_ANY_RECORDS, max_size=8), st.lists(_FIXED_PUTS, max_size=8),
                   st.lists(_FIXED_REMOVALS, max_size=4))


@settings(max_examples=150, deadline=None)
@given(st.lists(_DELTA, min_size=1, max_size=5), st.integers(min_value=0, max_value=5))
def test_count_rows_equals_the_loaded_state(
    tmp_path_factory: pytest.TempPathFactory, deltas: list[list[Record]], snapshot_at: int
) -> None:
    d = tmp_path_factory.mktemp("p")
    for version, records in enumerate(deltas, start=1):
        _put(d, f"{version}.delta", records)
    if 0 < snapshot_at <= len(deltas):
        # A snapshot file holds what the deltas up to it hold, as Spark writes it.
        state = load_version(d, snapshot_at)
        _put(d, f"{snapshot_at}.snapshot", list(state.items()))
    for version in range(len(deltas) + 1):
        files = files_for_version(d, version)
        assert count_rows(d, files) == len(load_version(d, version))


@settings(max_examples=120, deadline=None)
@given(st.lists(st.one_of(st.lists(_FIXED_PUTS, max_size=8),
                          st.lists(_FIXED_REMOVALS, max_size=4), st.just([])),
                min_size=1, max_size=5),
       st.integers(min_value=0, max_value=5))
def test_fixed_loading_equals_the_loaded_state_and_writes_back(
    tmp_path_factory: pytest.TempPathFactory, deltas: list[list[Record]], snapshot_at: int
) -> None:
    d = tmp_path_factory.mktemp("p")
    for version, records in enumerate(deltas, start=1):
        _put(d, f"{version}.delta", records)
    if 0 < snapshot_at <= len(deltas):
        _put(d, f"{snapshot_at}.snapshot", list(load_version(d, snapshot_at).items()))
    for version in range(1, len(deltas) + 1):
        fixed = load_fixed_version(d, version)
        expected = load_version(d, version)
        if fixed is None:
            # Only keys whose hashes collide fall back to the generic reader.
            assert set(_colliding_keys()) <= {key for records in deltas for key, _ in records}
            continue
        loaded = {bytes(k): bytes(v) for k, v in zip(fixed.keys, fixed.values, strict=True)}
        assert loaded == expected
        if expected:
            out = d / "out"
            write_fixed_snapshot(out, 9, fixed)
            assert load_version(out, 9) == expected
            # Byte for byte what the generic writer makes of the same records in that order.
            assert (out / "9.snapshot").read_bytes() == write_records(list(loaded.items()))


def test_fixed_loading_declines_mixed_shapes(tmp_path: Path) -> None:
    _put(tmp_path, "1.delta", [(b"k" * 8, b"v" * 8), (b"k" * 16, b"v" * 8)])
    assert load_fixed_version(tmp_path, 1) is None
    _put(tmp_path, "1.delta", [(b"k" * 8, b"v" * 8)])
    _put(tmp_path, "2.delta", [(b"j" * 8, b"v" * 16)])
    assert load_fixed_version(tmp_path, 2) is None
    assert load_fixed_version(tmp_path, 1) is not None


def test_count_rows_tells_apart_keys_whose_hashes_collide(tmp_path: Path) -> None:
    one, other = _colliding_keys()
    _put(tmp_path, "1.delta", [(one, b"v" * 8)])
    _put(tmp_path, "2.delta", [(other, b"w" * 8)])
    _put(tmp_path, "3.delta", [(one, None)])
    assert [count_rows(tmp_path, files_for_version(tmp_path, v)) for v in (1, 2, 3)] == [1, 2, 1]


def test_count_rows_refuses_a_snapshot_holding_a_removal(tmp_path: Path) -> None:
    for records in ([(b"k1", None)], [(b"k1", b"v"), (b"k22", None)]):
        _put(tmp_path, "1.snapshot", records)
        with pytest.raises(CheckpointFormatError, match="snapshot contains a removal record"):
            count_rows(tmp_path, files_for_version(tmp_path, 1))


@pytest.mark.parametrize(
    ("data", "message"), [m[1:] for m in MALFORMED], ids=[m[0] for m in MALFORMED]
)
def test_count_rows_refuses_malformed_files_like_the_reader(
    tmp_path: Path, data: bytes, message: str
) -> None:
    (tmp_path / "1.delta").write_bytes(data)
    with pytest.raises(CheckpointFormatError, match=re.escape(message)):
        count_rows(tmp_path, files_for_version(tmp_path, 1))


def test_load_refuses_bad_arguments_and_bad_directories(tmp_path: Path) -> None:
    with pytest.raises(UsageError):
        load_version(tmp_path, -1)
    with pytest.raises(CheckpointFormatError, match="not found"):
        load_version(tmp_path / "nope", 1)
    (tmp_path / "file").write_bytes(b"")
    with pytest.raises(CheckpointFormatError, match="found a file"):
        load_version(tmp_path / "file", 1)
    _put(tmp_path / "s", "1.snapshot", [(b"k", None)])
    with pytest.raises(CheckpointFormatError, match="snapshot contains a removal"):
        load_version(tmp_path / "s", 1)
    _put(tmp_path / "c", "1.delta", [(b"k", b"v")])
    (tmp_path / "c" / "1.delta").write_bytes(b"garbage-garbage-garbage-garbage")
    with pytest.raises(CheckpointFormatError, match=r"1\.delta: bad LZ4 block magic"):
        load_version(tmp_path / "c", 1)


def test_write_snapshot_is_atomic_loadable_and_clears_stale_checksums(tmp_path: Path) -> None:
    d = tmp_path / "out" / "state" / "1" / "0"
    state = {b"k%d" % i: b"v" * i for i in range(2000)}
    written = write_snapshot(d, 7, state)
    assert written == (d / "7.snapshot").stat().st_size
    assert sorted(p.name for p in d.iterdir()) == ["7.snapshot"]
    assert load_version(d, 7) == state

    (d / ".7.snapshot.crc").write_bytes(b"crc\0stale")
    (d / "7.snapshot.crc").write_bytes(b"{}")
    write_snapshot(d, 7, {b"new": b"1"})
    assert sorted(p.name for p in d.iterdir()) == ["7.snapshot"]
    assert load_version(d, 7) == {b"new": b"1"}
    with pytest.raises(CheckpointFormatError, match=r"missing 1-6\.delta"):
        load_version(d, 6)
    with pytest.raises(UsageError):
        write_snapshot(d, 0, {})


def test_write_snapshot_leaves_no_temporary_file_on_failure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def fail(src: str, dst: str) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", fail)
    with pytest.raises(OSError, match="disk full"):
        write_snapshot(tmp_path, 3, {b"k": b"v"})
    assert list(tmp_path.iterdir()) == []


# --------------------------------------------------------------------------------------------
# Real Spark


PROVIDER_CONF = "spark.sql.streaming.stateStore.providerClass"
HDFS_PROVIDER = "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider"
TEST_CONF = {
    PROVIDER_CONF: HDFS_PROVIDER,
    "spark.sql.shuffle.partitions": "2",
    # Let the maintenance thread write snapshots within the test's lifetime. Spark keeps the
    # interval of the first stateful query in the JVM, so after other Spark tests the snapshot
    # checks may find none and skip.
    "spark.sql.streaming.stateStore.minDeltasForSnapshot": "1",
    "spark.sql.streaming.stateStore.maintenanceInterval": "200ms",
}
SCHEMA = "id STRING, ts TIMESTAMP, grp STRING"


def _event(ident: str, second: int, grp: str) -> dict[str, str]:
    return {"id": ident, "ts": f"2024-01-01T00:{second // 60:02d}:{second % 60:02d}", "grp": grp}


# Batch by batch: keys that get deduplicated, evicted by the watermark (removals) and counts
# that get updated. The third batch is large enough for multi-block files.
BATCHES: list[list[dict[str, str]]] = [
    [_event(f"a{i}", i % 5, f"g{i % 3}") for i in range(6)],
    [_event(f"b{i}", 30 + i, f"g{i % 4}") for i in range(4)] + [_event("a1", 1, "g1")],
    [_event(f"c-{i:05d}-{'x' * 24}", 40 + i % 7, f"g{i % 5}") for i in range(3000)]
    + [_event("b0", 30, "g0"), _event("a0", 0, "g0")],
    [_event(f"d{i}", 70, "g9") for i in range(3)],
]
# The batch run after a restart: one duplicate of live state, one new key, one late event.
RESTART_BATCH = [_event("d0", 70, "g9"), _event("e0", 75, "g9"), _event("late", 5, "g0")]


@dataclass
class SparkRun:
    spark: Any
    checkpoint: Path
    inputs: Path
    last_batch: int
    operators: dict[str, int]  # operator name -> id

    def state_dirs(self, root: Path | None = None) -> list[Path]:
        base = (root or self.checkpoint) / "state"
        return sorted(p for p in base.glob("*/*") if p.name.isdigit())


def _write_input(directory: Path, index: int, rows: list[dict[str, str]]) -> None:
    target = directory / f"part-{index:03d}.json"
    tmp = directory / f".part-{index:03d}.json.tmp"
    tmp.write_text("".join(json.dumps(row) + "\n" for row in rows))
    os.replace(tmp, target)


def _start(spark: Any, inputs: Path, checkpoint: Path, name: str) -> Any:
    events = spark.readStream.schema(SCHEMA).json(str(inputs))
    counts = (
        events.withWatermark("ts", "10 seconds").dropDuplicates(["id", "ts"]).groupBy("grp").count()
    )
    return (
        counts.writeStream.outputMode("complete")
        .format("memory")
        .queryName(name)
        .option("checkpointLocation", str(checkpoint))
        .start()
    )


@pytest.fixture(scope="module")
def spark_run(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkRun]:
    root = tmp_path_factory.mktemp("hdfs_state")
    inputs = root / "in"
    inputs.mkdir()
    checkpoint = root / "ckpt"
    # A session of its own: SQL confs other tests set on the shared one stay out, and ours
    # stay in.
    session = spark.newSession()
    for key, value in TEST_CONF.items():
        session.conf.set(key, value)
    query = _start(session, inputs, checkpoint, "hdfs_state_original")
    try:
        for index, rows in enumerate(BATCHES):
            _write_input(inputs, index, rows)
            query.processAllAvailable()
        deadline = time.monotonic() + 5
        while not list(checkpoint.glob("state/*/*/*.snapshot")) and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        query.stop()
    commits = [int(p.name) for p in (checkpoint / "commits").iterdir() if p.name.isdigit()]
    meta = session.read.format("state-metadata").load(str(checkpoint)).collect()
    yield SparkRun(
        spark=session,
        checkpoint=checkpoint,
        inputs=inputs,
        last_batch=max(commits),
        operators={row.operatorName: row.operatorId for row in meta},
    )


def _spark_codec_bytes(spark: Any, payload: bytes) -> bytes:
    """What Spark's state store codec (lz4, default block size) makes of an uncompressed stream."""
    jvm = spark._jvm
    codec = jvm.org.apache.spark.io.LZ4CompressionCodec(spark.sparkContext._jsc.sc().conf())
    sink = jvm.java.io.ByteArrayOutputStream()
    stream = codec.compressedOutputStream(sink)
    # One write gives the same blocks as Spark's many small ones: the stream cuts blocks by
    # byte count only.
    stream.write(bytearray(payload))
    stream.close()
    return bytes(sink.toByteArray())


def _payload(records: list[Record]) -> bytes:
    out = []
    for key, value in records:
        out.append(_i32(len(key)) + key)
        out.append(_i32(-1) if value is None else _i32(len(value)) + value)
    return b"".join(out) + _i32(-1)


@pytest.mark.spark
@settings(max_examples=25, deadline=None)
@given(
    records=st.lists(
        st.tuples(
            st.binary(max_size=64).map(lambda b: b * 8),
            st.one_of(st.none(), st.binary(max_size=400)),
        ),
        max_size=400,
    )
)
@example(records=[(bytes([i % 251]) * 512, None if i % 3 else os.urandom(300)) for i in range(300)])
def test_write_records_equals_sparks_own_codec_output(spark: Any, records: list[Record]) -> None:
    expected = _spark_codec_bytes(spark, _payload(records))
    assert write_records(records) == expected
    assert read_records(expected, "spark") == records


def _state_files(root: Path) -> list[Path]:
    return sorted(p for p in root.glob("state/*/*/*") if p.suffix in (".delta", ".snapshot"))


@pytest.mark.spark
def test_spark_written_files_round_trip_byte_for_byte(spark_run: SparkRun) -> None:
    files = _state_files(spark_run.checkpoint)
    removals = multi_block = 0
    for path in files:
        data = path.read_bytes()
        records = read_records(data, str(path))
        assert write_records(records) == data, path
        removals += sum(value is None for _, value in records)
        multi_block += len(_blocks(data)) > 2
    assert removals > 0, "the watermark evicted nothing: the test data lost its point"
    assert multi_block > 0, "no file spans several LZ4 blocks"


@pytest.mark.spark
def test_spark_written_snapshots_round_trip_and_match_the_deltas(
    spark_run: SparkRun, tmp_path: Path
) -> None:
    snapshots = [p for p in _state_files(spark_run.checkpoint) if p.suffix == ".snapshot"]
    if not snapshots:
        pytest.skip("Spark's maintenance thread wrote no snapshot during the run")
    for path in snapshots:
        data = path.read_bytes()
        records = read_records(data, str(path))
        assert write_records(records) == data, path
        assert all(value is not None for _, value in records)
        # The same version rebuilt from deltas alone is the same state.
        replay = tmp_path / f"{path.parent.parent.name}-{path.parent.name}-{path.stem}"
        replay.mkdir()
        for delta in path.parent.glob("*.delta"):
            shutil.copy(delta, replay / delta.name)
        assert dict(records) == load_version(replay, int(path.stem)), path


def _unsafe_string(row: bytes, ordinal: int, fields: int) -> str:
    word = int.from_bytes(row[_bitset(fields) + 8 * ordinal :][:8], "little")
    offset, size = word >> 32, word & 0xFFFFFFFF
    return row[offset : offset + size].decode()


def _unsafe_long(row: bytes, ordinal: int, fields: int) -> int:
    return int.from_bytes(row[_bitset(fields) + 8 * ordinal :][:8], "little", signed=True)


def _bitset(fields: int) -> int:
    return (fields + 63) // 64 * 8


def _micros(value: datetime) -> int:
    # Naive timestamps come back in the session zone, UTC in these tests (see conftest).
    return calendar.timegm(value.timetuple()) * 1_000_000 + value.microsecond


def _spark_view(spark: Any, checkpoint: Path, operator: int, last_batch: int) -> list[Any]:
    """Spark's own reading of every batch of one operator, each row tagged with its batch."""
    from pyspark.sql import functions as F

    frames = [
        spark.read.format("statestore")
        .option("batchId", batch)
        .option("operatorId", operator)
        .load(str(checkpoint))
        .withColumn("batch", F.lit(batch))
        for batch in range(last_batch + 1)
    ]
    union = frames[0]
    for frame in frames[1:]:
        union = union.unionByName(frame)
    return list(union.collect())


Decoder = Callable[[bytes, bytes], tuple[Any, ...]]


def _ours(run: SparkRun, root: Path, operator: int, decode: Decoder) -> set[tuple[Any, ...]]:
    rows: set[tuple[Any, ...]] = set()
    for batch in range(run.last_batch + 1):
        for partition in range(2):
            state = load_version(root / "state" / str(operator) / str(partition), batch + 1)
            rows |= {(batch, partition, *decode(k, v)) for k, v in state.items()}
    return rows


def _aggregate_decoder(key: bytes, value: bytes) -> tuple[Any, ...]:
    return (_unsafe_string(key, 0, 1), _unsafe_long(value, 0, 1))


def _dedupe_decoder(key: bytes, value: bytes) -> tuple[Any, ...]:
    return (_unsafe_string(key, 0, 2), _unsafe_long(key, 1, 2))


@pytest.mark.spark
def test_load_version_agrees_with_sparks_state_reader(spark_run: SparkRun) -> None:
    agg, dedupe = spark_run.operators["stateStoreSave"], spark_run.operators["dedupe"]
    spark_agg = {
        (r.batch, r.partition_id, r.key.grp, r.value["count"])
        for r in _spark_view(spark_run.spark, spark_run.checkpoint, agg, spark_run.last_batch)
    }
    spark_dedupe = {
        (r.batch, r.partition_id, r.key.id, _micros(r.key.ts))
        for r in _spark_view(spark_run.spark, spark_run.checkpoint, dedupe, spark_run.last_batch)
    }
    ours_agg = _ours(spark_run, spark_run.checkpoint, agg, _aggregate_decoder)
    ours_dedupe = _ours(spark_run, spark_run.checkpoint, dedupe, _dedupe_decoder)
    assert ours_agg == spark_agg
    assert ours_dedupe == spark_dedupe
    assert len(ours_dedupe) > 3000
    # Evicted keys really are gone from the last version.
    assert {row[2] for row in ours_dedupe if row[0] == spark_run.last_batch} == {"d0", "d1", "d2"}


@pytest.mark.spark
def test_checkpoint_compacted_to_one_snapshot_restarts_like_the_original(
    spark_run: SparkRun, tmp_path: Path
) -> None:
    spark = spark_run.spark
    original = tmp_path / "original"
    compacted = tmp_path / "compacted"
    # Spark's maintenance may still be finishing a snapshot under a temporary name.
    in_flight = shutil.ignore_patterns("*.tmp", "*.tmp.crc")
    shutil.copytree(spark_run.checkpoint, original, ignore=in_flight)
    shutil.copytree(spark_run.checkpoint, compacted, ignore=in_flight)
    version = spark_run.last_batch + 1
    for store in spark_run.state_dirs(compacted):
        state = load_version(store, version)
        # Every delta and snapshot goes, with its Hadoop .crc sidecar.
        for path in store.iterdir():
            if path.is_file() and (".delta" in path.name or ".snapshot" in path.name):
                path.unlink()
        assert write_snapshot(store, version, state) > 0
        assert sorted(p.name for p in store.iterdir() if p.is_file()) == [f"{version}.snapshot"]

    # Spark's reader accepts the compacted stores and sees the same state.
    for name, operator in spark_run.operators.items():
        reader = (
            spark.read.format("statestore")
            .option("batchId", spark_run.last_batch)
            .option("operatorId", operator)
        )
        assert sorted(map(str, reader.load(str(compacted)).collect())) == sorted(
            map(str, reader.load(str(original)).collect())
        ), name

    _write_input(spark_run.inputs, len(BATCHES), RESTART_BATCH)
    results = {}
    for label, checkpoint in (("original", original), ("compacted", compacted)):
        query = _start(spark, spark_run.inputs, checkpoint, f"hdfs_state_{label}")
        try:
            query.processAllAvailable()
        finally:
            query.stop()
        results[label] = sorted(
            (r.grp, r["count"]) for r in spark.table(f"hdfs_state_{label}").collect()
        )
    assert results["compacted"] == results["original"]
    counts = dict(results["original"])
    # d0 was deduplicated against restored state, late was dropped, e0 was counted.
    assert counts["g9"] == 4
    assert counts["g0"] == 2 + 1 + 600
    next_delta = f"{version + 1}.delta"
    for store in spark_run.state_dirs(compacted):
        assert (store / next_delta).exists(), store
