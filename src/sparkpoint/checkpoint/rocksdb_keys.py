"""How Spark's RocksDB provider encodes a state store's keys (RocksDBStateEncoder.scala),
for stores without column families, in the ``unsaferow`` encoding format (the default).

* ``NoPrefixKeyStateEncoder`` (aggregations, dedupes, joins, flatMapGroupsWithState):
  ``[version byte 0][UnsafeRow of the key]``.
* ``PrefixKeyScanStateEncoder`` (session windows: ``numColsPrefixKey`` in the operator
  metadata is the number of grouping columns before ``sessionStartTime``):
  ``[int32 length, native (little-endian) order][0][UnsafeRow of the first numColsPrefixKey
  columns][0][UnsafeRow of the other columns]``, the length counting the version byte and
  the first row. RocksDB orders the keys by these bytes, which is what lets Spark scan all
  sessions of one group.

Values of such stores are ``[0][UnsafeRow]`` in both cases (``SingleValueStateEncoder``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sparkpoint.checkpoint.unsafe_row import join_rows, split_row
from sparkpoint.errors import CheckpointFormatError

ENCODING_VERSION = 0
_LENGTH_BYTES = 4


def strip_version(data: bytes, what: str, where: Path) -> bytes:
    """The ``UnsafeRow`` after the encoding version byte of a key or value."""
    if not data or data[0] != ENCODING_VERSION:
        raise CheckpointFormatError(
            f"{where}: expected a {what} starting with state encoding version byte 0, found "
            f"{data[:1].hex() or 'nothing'}; the store uses an encoding this version does not "
            "decode (column families or Avro encoding)")
    return data[1:]


@dataclass(frozen=True)
class KeyEncoding:
    """The key layout of one store: ``prefix_columns`` from ``numColsPrefixKey`` (0: none)
    and the key schema's fields (needed to join a prefix-encoded key back into one row)."""

    prefix_columns: int = 0
    key_fields: tuple[dict[str, Any], ...] = ()

    def decode(self, raw: bytes, where: Path) -> bytes:
        """The key as one ``UnsafeRow`` of all its columns, in the key schema's order."""
        if self.prefix_columns == 0:
            return strip_version(raw, "key", where)
        fields = list(self.key_fields)
        if not 0 < self.prefix_columns <= len(fields):
            raise CheckpointFormatError(
                f"{where}: the operator metadata gives numColsPrefixKey={self.prefix_columns} "
                f"for a key of {len(fields)} columns; expected 1..{len(fields)}")
        length = int.from_bytes(raw[:_LENGTH_BYTES], "little")
        if len(raw) < _LENGTH_BYTES + length:
            raise CheckpointFormatError(
                f"{where}: expected a prefix-scan key (int32 prefix length, prefix, rest) of at "
                f"least {_LENGTH_BYTES + length} bytes, found {len(raw)} bytes")
        prefix = strip_version(raw[_LENGTH_BYTES:_LENGTH_BYTES + length], "key prefix", where)
        rest = strip_version(raw[_LENGTH_BYTES + length:], "key remainder", where)
        return join_rows([(prefix, fields[:self.prefix_columns]),
                          (rest, fields[self.prefix_columns:])], str(where))

    def encode(self, key: bytes, where: Path) -> bytes:
        """The key as Spark's RocksDB provider stores it, from one ``UnsafeRow`` of all its
        columns (the inverse of :meth:`decode`)."""
        version = bytes([ENCODING_VERSION])
        if self.prefix_columns == 0:
            return version + key
        fields = list(self.key_fields)
        if not 0 < self.prefix_columns <= len(fields):
            raise CheckpointFormatError(
                f"{where}: the operator metadata gives numColsPrefixKey={self.prefix_columns} "
                f"for a key of {len(fields)} columns; expected 1..{len(fields)}")
        prefix, rest = split_row(key, fields, self.prefix_columns, str(where))
        return (len(version + prefix).to_bytes(_LENGTH_BYTES, "little") + version + prefix
                + version + rest)


def encode_value(value: bytes) -> bytes:
    """A value as Spark's RocksDB provider stores it (``SingleValueStateEncoder``)."""
    return bytes([ENCODING_VERSION]) + value
