"""The stored bytes of many JVM ``UnsafeRow``s brought to Python in one call.

Taking rows one by one through py4j costs a round trip per row (two with ``getBytes()``):
a few thousand rows per second. Java's own serialization writes a whole ``InternalRow[]``
in one call, and ``UnsafeRow`` is ``Externalizable``: its ``writeExternal`` writes the row's
byte length, its number of fields and its bytes (Spark 4.3.0's UnsafeRow.java). This module
reads that stream (Java Object Serialization Specification, chapter 6: protocol version 2,
block data mode) for exactly that shape, an array whose elements are ``UnsafeRow``s or
null, and refuses anything else.
"""

from __future__ import annotations

import os
import struct
import tempfile
from collections.abc import Iterator
from typing import Any

MAGIC = b"\xac\xed\x00\x05"
TC_NULL = 0x70
TC_REFERENCE = 0x71
TC_CLASSDESC = 0x72
TC_OBJECT = 0x73
TC_ARRAY = 0x75
TC_BLOCKDATA = 0x77
TC_ENDBLOCKDATA = 0x78
TC_BLOCKDATALONG = 0x7A
UNSAFE_ROW_CLASS = "org.apache.spark.sql.catalyst.expressions.UnsafeRow"


class RowStreamError(ValueError):
    """The stream is not an array of UnsafeRows as this module reads it."""


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0
        # Class descriptors by handle: a row's class is written once, then referred to.
        self.handles: list[str | None] = []

    def byte(self) -> int:
        if self.pos >= len(self.data):
            raise RowStreamError(f"the stream ends at byte {self.pos}")
        value = self.data[self.pos]
        self.pos += 1
        return value

    def take(self, count: int) -> bytes:
        end = self.pos + count
        if end > len(self.data):
            raise RowStreamError(f"the stream ends before byte {end}")
        chunk = self.data[self.pos:end]
        self.pos = end
        return chunk

    def int32(self) -> int:
        value: int = struct.unpack(">i", self.take(4))[0]
        return value

    def utf(self) -> str:
        (length,) = struct.unpack(">H", self.take(2))
        return self.take(length).decode("utf-8")

    def class_desc(self) -> str | None:
        """A class descriptor (new, a reference, or null); return the class name."""
        tag = self.byte()
        if tag == TC_NULL:
            return None
        if tag == TC_REFERENCE:
            handle = self.int32() - 0x7E0000
            if not 0 <= handle < len(self.handles):
                raise RowStreamError(f"a reference to unknown handle {handle}")
            return self.handles[handle]
        if tag != TC_CLASSDESC:
            raise RowStreamError(f"expected a class descriptor, found tag {tag:#x}")
        name = self.utf()
        self.take(8)  # serialVersionUID
        self.handles.append(name)
        self.byte()  # flags
        (fields,) = struct.unpack(">H", self.take(2))
        if fields:
            raise RowStreamError(f"class {name} has {fields} serialized field(s); expected none")
        if self.byte() != TC_ENDBLOCKDATA:
            raise RowStreamError(f"class {name} has annotations; expected none")
        self.class_desc()  # its superclass
        return name

    def block_data(self) -> bytes:
        """An Externalizable object's data: block data records up to TC_ENDBLOCKDATA."""
        parts: list[bytes] = []
        while True:
            tag = self.byte()
            if tag == TC_ENDBLOCKDATA:
                return b"".join(parts)
            if tag == TC_BLOCKDATA:
                parts.append(self.take(self.byte()))
            elif tag == TC_BLOCKDATALONG:
                parts.append(self.take(self.int32()))
            else:
                raise RowStreamError(f"expected block data, found tag {tag:#x}")


def parse_rows(data: bytes) -> list[bytes | None]:
    """The bytes of each row of a serialized ``InternalRow[]`` (None for a null element)."""
    if not data.startswith(MAGIC):
        raise RowStreamError("not a Java serialization stream (magic 0xACED0005)")
    reader = _Reader(data)
    reader.pos = len(MAGIC)
    if reader.byte() != TC_ARRAY:
        raise RowStreamError("expected an array")
    reader.class_desc()
    reader.handles.append(None)  # the array itself takes a handle
    rows: list[bytes | None] = []
    row_class: bytes | None = None  # a reference to UnsafeRow's descriptor, once written
    for _ in range(reader.int32()):
        pos = reader.pos
        if row_class is not None and data.startswith(row_class, pos) \
                and data[pos + 6] == TC_BLOCKDATA:
            # The usual row: a reference to the class, then one short block of data
            # (length, fields, bytes) and its end: read without the general reader.
            length = data[pos + 7]
            end = pos + 8 + length
            if length >= 8 and end < len(data) and data[end] == TC_ENDBLOCKDATA:
                (size,) = struct.unpack_from(">i", data, pos + 8)
                if size != length - 8:
                    raise RowStreamError(f"a row of {size} bytes in a record of {length - 8}")
                rows.append(data[pos + 16:end])
                reader.handles.append(None)
                reader.pos = end + 1
                continue
        tag = reader.byte()
        if tag == TC_NULL:
            rows.append(None)
            continue
        if tag != TC_OBJECT:
            raise RowStreamError(f"expected a row object, found tag {tag:#x}")
        name = reader.class_desc()
        if name != UNSAFE_ROW_CLASS:
            raise RowStreamError(f"expected {UNSAFE_ROW_CLASS}, found {name}")
        if row_class is None:
            handle = reader.handles.index(UNSAFE_ROW_CLASS) + 0x7E0000
            row_class = bytes([TC_OBJECT, TC_REFERENCE]) + struct.pack(">i", handle)
        reader.handles.append(None)  # the object's own handle
        block = reader.block_data()
        size, _fields = struct.unpack_from(">ii", block)
        if size != len(block) - 8:
            raise RowStreamError(f"a row of {size} bytes in a record of {len(block) - 8}")
        rows.append(block[8:])
    return rows


def rows_bytes(spark: Any, java_rows: Any) -> list[bytes | None]:
    """The bytes of each ``UnsafeRow`` of the JVM array ``java_rows``, in one py4j call. The
    JVM writes them to a file, read here: py4j's own transfer of a byte array decodes it in
    Python a byte at a time."""
    jvm = spark._jvm
    with tempfile.TemporaryDirectory(prefix="sparkpoint-rows-") as scratch:
        path = os.path.join(scratch, "rows")
        stream = jvm.java.io.ObjectOutputStream(
            jvm.java.io.BufferedOutputStream(jvm.java.io.FileOutputStream(path), 1 << 20))
        try:
            stream.writeObject(java_rows)
        finally:
            stream.close()
        with open(path, "rb") as handle:
            return parse_rows(handle.read())


def iter_rows_bytes(spark: Any, scala_rows: Any, chunk: int) -> Iterator[bytes | None]:
    """The bytes of each ``UnsafeRow`` a JVM (Scala) iterator yields, taken ``chunk`` rows
    per py4j call, so that no more than a chunk is held here at once."""
    jvm = spark._jvm
    any_ref = getattr(jvm.scala.reflect, "ClassTag$").__getattr__("MODULE$").AnyRef()
    groups = scala_rows.grouped(chunk)
    while groups.hasNext():
        yield from rows_bytes(spark, groups.next().toArray(any_ref))
