"""The vectorized partitioning hash equals the row-by-row one (itself checked against Spark)
on UnsafeRow keys of every handled type, nulls and nested structs included."""

from __future__ import annotations

import struct
from typing import Any

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from sparkpoint.checkpoint.murmur3 import hash_row
from sparkpoint.checkpoint.murmur3_columns import columns_hashed, hash_columns
from sparkpoint.checkpoint.unsafe_row import read_fields

WINDOW = {"type": "struct", "fields": [{"name": "start", "type": "timestamp"},
                                       {"name": "end", "type": "timestamp"}]}
FIELDS: list[dict[str, Any]] = [
    {"name": name, "type": kind} for name, kind in (
        ("s", "string"), ("i", "integer"), ("l", "long"), ("t", "timestamp"),
        ("b", "boolean"), ("bin", "binary"), ("w", WINDOW), ("sh", "short"), ("by", "byte"),
        ("d", "date"))
]
_PACK = {"integer": "<i", "date": "<i", "long": "<q", "timestamp": "<q", "boolean": "<?",
         "short": "<h", "byte": "<b"}


def _unsafe_row(values: list[Any], fields: list[dict[str, Any]]) -> bytes:
    """Spark's UnsafeRow layout: null bitset, 8-byte slots, 8-byte aligned variable part."""
    bitset = ((len(fields) + 63) // 64) * 8
    head = bytearray(bitset + 8 * len(fields))
    tail = bytearray()
    for index, (value, field) in enumerate(zip(values, fields, strict=True)):
        if value is None:
            word = (index // 64) * 8
            bits = int.from_bytes(head[word:word + 8], "little") | 1 << (index % 64)
            head[word:word + 8] = bits.to_bytes(8, "little")
            continue
        slot = bitset + 8 * index
        kind = field["type"] if isinstance(field["type"], str) else field["type"]["type"]
        if kind in _PACK:
            size = struct.calcsize(_PACK[kind])
            head[slot:slot + size] = struct.pack(_PACK[kind], value)
            continue
        data = _unsafe_row(value, field["type"]["fields"]) if kind == "struct" else value
        offset = len(head) + len(tail)
        head[slot:slot + 8] = (offset << 32 | len(data)).to_bytes(8, "little")
        tail += data + bytes(-len(data) % 8)
    return bytes(head + tail)


_TIMES = st.integers(min_value=-(2**62), max_value=2**62)
_VALUES = [
    st.binary(max_size=13), st.integers(-(2**31), 2**31 - 1), st.integers(-(2**63), 2**63 - 1),
    _TIMES, st.booleans(), st.binary(max_size=9),
    st.lists(st.one_of(st.none(), _TIMES), min_size=2, max_size=2),
    st.integers(-(2**15), 2**15 - 1), st.integers(-128, 127), st.integers(-(2**31), 2**31 - 1),
]
_ROW = st.tuples(*[st.one_of(st.none(), values) for values in _VALUES]).map(list)


@settings(max_examples=80, deadline=None)
@given(st.lists(_ROW, min_size=1, max_size=12), st.integers(min_value=1, max_value=len(FIELDS)))
def test_columns_hash_like_rows(rows: list[list[Any]], count: int) -> None:
    encoded = [_unsafe_row(row, FIELDS) for row in rows]
    width = max(len(row) for row in encoded)
    array = np.frombuffer(b"".join(row.ljust(width, b"\0") for row in encoded),
                          dtype=np.uint8).reshape(len(rows), width)
    types = [field["type"] for field in FIELDS[:count]]
    expected = [hash_row(read_fields(row, FIELDS)[:count], types) for row in encoded]
    hashed = hash_columns(array, FIELDS, count)
    assert hashed is not None
    assert hashed.tolist() == expected
    assert columns_hashed(FIELDS, count)


def test_unhandled_types_say_so() -> None:
    fields = [{"name": "x", "type": "double"}]
    rows = np.zeros((1, 16), dtype=np.uint8)
    assert hash_columns(rows, fields, 1) is None
    assert not columns_hashed(fields, 1)
    nested = [{"name": "i", "type": "integer"},
              {"name": "w", "type": {"type": "struct", "fields": [*FIELDS[:2], *fields]}}]
    assert not columns_hashed(nested, 2) and columns_hashed(nested, 1)
