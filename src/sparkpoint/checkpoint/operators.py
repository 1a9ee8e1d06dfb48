"""Stateful operator files: operator metadata (v1/v2) and state schema files (v2).

Layout (Spark 4.3): ``state/<opId>/_metadata/metadata`` (v1, all operators),
``state/<opId>/_metadata/v2/<N>`` (v2, transformWithState), ``state/<opId>/0/_metadata/schema``
(schema v2; for joins ``state/<opId>/0/<store>/_metadata/schema``) and
``state/<opId>/_stateSchema/<store>/<N>_<uuid>`` (schema v3, transformWithState).
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from typing import Any

from sparkpoint.errors import CheckpointFormatError

OPERATOR_METADATA_VERSIONS = (1, 2)
SCHEMA_FILE_VERSIONS = (2,)


@dataclass(frozen=True)
class StoreInfo:
    name: str
    num_cols_prefix_key: int
    num_partitions: int


@dataclass(frozen=True)
class OperatorMetadata:
    """``_metadata/metadata``: operator id, Spark's operator name, its state stores."""

    version: int
    text: str

    @classmethod
    def parse(cls, data: bytes, path: str) -> OperatorMetadata:
        try:
            header, _, body = data.decode("utf-8").partition("\n")
        except UnicodeDecodeError as exc:
            raise CheckpointFormatError(
                f"{path}: expected UTF-8 operator metadata, found undecodable bytes"
            ) from exc
        if not (header.startswith("v") and header[1:].isdigit()):
            raise CheckpointFormatError(
                f"{path}: expected a header 'v1' or 'v2', found {header[:40]!r}"
            )
        version = int(header[1:])
        if version not in OPERATOR_METADATA_VERSIONS:
            raise CheckpointFormatError(
                f"{path}: operator metadata v{version} is not supported; it was written by a "
                "newer Spark"
            )
        try:
            obj = json.loads(body)
        except json.JSONDecodeError as exc:
            raise CheckpointFormatError(
                f"{path}: expected operator metadata JSON, found invalid JSON ({exc.msg})"
            ) from exc
        if not isinstance(obj, dict) or "operatorInfo" not in obj:
            raise CheckpointFormatError(
                f"{path}: expected an object with 'operatorInfo', found {body[:80]!r}"
            )
        return cls(version, body)

    def to_bytes(self) -> bytes:
        return f"v{self.version}\n{self.text}".encode()

    @property
    def obj(self) -> dict[str, Any]:
        value: dict[str, Any] = json.loads(self.text)
        return value

    @property
    def operator_id(self) -> int:
        return int(self.obj["operatorInfo"]["operatorId"])

    @property
    def operator_name(self) -> str:
        return str(self.obj["operatorInfo"]["operatorName"])

    @property
    def stores(self) -> tuple[StoreInfo, ...]:
        return tuple(
            StoreInfo(
                name=str(store["storeName"]),
                num_cols_prefix_key=int(store.get("numColsPrefixKey", 0)),
                num_partitions=int(store["numPartitions"]),
            )
            for store in self.obj.get("stateStoreInfo", [])
        )

    @property
    def num_partitions(self) -> int:
        stores = self.stores
        return stores[0].num_partitions if stores else 0

    def with_operator_id(self, operator_id: int) -> OperatorMetadata:
        obj = self.obj
        obj["operatorInfo"]["operatorId"] = operator_id
        return OperatorMetadata(self.version, json.dumps(obj, separators=(",", ":")))

    def with_partitions(self, partitions: int) -> OperatorMetadata:
        obj = self.obj
        for store in obj.get("stateStoreInfo", []):
            store["numPartitions"] = partitions
        return OperatorMetadata(self.version, json.dumps(obj, separators=(",", ":")))


# SchemaV2Writer.MAX_UTF_CHUNK_SIZE: characters per writeUTF of a schema's JSON.
_UTF_CHUNK = 65535


def _java_utf(text: str) -> bytes:
    """``DataOutputStream.writeUTF``: a two-byte length, then modified UTF-8 (NUL as two
    bytes, supplementary characters as two encoded surrogates)."""
    units = text.encode("utf-16-le")
    code_units = struct.unpack(f"<{len(units) // 2}H", units)
    raw = "".join(map(chr, code_units)).encode("utf-8", "surrogatepass") \
        .replace(b"\x00", b"\xc0\x80")
    if len(raw) > 0xFFFF:
        raise ValueError(f"a writeUTF string holds at most 65535 bytes, found {len(raw)}")
    return struct.pack(">H", len(raw)) + raw


