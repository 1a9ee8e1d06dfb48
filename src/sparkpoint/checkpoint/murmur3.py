"""Spark's Murmur3 hash of typed values, as ``HashPartitioning`` places state keys.

A stateful operator's key lives in partition ``pmod(Murmur3Hash(key columns, seed 42), n)``.
This follows Spark's ``Murmur3_x86_32`` and ``InterpretedHashFunction``: columns are hashed
in order, each with the previous result as seed; nulls leave the seed unchanged; strings and
binaries use Spark's own byte-tail variant (each trailing byte mixed on its own, signed).
"""

from __future__ import annotations

import struct
from typing import Any

SEED = 42
_C1 = 0xCC9E2D51
_C2 = 0x1B873593
_MASK = 0xFFFFFFFF


def _rotl(value: int, bits: int) -> int:
    return ((value << bits) | (value >> (32 - bits))) & _MASK


def _mix_k1(k1: int) -> int:
    k1 = (k1 * _C1) & _MASK
    return (_rotl(k1, 15) * _C2) & _MASK


def _mix_h1(h1: int, k1: int) -> int:
    h1 = _rotl(h1 ^ k1, 13)
    return (h1 * 5 + 0xE6546B64) & _MASK


def _fmix(h1: int, length: int) -> int:
    h1 ^= length
    h1 ^= h1 >> 16
    h1 = (h1 * 0x85EBCA6B) & _MASK
    h1 ^= h1 >> 13
    h1 = (h1 * 0xC2B2AE35) & _MASK
    return h1 ^ (h1 >> 16)


def _signed(value: int) -> int:
    return value - (1 << 32) if value & 0x80000000 else value


def hash_int(value: int, seed: int) -> int:
    return _signed(_fmix(_mix_h1(seed & _MASK, _mix_k1(value & _MASK)), 4))


def hash_long(value: int, seed: int) -> int:
    value &= 0xFFFFFFFFFFFFFFFF
    h1 = _mix_h1(seed & _MASK, _mix_k1(value & _MASK))
    h1 = _mix_h1(h1, _mix_k1(value >> 32))
    return _signed(_fmix(h1, 8))


def hash_bytes(data: bytes, seed: int) -> int:
    aligned = len(data) - len(data) % 4
    h1 = seed & _MASK
    for (word,) in struct.iter_unpack("<I", data[:aligned]):
        h1 = _mix_h1(h1, _mix_k1(word))
    for byte in data[aligned:]:
        signed_byte = byte - 256 if byte > 127 else byte
        h1 = _mix_h1(h1, _mix_k1(signed_byte & _MASK))
    return _signed(_fmix(h1, len(data)))


def hash_value(value: Any, spark_type: Any, seed: int) -> int:
    """Hash one value of a Spark JSON type (as in a state schema) with ``seed``."""
    if value is None:
        return seed
    kind = spark_type if isinstance(spark_type, str) else spark_type.get("type")
    if kind == "boolean":
        return hash_int(1 if value else 0, seed)
    if kind in ("byte", "short", "integer", "date"):
        return hash_int(value, seed)
    if kind in ("long", "timestamp", "timestamp_ntz"):
        return hash_long(value, seed)
    if kind == "float":
        bits = struct.unpack("<i", struct.pack("<f", 0.0 if value == 0 else value))[0]
        return hash_int(bits, seed)
    if kind == "double":
        bits = struct.unpack("<q", struct.pack("<d", 0.0 if value == 0 else value))[0]
        return hash_long(bits, seed)
    if kind in ("string", "binary"):
        return hash_bytes(value, seed)
    if kind == "struct":
        for field, item in zip(spark_type["fields"], value, strict=True):
            seed = hash_value(item, field["type"], seed)
        return seed
    raise ValueError(f"hashing values of type {kind!r} is not supported")


def hash_row(values: list[Any], types: list[Any], seed: int = SEED) -> int:
    for value, spark_type in zip(values, types, strict=True):
        seed = hash_value(value, spark_type, seed)
    return seed


def partition_of(values: list[Any], types: list[Any], partitions: int) -> int:
    """Spark's ``pmod(hash(columns), partitions)``."""
    return hash_row(values, types) % partitions
