"""Spark's partitioning hash, checked against values Spark 4.3's ``hash()`` returned for the
same rows (measured with spark.sql.session.timeZone=UTC; timestamps in microseconds)."""

from __future__ import annotations

import datetime as dt

from sparkpoint.checkpoint.murmur3 import hash_row, partition_of

TYPES = ["string", "integer", "long", "timestamp", "boolean", "double", "binary"]


def _micros(value: dt.datetime) -> int:
    return int(value.timestamp() * 1_000_000)


def test_rows_hash_as_spark_hashes_them() -> None:
    first = [b"a", 1, 2**40, _micros(dt.datetime(2026, 1, 1, 0, 0, 0, 123000, dt.UTC)),
             True, 1.5, b"xyz\xff\x80"]
    # Multi-byte UTF-8 and a length that is not a multiple of 4 exercise the byte tail.
    second = ["héllo wörld!".encode(), -7, -3, _micros(dt.datetime(1969, 12, 31, 23, 59, 59,
                                                                    tzinfo=dt.UTC)),
              False, -0.0, b""]
    assert hash_row(first, TYPES) == 2097000995
    assert hash_row(second, TYPES) == -1610911806
    assert hash_row([b"", 0, 0, None, None, None, None], TYPES) == -138764171
    assert hash_row([None] * 7, TYPES) == 42


def test_partition_is_a_non_negative_modulo() -> None:
    assert partition_of([None] * 7, TYPES, 5) == 42 % 5
    assert 0 <= partition_of(["héllo wörld!".encode()], ["string"], 3) < 3
