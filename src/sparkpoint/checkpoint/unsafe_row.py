"""Reading the fields of Spark's ``UnsafeRow`` bytes, as stored in state store files.

Layout: a null bitset of 8-byte words (one bit per field), then one 8-byte little-endian
slot per field. Fixed-width values sit in their slot; strings, binaries and nested rows are
stored after the slots, their slot holding ``offset << 32 | size`` from the row's start.
"""

from __future__ import annotations

import struct
from typing import Any

from sparkpoint.errors import CheckpointFormatError

_FIXED = {
    "boolean": "<?", "byte": "<b", "short": "<h", "integer": "<i", "date": "<i",
    "long": "<q", "timestamp": "<q", "timestamp_ntz": "<q", "float": "<f", "double": "<d",
}


def _check_size(row: bytes, count: int, where: str) -> int:
    bitset = ((count + 63) // 64) * 8
    if len(row) < bitset + 8 * count:
        raise CheckpointFormatError(
            f"{where}: expected an UnsafeRow of {count} fields (at least {bitset + 8 * count} "
            f"bytes), found {len(row)} bytes")
    return bitset


def read_fields(row: bytes, fields: list[dict[str, Any]], where: str = "row",
                lenient: bool = False) -> list[Any]:
    """The values of ``row``'s fields; strings and binaries come back as bytes, nested
    structs as lists. ``lenient``: a field of a type not decoded here comes back as
    ``"<type>"`` instead of failing (for showing rows)."""
    bitset = _check_size(row, len(fields), where)
    return [_value(row, bitset, index, field["type"], where, lenient)
            for index, field in enumerate(fields)]


def read_field(row: bytes, fields: list[dict[str, Any]], index: int, where: str = "row",
               lenient: bool = False) -> Any:
    """The value of field ``index`` alone (as ``read_fields`` gives it), the others skipped."""
    bitset = _check_size(row, len(fields), where)
    return _value(row, bitset, index, fields[index]["type"], where, lenient)


def _value(row: bytes, bitset: int, index: int, spark_type: Any, where: str,
           lenient: bool) -> Any:
    word = int.from_bytes(row[(index // 64) * 8:(index // 64) * 8 + 8], "little")
    if word >> (index % 64) & 1:
        return None
    slot = bitset + 8 * index
    kind = spark_type if isinstance(spark_type, str) else spark_type.get("type")
    if kind in _FIXED:
        return struct.unpack_from(_FIXED[kind], row, slot)[0]
    pointer = int.from_bytes(row[slot:slot + 8], "little")
    offset, size = pointer >> 32, pointer & 0xFFFFFFFF
    data = row[offset:offset + size]
    if kind in ("string", "binary"):
        return bytes(data)
    if kind == "struct":
        return read_fields(data, spark_type["fields"], where, lenient)
    if lenient:
        return f"<{kind}>"
    raise CheckpointFormatError(
        f"{where}: reading state key fields of type {kind!r} is not supported")


def _is_fixed(spark_type: Any) -> bool:
    kind = spark_type if isinstance(spark_type, str) else spark_type.get("type")
    return kind in _FIXED


def join_rows(parts: list[tuple[bytes, list[dict[str, Any]]]], where: str = "row") -> bytes:
    """One ``UnsafeRow`` holding the fields of ``parts`` (rows with their fields) in order,
    as Spark's ``JoinedRow`` projected back into an ``UnsafeRow`` holds them: fixed-width
    slots copied, variable-length data moved after the new slots (8-byte aligned)."""
    return _project([(row, fields, range(len(fields))) for row, fields in parts], where)


def split_row(row: bytes, fields: list[dict[str, Any]], at: int,
              where: str = "row") -> tuple[bytes, bytes]:
    """``row``'s first ``at`` fields and its other fields as two ``UnsafeRow``s, as Spark's
    projections of a key into its prefix and the rest write them (the inverse of
    :func:`join_rows`)."""
    return (_project([(row, fields, range(at))], where),
            _project([(row, fields, range(at, len(fields)))], where))


def _project(parts: list[tuple[bytes, list[dict[str, Any]], range]], where: str) -> bytes:
    """One ``UnsafeRow`` of the chosen fields of each part's row, in order."""
    count = sum(len(chosen) for _row, _fields, chosen in parts)
    bitset_len = ((count + 63) // 64) * 8
    nulls = 0
    slots = bytearray(8 * count)
    tail = bytearray()
    index = 0
    for row, fields, chosen in parts:
        bitset = _check_size(row, len(fields), where)
        for own in chosen:
            spark_field = fields[own]
            word = int.from_bytes(row[(own // 64) * 8:(own // 64) * 8 + 8], "little")
            slot = row[bitset + 8 * own:bitset + 8 * own + 8]
            if word >> (own % 64) & 1:
                nulls |= 1 << index
            elif _is_fixed(spark_field["type"]):
                slots[8 * index:8 * index + 8] = slot
            else:
                pointer = int.from_bytes(slot, "little")
                offset, size = pointer >> 32, pointer & 0xFFFFFFFF
                if offset + size > len(row):
                    raise CheckpointFormatError(
                        f"{where}: expected field {spark_field['name']!r} within the row's "
                        f"{len(row)} bytes, found offset {offset} size {size}")
                start = bitset_len + 8 * count + len(tail)
                slots[8 * index:8 * index + 8] = (start << 32 | size).to_bytes(8, "little")
                tail += row[offset:offset + size] + bytes(-size % 8)
            index += 1
    return nulls.to_bytes(bitset_len, "little") + bytes(slots) + bytes(tail)
