"""Spark's Murmur3 hash (see ``murmur3``) of many state keys at once, with numpy.

Keys are ``UnsafeRow`` bytes of one length, given as the rows of an ``n x length`` uint8
array. Each partition key column is read from its slot in every row and hashed with the
previous column's hashes as seeds, exactly as ``murmur3.hash_row`` does row by row; strings
and binaries are hashed in groups of equal length. ``None`` means a column type this module
does not handle: the caller then hashes row by row.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from sparkpoint.checkpoint.murmur3 import SEED

_C1 = np.uint32(0xCC9E2D51)
_C2 = np.uint32(0x1B873593)
_INT_KINDS = {"byte": "<i1", "short": "<i2", "integer": "<i4", "date": "<i4"}
_LONG_KINDS = ("long", "timestamp", "timestamp_ntz")

Array = Any  # numpy arrays; numpy's own annotations would not make this clearer


def _rotl(value: Array, bits: int) -> Array:
    return (value << np.uint32(bits)) | (value >> np.uint32(32 - bits))


def _mix_k1(k1: Array) -> Array:
    return _rotl(k1 * _C1, 15) * _C2


def _mix_h1(h1: Array, k1: Array) -> Array:
    return _rotl(h1 ^ k1, 13) * np.uint32(5) + np.uint32(0xE6546B64)


def _fmix(h1: Array, length: Array | int) -> Array:
    h1 = h1 ^ np.asarray(length, dtype=np.uint32)
    h1 = h1 ^ (h1 >> np.uint32(16))
    h1 = h1 * np.uint32(0x85EBCA6B)
    h1 = h1 ^ (h1 >> np.uint32(13))
    h1 = h1 * np.uint32(0xC2B2AE35)
    return h1 ^ (h1 >> np.uint32(16))


def _hash_int(values: Array, seeds: Array) -> Array:
    return _fmix(_mix_h1(seeds, _mix_k1(values.astype(np.uint32))), 4)


def _hash_long(values: Array, seeds: Array) -> Array:
    bits = values.astype(np.uint64)
    h1 = _mix_h1(seeds, _mix_k1((bits & np.uint64(0xFFFFFFFF)).astype(np.uint32)))
    h1 = _mix_h1(h1, _mix_k1((bits >> np.uint64(32)).astype(np.uint32)))
    return _fmix(h1, 8)


def _hash_bytes(data: Array, seeds: Array) -> Array:
    """Hash rows of ``data`` (``n x length`` uint8), each row one string or binary."""
    length = data.shape[1]
    aligned = length - length % 4
    h1 = seeds
    if aligned:
        words = np.ascontiguousarray(data[:, :aligned]).view("<u4")
        for column in range(aligned // 4):
            h1 = _mix_h1(h1, _mix_k1(words[:, column]))
    for column in range(aligned, length):
        # Spark mixes each trailing byte on its own, sign-extended.
        h1 = _mix_h1(h1, _mix_k1(data[:, column].view(np.int8).astype(np.int32)
                                 .astype(np.uint32)))
    return _fmix(h1, length)


def _slot(rows: Array, base: Array | None, position: int, dtype: str) -> Array:
    """Each row's value of ``dtype`` at byte ``base + position`` (``base`` per row, or 0)."""
    size = np.dtype(dtype).itemsize
    if base is None:
        picked = rows[:, position : position + size]
    else:
        picked = np.take_along_axis(rows, (base + position)[:, None] + np.arange(size), axis=1)
    return np.ascontiguousarray(picked).view(dtype)[:, 0]


def hash_columns(rows: Array, fields: list[dict[str, Any]], count: int) -> Array | None:
    """Spark's hash (seed 42) of the first ``count`` of ``fields`` of every row, as int32;
    None when a field's type is not handled here."""
    seeds = np.full(len(rows), SEED, dtype=np.uint32)
    hashed = _hash_struct(rows, None, fields, count, seeds)
    return None if hashed is None else hashed.view(np.int32)


def columns_hashed(fields: list[dict[str, Any]], count: int) -> bool:
    """Whether :func:`hash_columns` hashes the first ``count`` of ``fields`` (told from
    their types alone, before any key is read)."""
    for field in fields[:count]:
        spark_type = field["type"]
        kind = spark_type if isinstance(spark_type, str) else spark_type.get("type")
        if kind == "struct":
            if not columns_hashed(spark_type["fields"], len(spark_type["fields"])):
                return False
        elif kind not in _INT_KINDS and kind not in _LONG_KINDS \
                and kind not in ("boolean", "string", "binary"):
            return False
    return True


def _hash_struct(rows: Array, base: Array | None, fields: list[dict[str, Any]], count: int,
                 seeds: Array) -> Array | None:
    bitset = ((len(fields) + 63) // 64) * 8
    for index, field in enumerate(fields[:count]):
        word = _slot(rows, base, (index // 64) * 8, "<u8")
        present = np.nonzero((word >> np.uint64(index % 64)) & np.uint64(1) == 0)[0]
        slot = bitset + 8 * index
        spark_type = field["type"]
        kind = spark_type if isinstance(spark_type, str) else spark_type.get("type")
        # Nulls leave the seed as it is: only present values are hashed.
        if len(present) == len(rows):
            rows_here, base_here, seeds_here = rows, base, seeds
        else:
            rows_here = rows[present]
            base_here = None if base is None else base[present]
            seeds_here = seeds[present]
        if kind in _INT_KINDS:
            values = _slot(rows_here, base_here, slot, _INT_KINDS[kind]).astype(np.int32)
            hashed = _hash_int(values, seeds_here)
        elif kind == "boolean":
            hashed = _hash_int(_slot(rows_here, base_here, slot, "<u1").astype(np.int32),
                               seeds_here)
        elif kind in _LONG_KINDS:
            hashed = _hash_long(_slot(rows_here, base_here, slot, "<i8"), seeds_here)
        elif kind in ("string", "binary", "struct"):
            pointer = _slot(rows_here, base_here, slot, "<u8")
            offsets = (pointer >> np.uint64(32)).astype(np.int64)
            if base_here is not None:
                offsets += base_here
            if kind == "struct":
                nested = _hash_struct(rows_here, offsets, spark_type["fields"],
                                      len(spark_type["fields"]), seeds_here)
                if nested is None:
                    return None
                hashed = nested
            else:
                sizes = (pointer & np.uint64(0xFFFFFFFF)).astype(np.int64)
                hashed = np.empty_like(seeds_here)
                for size in np.unique(sizes):
                    chosen = np.nonzero(sizes == size)[0]
                    starts = offsets[chosen]
                    if (starts == starts[0]).all():
                        # Keys of one shape keep their string at one place: no gather.
                        data = rows_here[chosen, starts[0] : starts[0] + size]
                    else:
                        index = starts[:, None] + np.arange(size)
                        data = np.take_along_axis(rows_here[chosen], index, axis=1)
                    hashed[chosen] = _hash_bytes(data, seeds_here[chosen])
        else:
            return None  # float, double (Spark normalizes -0.0 and NaN), decimals, ...
        if len(present) == len(seeds):
            seeds = hashed
        else:
            seeds = seeds.copy()
            seeds[present] = hashed
    return seeds