def _read_java_utf(data: bytes, pos: int, path: str) -> tuple[str, int]:
    """Read a ``DataOutputStream.writeUTF`` string (length-prefixed modified UTF-8)."""
    if pos + 2 > len(data):
        raise CheckpointFormatError(f"{path}: expected a string length at byte {pos}, found EOF")
    (length,) = struct.unpack_from(">H", data, pos)
    start, end = pos + 2, pos + 2 + length
    if end > len(data):
        raise CheckpointFormatError(
            f"{path}: expected {length} string bytes at byte {start}, found {len(data) - start}"
        )
    raw = data[start:end]
    # Modified UTF-8 differs from UTF-8 only for NUL and supplementary characters; the
    # surrogatepass round trip turns its surrogate pairs back into real characters.
    text = raw.replace(b"\xc0\x80", b"\x00").decode("utf-8", "surrogatepass")
    text = text.encode("utf-16", "surrogatepass").decode("utf-16")
    return text, end


def _read_chunked_json(data: bytes, pos: int, path: str) -> tuple[str, int]:
    if pos + 4 > len(data):
        raise CheckpointFormatError(f"{path}: expected a chunk count at byte {pos}, found EOF")
    (chunks,) = struct.unpack_from(">i", data, pos)
    if chunks < 0 or chunks > 1 << 16:
        raise CheckpointFormatError(
            f"{path}: expected a small positive chunk count at byte {pos}, found {chunks}"
        )
    pos += 4
    parts = []
    for _ in range(chunks):
        part, pos = _read_java_utf(data, pos, path)
        parts.append(part)
    return "".join(parts), pos


@dataclass(frozen=True)
class StateSchemaFile:
    """Schema file v2: key and value schema of one state store, as Spark's JSON."""

    version: int
    key_schema_json: str
    value_schema_json: str
    raw: bytes

    @classmethod
    def parse(cls, data: bytes, path: str) -> StateSchemaFile:
        header, pos = _read_java_utf(data, 0, path)
        if not (header.startswith("v") and header[1:].isdigit()):
            raise CheckpointFormatError(
                f"{path}: expected a state schema header like 'v2', found {header[:20]!r}"
            )
        version = int(header[1:])
        if version not in SCHEMA_FILE_VERSIONS:
            raise CheckpointFormatError(
                f"{path}: state schema file v{version} is not supported (supported: v2)"
            )
        key, pos = _read_chunked_json(data, pos, path)
        value, pos = _read_chunked_json(data, pos, path)
        for text, what in ((key, "key"), (value, "value")):
            try:
                json.loads(text)
            except json.JSONDecodeError as exc:
                raise CheckpointFormatError(
                    f"{path}: expected the {what} schema as JSON, found invalid JSON ({exc.msg})"
                ) from exc
        return cls(version, key, value, data)

    def to_bytes(self) -> bytes:
        return self.raw

    @classmethod
    def build(cls, key_schema: dict[str, Any], value_schema: dict[str, Any]) -> StateSchemaFile:
        """Schema file v2 of a store, as Spark's ``SchemaV2Writer`` writes it: ``writeUTF("v2")``,
        then the key's and the value's JSON each as a chunk count and chunks of at most 65535
        characters, each written by ``writeUTF``."""
        texts = [json.dumps(schema, separators=(",", ":")) for schema in (key_schema,
                                                                           value_schema)]
        data = _java_utf("v2")
        for text in texts:
            chunks = [text[i:i + _UTF_CHUNK] for i in range(0, len(text), _UTF_CHUNK)] or [""]
            data += struct.pack(">i", len(chunks)) + b"".join(map(_java_utf, chunks))
        return cls(2, texts[0], texts[1], data)

    @property
    def key_schema(self) -> dict[str, Any]:
        value: dict[str, Any] = json.loads(self.key_schema_json)
        return value

    @property
    def value_schema(self) -> dict[str, Any]:
        value: dict[str, Any] = json.loads(self.value_schema_json)
        return value


def schema_ddl(schema: dict[str, Any]) -> str:
    """A compact human form of a Spark struct schema: ``window struct<start,end>, user string``."""
    return ", ".join(f"{field['name']} {_type_ddl(field['type'])}" for field in schema["fields"])


def _type_ddl(spark_type: Any) -> str:
    if isinstance(spark_type, str):
        return spark_type
    kind = spark_type.get("type")
    if kind == "struct":
        inner = ", ".join(f"{f['name']}: {_type_ddl(f['type'])}" for f in spark_type["fields"])
        return f"struct<{inner}>"
    if kind == "array":
        return f"array<{_type_ddl(spark_type['elementType'])}>"
    if kind == "map":
        return f"map<{_type_ddl(spark_type['keyType'])}, {_type_ddl(spark_type['valueType'])}>"
    return str(kind)
