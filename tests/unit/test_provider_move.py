"""The pieces of a state store provider move that need no Spark: keys encoded as Spark's
RocksDB provider stores them (the inverse of the reader's decoding) and the refusals `plan`
gives for state one of the providers cannot hold."""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

import pytest

from sparkpoint.checkpoint.providers import HDFS_BACKED, ROCKSDB
from sparkpoint.checkpoint.rocksdb_keys import KeyEncoding, encode_value
from sparkpoint.checkpoint.unsafe_row import split_row
from sparkpoint.upgrade.provider_move import move_problems

FIELDS: list[dict[str, Any]] = [
    {"name": "user", "type": "string"},
    {"name": "start", "type": "timestamp"},
    {"name": "tag", "type": "string"},
]
HERE = Path("state/0/0")


def unsafe_row(values: list[Any]) -> bytes:
    """An UnsafeRow written field by field as Spark's UnsafeRowWriter lays it out: a null
    bitset, one 8-byte slot per field, variable-length bytes after the slots padded to 8."""
    count = len(values)
    bitset_len = ((count + 63) // 64) * 8
    nulls, slots, tail = 0, b"", b""
    for index, value in enumerate(values):
        if value is None:
            nulls |= 1 << index
            slots += bytes(8)
        elif isinstance(value, bytes):
            offset = bitset_len + 8 * count + len(tail)
            slots += struct.pack("<q", offset << 32 | len(value))
            tail += value + bytes(-len(value) % 8)
        else:
            slots += struct.pack("<q", value)
    return nulls.to_bytes(bitset_len, "little") + slots + tail


def test_a_row_splits_into_the_rows_of_its_first_columns_and_the_rest() -> None:
    row = unsafe_row([b"ana-with-a-long-name", 1_700_000_000_000_000, None])
    first, rest = split_row(row, FIELDS, 1)
    assert first == unsafe_row([b"ana-with-a-long-name"])
    assert rest == unsafe_row([1_700_000_000_000_000, None])


def test_a_plain_key_and_value_get_the_encoding_version_byte() -> None:
    key = unsafe_row([b"bo", 5, b"x"])
    encoding = KeyEncoding()
    assert encoding.encode(key, HERE) == b"\x00" + key
    assert encoding.decode(encoding.encode(key, HERE), HERE) == key
    assert encode_value(key) == b"\x00" + key


def test_a_session_key_is_laid_out_for_prefix_scans_and_decodes_back() -> None:
    key = unsafe_row([b"cy", 7_000, b"tag-of-some-length"])
    encoding = KeyEncoding(prefix_columns=1, key_fields=tuple(FIELDS))
    stored = encoding.encode(key, HERE)
    prefix = unsafe_row([b"cy"])
    rest = unsafe_row([7_000, b"tag-of-some-length"])
    # [int32 little-endian: version byte + prefix row][0][prefix row][0][rest row]
    assert stored == (len(prefix) + 1).to_bytes(4, "little") + b"\x00" + prefix + b"\x00" + rest
    assert encoding.decode(stored, HERE) == key


def test_keys_of_one_group_share_the_stored_prefix_rocksdb_scans_by() -> None:
    encoding = KeyEncoding(prefix_columns=1, key_fields=tuple(FIELDS))
    one = encoding.encode(unsafe_row([b"dee", 1, b"a"]), HERE)
    other = encoding.encode(unsafe_row([b"dee", 99, b"bbbbbbbbbbbb"]), HERE)
    shared = 4 + 1 + len(unsafe_row([b"dee"]))
    assert one[:shared] == other[:shared]


@pytest.mark.parametrize(("conf", "kinds", "asked_format", "found"), [
    ({}, {"counts": "stateStoreSave"}, None, []),
    ({}, {"tws": "transformWithStateExec"}, None,
     ["operator 'tws': moving the state from the RocksDB provider to HDFS-backed: expected "
      "operators whose state both providers hold, found transformWithStateExec"]),
    ({"spark.sql.streaming.stateStore.encodingFormat": "avro"}, {}, None,
     ["expected state in Spark's UnsafeRow encoding, found "
      "spark.sql.streaming.stateStore.encodingFormat=avro"]),
    ({"spark.sql.streaming.stateStore.compressionCodec": "zstd"}, {}, None,
     ["expected state files compressed with lz4"]),
    ({}, {}, 2, ["expected checkpoint format v1 for the move"]),
])
def test_state_one_provider_cannot_hold_is_refused_by_name(
    conf: dict[str, str], kinds: dict[str, str], asked_format: int | None, found: list[str]
) -> None:
    problems = move_problems(ROCKSDB, HDFS_BACKED, conf, kinds, asked_format)
    assert len(problems) == len(found)
    for problem, expected in zip(problems, found, strict=True):
        assert expected in problem


def test_no_move_no_problem() -> None:
    assert move_problems(ROCKSDB, ROCKSDB, {"spark.sql.streaming.stateStore.encodingFormat":
                                            "avro"}, {"t": "transformWithStateExec"}, 2) == []
