"""Pure-Python reader and writer for the state files of Spark's HDFSBackedStateStoreProvider.

A state store partition directory (``state/<opId>/<partition>/``, or
``state/<opId>/<partition>/<storeName>/`` for stream-stream joins) holds one ``<v>.delta``
per committed batch (``v = batchId + 1``) and, from time to time, a ``<v>.snapshot`` holding
the full state at version ``v``.

Both kinds of file are the same byte format, written through Spark's default state store
codec (``spark.sql.streaming.stateStore.compression.codec=lz4``), i.e. lz4-java's
``LZ4BlockOutputStream``:

* a sequence of blocks, each ``b"LZ4Block"``, one token byte (high nibble ``0x10`` raw or
  ``0x20`` LZ4, low nibble ``log2(blockSize) - 10``), compressed length, decompressed length
  and checksum (three little-endian int32), then the block bytes. The checksum is XXH32 of the
  decompressed bytes with seed ``0x9747B28C``, masked to its low 28 bits (lz4-java's
  ``StreamingXXHash32.asChecksum()`` does the masking);
* the stream closes with an empty raw block (zero lengths, zero checksum). Spark reads with
  ``stopOnEmptyBlock=false``, so several such streams back to back read as one.

Decompressed and concatenated, the blocks hold big-endian records
``int32 keyLen, key, int32 valueLen, value``; ``valueLen == -1`` (no value bytes follow) records
the removal of the key, and ``keyLen == -1`` ends the records. Keys and values are
``UnsafeRow`` bytes and are handled here as opaque bytes.

The state files of a query that ran with ``spark.sql.streaming.stateStore.rowChecksum.enabled``
(off by default) embed a CRC32C in keys of removals and in values; this module does not decode
that encoding, so ``load_version`` on such a store does not match Spark's view.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import struct
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import lz4.block
import lz4.frame
import xxhash

from sparkpoint.errors import CheckpointFormatError, UsageError
from sparkpoint.storage.location import Location

if TYPE_CHECKING:
    import numpy as np

__all__ = [
    "DEFAULT_BLOCK_SIZE",
    "FixedState",
    "VersionFiles",
    "count_rows",
    "files_for_version",
    "key_bytes",
    "load_fixed_version",
    "load_version",
    "read_records",
    "state_file_versions",
    "without_fixed_keys",
    "write_fixed_snapshot",
    "write_records",
    "write_snapshot",
]

MAGIC = b"LZ4Block"
_HEADER = struct.Struct("<8sBiiI")
HEADER_LENGTH = _HEADER.size  # 21

METHOD_RAW = 0x10
METHOD_LZ4 = 0x20
COMPRESSION_LEVEL_BASE = 10
MIN_BLOCK_SIZE = 64
MAX_BLOCK_SIZE = 1 << (COMPRESSION_LEVEL_BASE + 0x0F)

# spark.io.compression.lz4.blockSize default.
DEFAULT_BLOCK_SIZE = 32 * 1024

XXHASH_SEED = 0x9747B28C
CHECKSUM_MASK = 0x0FFFFFFF

_INT = struct.Struct(">i")
_END_OF_RECORDS = _INT.pack(-1)

# Largest block an LZ4 frame can carry; see _compress_block.
_FRAME_MAX_BLOCK = 4 * 1024 * 1024
_FRAME_MAGIC = b"\x04\x22\x4d\x18"

# Spark opens "<version>.delta" by number, so only canonical decimal names can be loaded.
_STATE_FILE = re.compile(r"^(0|[1-9][0-9]*)\.(delta|snapshot)$")

# First bytes of the other codecs Spark accepts for state files, to name the codec in errors.
_OTHER_CODECS = (
    (b"\x28\xb5\x2f\xfd", "zstd"),
    (b"\x82SNAPPY\x00", "snappy"),
    (b"ZV", "lzf"),
)


# --------------------------------------------------------------------------------------------
# Reading


def read_records(data: bytes, path: str) -> list[tuple[bytes, bytes | None]]:
    """Parse one ``.delta`` or ``.snapshot`` file into ``(key, value)`` records in file order.

    ``value`` is ``None`` for a removal. Every block checksum is verified. ``path`` is only
    used in error messages.

    Stricter than Spark where only a damaged file differs: the file must end exactly with an
    end-of-stream block (Spark stops quietly at a missing or partial block header), nothing may
    follow the ``-1`` that ends the records (Spark ignores it), and a negative value length
    other than ``-1`` is refused (Spark takes any negative length as a removal).

    Raises:
        CheckpointFormatError: the bytes are not a well-formed state file.
    """
    payload = _decode_blocks(data, path)
    return _parse_records(payload, path)


_CHANGELOG_VERSION = re.compile(rb"^v(\d+)$")


def _changelog_parts(payload: bytes, path: str) -> tuple[int, list[tuple[int, str]], int]:
    """(changelog version, lineage, offset of the first record) of a decoded RocksDB
    changelog. Version 1 has no header. Versions 2 to 4 start with Java's writeUTF of
    ``v<n>`` (a big-endian u16 length, then the bytes); 3 and 4 (checkpoint format v2) follow
    it with a writeUTF of their lineage, JSON ``[{"version":..,"checkpointUniqueId":..}]``."""
    if len(payload) < 4:
        return 1, [], 0
    (length,) = struct.unpack_from(">H", payload, 0)
    match = _CHANGELOG_VERSION.match(payload[2:2 + length]) if 2 <= length <= 4 else None
    if match is None:
        return 1, [], 0
    version, pos = int(match.group(1)), 2 + length
    lineage: list[tuple[int, str]] = []
    if version >= 3:
        if pos + 2 > len(payload):
            raise _fail(path, f"changelog v{version} ends before its lineage")
        (length,) = struct.unpack_from(">H", payload, pos)
        try:
            entries = json.loads(payload[pos + 2:pos + 2 + length].decode("utf-8"))
            lineage = [(int(e["version"]), str(e["checkpointUniqueId"])) for e in entries]
        except (ValueError, TypeError, KeyError) as exc:
            raise _fail(path, f"changelog v{version}: expected its lineage as JSON "
                              f"[{{version, checkpointUniqueId}}], found {exc}") from exc
        pos += 2 + length
    return version, lineage, pos


def changelog_header(data: bytes, path: str) -> tuple[int, list[tuple[int, str]]]:
    """(version, lineage) of a RocksDB changelog file (see ``_changelog_parts``)."""
    version, lineage, _ = _changelog_parts(_decode_blocks(data, path), path)
    return version, lineage


def read_changelog_records(data: bytes, path: str) -> list[tuple[bytes, bytes | None]]:
    """The puts (value) and deletes (None) of a RocksDB changelog, in file order. Versions 1
    and 3 hold the records of a ``.delta`` file after their header; versions 2 and 4 (column
    families: transformWithState) tag each record with a type and are not read here."""
    payload = _decode_blocks(data, path)
    version, _, pos = _changelog_parts(payload, path)
    if version in (2, 4):
        raise _fail(path, f"changelog v{version} (column families, transformWithState): "
                          "reading its records is not supported yet")
    if version > 4:
        raise _fail(path, f"expected a changelog of version 1 to 4, found v{version}")
    return _parse_records(payload[pos:], path)


def _fail(path: str, message: str) -> CheckpointFormatError:
    return CheckpointFormatError(f"{path}: {message}")


def _codec_hint(data: bytes) -> str:
    for magic, codec in _OTHER_CODECS:
        if data.startswith(magic):
            return (
                f" (the file starts like a {codec} stream: this reader only handles "
                "spark.sql.streaming.stateStore.compression.codec=lz4)"
            )
    return ""


def _decode_blocks(data: bytes, path: str) -> bytes:
    size = len(data)
    if size == 0:
        raise _fail(path, "empty file; expected LZ4 blocks ending with an end-of-stream block")
    view = memoryview(data)
    parts: list[bytes] = []
    offset = 0
    ended = False
    while offset < size:
        if size - offset < HEADER_LENGTH:
            raise _fail(
                path,
                f"truncated LZ4 block header at byte {offset}: expected {HEADER_LENGTH} bytes, "
                f"found {size - offset}",
            )
        magic, token, compressed_len, original_len, check = _HEADER.unpack_from(data, offset)
        if magic != MAGIC:
            hint = _codec_hint(data) if offset == 0 else ""
            raise _fail(
                path,
                f"bad LZ4 block magic at byte {offset}: expected {MAGIC!r}, found {magic!r}{hint}",
            )
        method = token & 0xF0
        if method not in (METHOD_RAW, METHOD_LZ4):
            raise _fail(
                path,
                f"bad LZ4 block token at byte {offset + 8}: expected compression method 0x10 "
                f"(raw) or 0x20 (lz4), found token 0x{token:02x}",
            )
        max_len = 1 << (COMPRESSION_LEVEL_BASE + (token & 0x0F))
        # The same consistency rules lz4-java's LZ4BlockInputStream enforces.
        if (
            original_len < 0
            or compressed_len < 0
            or original_len > max_len
            or (original_len == 0) != (compressed_len == 0)
            or (method == METHOD_RAW and original_len != compressed_len)
        ):
            raise _fail(
                path,
                f"inconsistent LZ4 block header at byte {offset}: token 0x{token:02x}, "
                f"compressed length {compressed_len}, decompressed length {original_len}; "
                f"expected non-negative lengths, both zero or both non-zero, at most {max_len} "
                "decompressed bytes, and equal lengths for a raw block",
            )
        body_start = offset + HEADER_LENGTH
        if original_len == 0:
            if check != 0:
                raise _fail(
                    path,
                    f"end-of-stream LZ4 block at byte {offset} has checksum 0x{check:08x}; "
                    "expected 0",
                )
            ended = True
            offset = body_start
            continue
        ended = False
        body_end = body_start + compressed_len
        if body_end > size:
            raise _fail(
                path,
                f"truncated LZ4 block at byte {offset}: expected {compressed_len} bytes of "
                f"block data, found {size - body_start}",
            )
        body = view[body_start:body_end]
        if method == METHOD_RAW:
            block = bytes(body)
        else:
            try:
                block = _decompress(body, original_len)
            except lz4.block.LZ4BlockError as exc:
                raise _fail(
                    path,
                    f"corrupt LZ4 data in block at byte {offset}: expected {compressed_len} "
                    f"bytes decompressing to {original_len}; lz4 says: {exc}",
                ) from exc
        actual = xxhash.xxh32_intdigest(block, seed=XXHASH_SEED) & CHECKSUM_MASK
        if actual != check:
            raise _fail(
                path,
                f"checksum mismatch in LZ4 block at byte {offset}: header says 0x{check:08x}, "
                f"data hashes to 0x{actual:08x}",
            )
        parts.append(block)
        offset = body_end
    if not ended:
        raise _fail(
            path,
            f"missing LZ4 end-of-stream block: expected an empty block at byte {size}, "
            "found end of file (the file is probably truncated)",
        )
    return b"".join(parts)


def _decompress(body: memoryview, original_len: int) -> bytes:
    block: bytes = lz4.block.decompress(body, uncompressed_size=original_len)
    return block


def _parse_records(payload: bytes, path: str) -> list[tuple[bytes, bytes | None]]:
    records: list[tuple[bytes, bytes | None]] = []
    size = len(payload)
    unpack = _INT.unpack_from
    pos = 0

    def need(count: int, what: str) -> None:
        if pos + count > size:
            raise _fail(
                path,
                f"records end early: expected {what} ({count} bytes) at decompressed byte {pos} "
                f"of record {len(records)}, found {size - pos} bytes",
            )

    while True:
        need(4, "a key length")
        (key_len,) = unpack(payload, pos)
        pos += 4
        if key_len == -1:
            break
        if key_len < 0:
            raise _fail(
                path,
                f"bad key length {key_len} at decompressed byte {pos - 4} of record "
                f"{len(records)}: expected >= 0, or -1 to end the records",
            )
        need(key_len, "key bytes")
        key = payload[pos : pos + key_len]
        pos += key_len
        need(4, "a value length")
        (value_len,) = unpack(payload, pos)
        pos += 4
        if value_len == -1:
            records.append((key, None))
            continue
        if value_len < 0:
            raise _fail(
                path,
                f"bad value length {value_len} at decompressed byte {pos - 4} of record "
                f"{len(records)}: expected >= 0, or -1 for a removal",
            )
        need(value_len, "value bytes")
        records.append((key, payload[pos : pos + value_len]))
        pos += value_len
    if pos != size:
        raise _fail(
            path,
            f"{size - pos} unexpected bytes after the end-of-records marker (-1) at decompressed "
            f"byte {pos - 4}; expected the data to end there",
        )
    return records


# --------------------------------------------------------------------------------------------
# Writing


def write_records(
    records: Iterable[tuple[bytes, bytes | None]], *, block_size: int = DEFAULT_BLOCK_SIZE
) -> bytes:
    """Serialize records into the bytes of a ``.delta``/``.snapshot`` file Spark can load.

    A ``None`` value writes a removal (only meaningful in a ``.delta``: Spark refuses a
    removal inside a ``.snapshot``). ``block_size`` mirrors ``spark.io.compression.lz4.blockSize``.

    Byte identity: the output is byte-for-byte what Spark 4.3 writes for the same records in
    the same order, on JVMs where lz4-java uses its bundled native liblz4
    (``LZ4Factory.fastestInstance()`` reports JNI, as checked on Linux x86_64), for block
    sizes up to 4 MiB. Blocks are cut at every ``block_size`` bytes of the uncompressed record
    stream, as ``LZ4BlockOutputStream`` does, and each block is compressed with liblz4's
    ``LZ4_compress_default`` algorithm. A JVM that falls back to lz4-java's pure-Java
    compressor produces different (equally valid) bytes. Spark's own snapshots list entries in
    its hash map's order, so a snapshot written from a ``dict`` matches Spark's bytes only if
    the order does.
    """
    return _encode_payload(records_payload(records), _compression_level(block_size), block_size)


def records_payload(records: Iterable[tuple[bytes, bytes | None]]) -> bytes:
    """The uncompressed bytes of ``records`` and their end marker, as the files hold them."""
    return record_bytes(records) + _END_OF_RECORDS


def record_bytes(records: Iterable[tuple[bytes, bytes | None]]) -> bytes:
    """The uncompressed bytes of ``records`` without the end marker: slices of a file's
    records that are concatenated later (``snapshot_of_records``)."""
    pieces: list[bytes] = []
    append = pieces.append
    pack = _INT.pack
    for key, value in records:
        append(pack(len(key)))
        append(key)
        if value is None:
            append(_END_OF_RECORDS)
        else:
            append(pack(len(value)))
            append(value)
    return b"".join(pieces)


def encode_payload(payload: bytes, block_size: int = DEFAULT_BLOCK_SIZE) -> bytes:
    """Any uncompressed payload (a changelog's header and records) as Spark's LZ4 stream."""
    return _encode_payload(payload, _compression_level(block_size), block_size)


def _encode_payload(payload: bytes, level: int, block_size: int) -> bytes:
    """LZ4 blocks of ``payload`` (the records and their end marker), as Spark's codec cuts
    and compresses them."""
    out: list[bytes] = []
    for start in range(0, len(payload), block_size):
        chunk = payload[start : start + block_size]
        check = xxhash.xxh32_intdigest(chunk, seed=XXHASH_SEED) & CHECKSUM_MASK
        compressed = _compress_block(chunk)
        if compressed is None:
            out.append(_HEADER.pack(MAGIC, METHOD_RAW | level, len(chunk), len(chunk), check))
            out.append(chunk)
        else:
            out.append(_HEADER.pack(MAGIC, METHOD_LZ4 | level, len(compressed), len(chunk), check))
            out.append(compressed)
    out.append(_HEADER.pack(MAGIC, METHOD_RAW | level, 0, 0, 0))
    return b"".join(out)


def _compression_level(block_size: int) -> int:
    if not MIN_BLOCK_SIZE <= block_size <= MAX_BLOCK_SIZE:
        raise UsageError(
            f"LZ4 block size {block_size} is out of range: expected {MIN_BLOCK_SIZE} to "
            f"{MAX_BLOCK_SIZE} bytes"
        )
    # ceil(log2(block_size)) - 10, floored at 0, as in LZ4BlockOutputStream.
    return max(0, (block_size - 1).bit_length() - COMPRESSION_LEVEL_BASE)


def _compress_block(chunk: bytes) -> bytes | None:
    """LZ4-compress one block, or None where lz4-java would store it raw.

    lz4-java (native) calls ``LZ4_compress_default``, which hashes positions of inputs under
    64 KiB into a 16-bit table. ``lz4.block.compress`` goes through the streaming API and its
    32-bit table, so its output differs. LZ4 frame compression of a single independent block
    at level 0 runs ``LZ4_compress_fast_extState_fastReset`` on a fresh context, the same
    algorithm as ``LZ4_compress_default``, so the block inside such a frame is exactly what
    Spark writes. The frame compressor gives up when the result would not be smaller than the
    input and then stores the block uncompressed: the same rule lz4-java applies.
    """
    if len(chunk) > _FRAME_MAX_BLOCK:
        # No frame block is that large; still valid LZ4, just not Spark's exact bytes.
        packed: bytes = lz4.block.compress(chunk, mode="default", store_size=False)
        return packed if len(packed) < len(chunk) else None
    frame: bytes = lz4.frame.compress(
        chunk,
        compression_level=0,
        block_size=_frame_block_size(len(chunk)),
        block_linked=False,
        content_checksum=False,
        block_checksum=False,
        store_size=False,
    )
    if frame[:4] != _FRAME_MAGIC:
        raise AssertionError(f"lz4.frame produced no LZ4 frame (starts with {frame[:4]!r})")
    flags = frame[4]
    pos = 7 + (8 if flags & 0x08 else 0) + (4 if flags & 0x01 else 0)
    (block_header,) = struct.unpack_from("<I", frame, pos)
    pos += 4
    length = block_header & 0x7FFFFFFF
    if block_header & 0x80000000 or length >= len(chunk):
        return None
    if struct.unpack_from("<I", frame, pos + length)[0] != 0:
        raise AssertionError("lz4.frame split one block into several")
    return frame[pos : pos + length]


def _frame_block_size(length: int) -> int:
    for limit, size_id in (
        (64 * 1024, lz4.frame.BLOCKSIZE_MAX64KB),
        (256 * 1024, lz4.frame.BLOCKSIZE_MAX256KB),
        (1024 * 1024, lz4.frame.BLOCKSIZE_MAX1MB),
    ):
        if length <= limit:
            return int(size_id)
    return int(lz4.frame.BLOCKSIZE_MAX4MB)


# --------------------------------------------------------------------------------------------
# Directories


def _list_state_files(partition_dir: Location,
                      listed: Iterable[str] | None = None) -> tuple[set[int], set[int]]:
    """(delta versions, snapshot versions) present, named as Spark names them; ``listed``:
    the directory's file names when the caller has listed it already.

    Anything else (``.crc`` sidecars, ``_metadata``, hidden temp files) is ignored, as Spark's
    listing ignores it.
    """
    try:
        if listed is not None:
            names = list(listed)
            if not names:
                raise FileNotFoundError(str(partition_dir))
        elif isinstance(partition_dir, Path):
            names = [entry.name for entry in os.scandir(partition_dir) if entry.is_file()]
        else:
            names = [entry.name for entry in partition_dir.iterdir()]
            if not names:
                raise FileNotFoundError(partition_dir.url)
    except FileNotFoundError as exc:
        raise CheckpointFormatError(
            f"{partition_dir}: state store directory not found; expected a directory of "
            "<version>.delta / <version>.snapshot files"
        ) from exc
    except NotADirectoryError as exc:
        raise CheckpointFormatError(
            f"{partition_dir}: expected a state store directory, found a file"
        ) from exc
    deltas: set[int] = set()
    snapshots: set[int] = set()
    for name in names:
        match = _STATE_FILE.match(name)
        if match is not None:
            (deltas if match.group(2) == "delta" else snapshots).add(int(match.group(1)))
    return deltas, snapshots


def state_file_versions(partition_dir: Location) -> tuple[set[int], set[int]]:
    """(delta versions, snapshot versions) present in a partition directory."""
    return _list_state_files(partition_dir)


def _ranges(versions: Iterable[int]) -> str:
    ordered = sorted(versions)
    if not ordered:
        return "none"
    spans: list[str] = []
    start = prev = ordered[0]
    for version in ordered[1:]:
        if version != prev + 1:
            spans.append(str(start) if start == prev else f"{start}-{prev}")
            start = version
        prev = version
    spans.append(str(start) if start == prev else f"{start}-{prev}")
    return ", ".join(spans)


@dataclass(frozen=True)
class VersionFiles:
    """The files Spark 4.3 reads to load one version of a store, oldest first.

    ``snapshot`` is the newest ``<s>.snapshot`` with ``s <= version``, 0 when there is none
    (Spark then starts from the empty state of version 0); ``deltas`` are ``s+1 .. version``.
    Spark lists the ``.snapshot`` files and opens the deltas by number: nothing else in the
    directory (other versions, ``.crc`` sidecars) takes part.
    """

    version: int
    snapshot: int
    deltas: tuple[int, ...]

    def names(self) -> list[str]:
        head = [f"{self.snapshot}.snapshot"] if self.snapshot else []
        return head + [f"{delta}.delta" for delta in self.deltas]


def files_for_version(partition_dir: Location, version: int,
                      listed: Iterable[str] | None = None) -> VersionFiles:
    """Which files load ``version`` of the store in ``partition_dir`` (see ``VersionFiles``);
    ``listed``: the directory's file names when the caller has listed it already.

    Raises:
        CheckpointFormatError: the directory is missing or a needed delta is missing.
        UsageError: ``version`` is negative.
    """
    if version < 0:
        raise UsageError(f"state store version must be >= 0, got {version}")
    deltas, snapshots = _list_state_files(partition_dir, listed)
    if version == 0:
        return VersionFiles(0, 0, ())
    start = max((s for s in snapshots if s <= version), default=0)
    missing = [d for d in range(start + 1, version + 1) if d not in deltas]
    if missing:
        base = f"snapshot {start}" if start else "an empty state (no snapshot <= version)"
        raise CheckpointFormatError(
            f"{partition_dir}: cannot load state version {version}: expected delta files "
            f"{start + 1}..{version} on top of {base}, missing "
            f"{_ranges(missing)}.delta; found deltas {_ranges(deltas)}, snapshots "
            f"{_ranges(snapshots)}"
        )
    return VersionFiles(version, start, tuple(range(start + 1, version + 1)))


def load_version(partition_dir: Path, version: int) -> dict[bytes, bytes]:
    """The state of one store at ``version``, exactly as Spark loads it from files.

    Takes the newest ``<s>.snapshot`` with ``s <= version`` (none: start empty at ``s = 0``),
    then applies the puts and removes of ``<s+1>.delta`` .. ``<version>.delta`` in order.
    Version 0 is the empty state. Values are returned as stored (Spark additionally floors a
    loaded value's length to a multiple of 8 to cope with rows written before Spark 2.3).

    Unlike Spark with ``stateStore.autoSnapshotRepair.enabled``, a damaged snapshot is
    reported rather than worked around with an older one.

    Raises:
        CheckpointFormatError: the directory is missing, a needed delta is missing, or a file
            is malformed (including a removal inside a snapshot, which Spark refuses).
        UsageError: ``version`` is negative.
    """
    files = files_for_version(partition_dir, version)
    state: dict[bytes, bytes] = {}
    if files.snapshot:
        snapshot_path = partition_dir / f"{files.snapshot}.snapshot"
        for key, value in read_records(_read_file(snapshot_path), str(snapshot_path)):
            if value is None:
                raise CheckpointFormatError(
                    f"{snapshot_path}: snapshot contains a removal record for a key of "
                    f"{len(key)} bytes; expected only key/value records (Spark refuses to "
                    "load this snapshot)"
                )
            state[key] = value
    for delta in files.deltas:
        delta_path = partition_dir / f"{delta}.delta"
        for key, value in read_records(_read_file(delta_path), str(delta_path)):
            if value is None:
                state.pop(key, None)
            else:
                state[key] = value
    return state


def count_rows(partition_dir: Path, files: VersionFiles) -> int:
    """How many keys ``files`` hold at their version, without building the state.

    Only keys are looked at, never values. A snapshot file's records are distinct keys
    (Spark writes them from its map), so a version that is one snapshot file is counted by
    its records alone. When every file's records share one key length and one value length
    (fixed-width keys and aggregates, the common case) the keys are counted with numpy;
    otherwise record by record into a set.

    Raises:
        CheckpointFormatError: a file is malformed (as ``read_records`` says) or disappeared,
            or a snapshot file holds a removal.
    """
    names = files.names()
    payloads = []
    for name in names:
        path = partition_dir / name
        payloads.append(_decode_blocks(_read_file(path), str(path)))
    layouts = [_fixed_layout(payload) for payload in payloads]
    if files.snapshot:
        snapshot = layouts[0]
        if snapshot is not None and not snapshot.puts:
            raise _removal_in_snapshot(str(partition_dir / names[0]), snapshot.key_len)
        if not files.deltas and snapshot is not None:
            return snapshot.count
    # A file of no records (a batch that changed nothing) has no shape to agree on.
    fixed = [layout for layout in layouts if layout is not None]
    shaped = [payload != _END_OF_RECORDS for payload in payloads]
    if len(fixed) == sum(shaped) and fixed:
        counted = _count_fixed(fixed)
        if counted is not None:
            return counted
    return _count_with_a_set(partition_dir, names, payloads, bool(files.snapshot))


@dataclass(frozen=True)
class _FixedLayout:
    """Where the keys are in a file whose records all have one shape."""

    payload: bytes
    count: int
    key_len: int
    stride: int
    puts: bool

    def field(self, dtype: str, offset: int, width: int | None = None) -> Any:
        """A numpy view of one field of every record, or of ``width`` items from it."""
        import numpy as np

        shape = (self.count,) if width is None else (self.count, width)
        size = np.dtype(dtype).itemsize
        strides = (self.stride,) if width is None else (self.stride, size)
        return np.ndarray(shape, dtype, self.payload, offset, strides)

    def keys(self) -> Any:
        return self.field("u1", 4, self.key_len)


def _fixed_layout(payload: bytes) -> _FixedLayout | None:
    """Where the keys are in records that all share one key length and one value length (or
    are all removals of one key length); None for any other record stream.

    When every record has the lengths of the first one and the stream is a whole number of
    such records followed by the end marker, the record-by-record parse cannot read it any
    other way: the checks below are that parse, vectorized.
    """
    size = len(payload)
    if size < 12:
        return None
    (key_len,) = _INT.unpack_from(payload, 0)
    if key_len <= 0 or 8 + key_len > size:
        return None
    (value_len,) = _INT.unpack_from(payload, 4 + key_len)
    if value_len < -1:
        return None
    stride = 8 + key_len + max(value_len, 0)
    body = size - 4
    if body % stride or payload[body:] != _END_OF_RECORDS:
        return None
    layout = _FixedLayout(payload, body // stride, key_len, stride, value_len >= 0)
    if (layout.field(">i4", 0) != key_len).any():
        return None
    if (layout.field(">i4", 4 + key_len) != value_len).any():
        return None
    return layout


def _count_fixed(layouts: list[_FixedLayout]) -> int | None:
    """Keys whose last record is a put, over files of one key length; None if the key length
    does not suit the hashing (not a multiple of 8) or two keys' hashes collide."""
    live = _live_records(layouts, last_wins=False)
    return None if live is None else len(live)


def _live_records(layouts: list[_FixedLayout], last_wins: bool) -> Any | None:
    """Indexes (into the files' records, concatenated in order) of one record per key whose
    last record is a put: that last record itself when ``last_wins``, else any of the key's
    records (enough to count them). None when the keys are not of one length that is a
    multiple of 8, or two different keys' hashes collide."""
    import numpy as np  # here: numpy's import would slow every command that loads this module

    widths = {layout.key_len for layout in layouts}
    key_len = next(iter(widths))
    if len(widths) != 1 or key_len % 8:
        return None
    hashes = [_hash_keys(layout.field("<u8", 4, key_len // 8)) for layout in layouts]
    removals = not all(layout.puts for layout in layouts)
    last = _last_per_key(
        np.concatenate(hashes), stable=removals or last_wins,
        words=lambda: np.concatenate([layout.keys() for layout in layouts]).view("<u8"))
    if last is not None and removals:
        puts = np.concatenate([np.full(layout.count, layout.puts) for layout in layouts])
        last = last[puts[last]]
    return last


def _last_per_key(hashed: Any, stable: bool, words: Callable[[], Any]) -> Any | None:
    """Per distinct key, the index of its last row (any row unless ``stable``); None when
    two different keys (``words()``: the keys as rows of 64-bit words) share a hash."""
    import numpy as np

    # Stable: a key's rows keep their order, so its last row is the last of its run.
    order = np.argsort(hashed, kind="stable" if stable else "quicksort")
    hashed = hashed[order]
    same = hashed[1:] == hashed[:-1]
    if same.any():
        rows = words()
        if (rows[order[:-1][same]] != rows[order[1:][same]]).any():
            return None
    return order[np.append(~same, True)]


def _hash_keys(words: Any) -> Any:
    """One 64-bit hash per row of 64-bit words (a key), mixing every word."""
    import numpy as np

    hashed = words[:, 0].copy()
    for column in range(1, words.shape[1]):
        np.multiply(hashed, np.uint64(_HASH_MULTIPLIER), out=hashed)
        np.bitwise_xor(hashed, words[:, column], out=hashed)
    return hashed


@dataclass(frozen=True)
class FixedState:
    """One store version whose keys share one length and values another: ``keys`` and
    ``values`` are numpy uint8 arrays with one row per key."""

    keys: Any
    values: Any


def load_fixed_version(partition_dir: Path, version: int) -> FixedState | None:
    """``load_version`` for the common case where every record of the files read has the
    same key length (a multiple of 8, as UnsafeRows are) and every put the same value
    length, with numpy; None for any other store, which ``load_version`` then reads.

    Raises:
        CheckpointFormatError: as ``load_version``.
    """
    import numpy as np

    files = files_for_version(partition_dir, version)
    layouts = []
    for name in files.names():
        path = partition_dir / name
        payload = _decode_blocks(_read_file(path), str(path))
        if payload == _END_OF_RECORDS:
            continue  # a batch that changed nothing
        layout = _fixed_layout(payload)
        if layout is None:
            return None
        if files.snapshot and name == files.names()[0] and not layout.puts:
            raise _removal_in_snapshot(str(path), layout.key_len)
        layouts.append(layout)
    if not layouts:
        return FixedState(np.zeros((0, 8), np.uint8), np.zeros((0, 0), np.uint8))
    value_lens = {layout.stride - 8 - layout.key_len for layout in layouts if layout.puts}
    if len(value_lens) > 1:
        return None
    live = _live_records(layouts, last_wins=True)
    if live is None:
        return None
    value_len = next(iter(value_lens), 0)
    keys = np.concatenate([layout.keys() for layout in layouts])
    values = np.concatenate([
        layout.field("u1", 8 + layout.key_len, value_len) if layout.puts
        else np.zeros((layout.count, value_len), np.uint8)
        for layout in layouts
    ])
    return FixedState(keys[live], values[live])


def without_fixed_keys(state: FixedState,
                       keys: Sequence[bytes] | np.ndarray) -> tuple[FixedState, int]:
    """``state`` without ``keys`` and how many of them it held, with numpy (a set of a
    partition's keys in Python costs about 1 µs a key). ``keys``: the keys as bytes, or as a
    numpy uint8 array of one key per row (keys of one width, as a Spark task hands them over
    without a Python object per key). Rows are found by a 64-bit hash of their words, then
    compared with the key of that hash byte for byte, so two keys sharing a hash never remove
    each other. Keys of another width than the state's cannot be in it."""
    import numpy as np

    width = int(state.keys.shape[1])
    if isinstance(keys, np.ndarray):
        fits = keys.ndim == 2 and keys.shape[1] == width
        wanted_rows = keys if fits else np.empty((0, width), np.uint8)
    else:
        wanted = [key for key in keys if len(key) == width]
        wanted_rows = np.frombuffer(b"".join(wanted), np.uint8).reshape(len(wanted), width)
    if not wanted_rows.size or not len(state.keys):
        return state, 0
    rows = np.ascontiguousarray(state.keys)
    wanted_rows = np.ascontiguousarray(wanted_rows, np.uint8)
    if width % 8 == 0:
        wanted_hash = _hash_keys(wanted_rows.view("<u8"))
        order = np.argsort(wanted_hash, kind="stable")
        sorted_hash = wanted_hash[order]
        same = np.flatnonzero(sorted_hash[1:] == sorted_hash[:-1])
        # A key selected twice is one key; two different keys sharing a hash (about one
        # chance in 2^64 a pair) leave this path for the byte comparison below.
        if not (wanted_rows[order[same]] != wanted_rows[order[same + 1]]).any():
            unique = np.ones(len(order), bool)
            unique[same + 1] = False
            order, sorted_hash = order[unique], sorted_hash[unique]
            hashed = _hash_keys(rows.view("<u8"))
            at = np.minimum(np.searchsorted(sorted_hash, hashed), len(sorted_hash) - 1)
            gone = sorted_hash[at] == hashed
            candidates = np.flatnonzero(gone)
            partners = wanted_rows[order[at[candidates]]]
            gone[candidates] = (rows[candidates] == partners).all(axis=1)
            return _without_rows(state, gone)
    # Keys not of 64-bit words (never an UnsafeRow), or two wanted keys sharing a hash:
    # compared as bytes.
    wanted_set = set(key_bytes(wanted_rows))
    return _without_rows(state, np.fromiter((row.tobytes() in wanted_set for row in rows),
                                            bool, len(rows)))


def key_bytes(keys: Sequence[bytes] | np.ndarray) -> Sequence[bytes]:
    """Keys given as rows of a numpy array (see ``without_fixed_keys``) as bytes, one object
    each, for a store held in a dict."""
    import numpy as np

    return [row.tobytes() for row in keys] if isinstance(keys, np.ndarray) else keys


def _without_rows(state: FixedState, gone: Any) -> tuple[FixedState, int]:
    kept = ~gone
    return FixedState(state.keys[kept], state.values[kept]), int(gone.sum())


def write_fixed_snapshot(partition_dir_out: Path, version: int, state: FixedState) -> int:
    """``write_snapshot`` of a ``FixedState`` (records in its row order), built with numpy."""
    if version < 1:
        raise UsageError(f"snapshot version must be >= 1, got {version}")
    return _write_snapshot_file(partition_dir_out, version,
                                snapshot_of_records([fixed_record_bytes(state)]))


def fixed_record_bytes(state: FixedState) -> bytes:
    """``record_bytes`` of a ``FixedState`` (records in its row order), built with numpy."""
    import numpy as np

    count, key_len = state.keys.shape
    value_len = state.values.shape[1]
    records = np.empty((count, 8 + key_len + value_len), np.uint8)
    records[:, 0:4] = np.frombuffer(_INT.pack(key_len), np.uint8)
    records[:, 4 : 4 + key_len] = state.keys
    records[:, 4 + key_len : 8 + key_len] = np.frombuffer(_INT.pack(value_len), np.uint8)
    records[:, 8 + key_len :] = state.values
    return records.tobytes()


def snapshot_of_records(slices: Iterable[bytes]) -> bytes:
    """The bytes of a ``.snapshot`` file holding the records of ``slices`` (each from
    ``record_bytes``, with no key in two of them), as ``write_snapshot`` writes them."""
    payload = b"".join(slices) + _END_OF_RECORDS
    return _encode_payload(payload, _compression_level(DEFAULT_BLOCK_SIZE), DEFAULT_BLOCK_SIZE)


# Odd 64-bit constant (from the golden ratio) mixing the words of a key into one hash.
_HASH_MULTIPLIER = 0x9E3779B97F4A7C15


def _count_with_a_set(
    partition_dir: Path, names: list[str], payloads: list[bytes], has_snapshot: bool
) -> int:
    keys: set[bytes] = set()
    for index, (name, payload) in enumerate(zip(names, payloads, strict=True)):
        path = str(partition_dir / name)
        snapshot = has_snapshot and index == 0
        add, discard = keys.add, keys.discard
        for key, put in _walk_keys(payload, path):
            if put:
                add(key)
            elif snapshot:
                raise _removal_in_snapshot(path, len(key))
            else:
                discard(key)
    return len(keys)


def _removal_in_snapshot(path: str, key_bytes: int) -> CheckpointFormatError:
    return CheckpointFormatError(
        f"{path}: snapshot contains a removal record for a key of {key_bytes} bytes; "
        "expected only key/value records (Spark refuses to load this snapshot)"
    )


def _walk_keys(payload: bytes, path: str) -> Iterator[tuple[bytes, bool]]:
    """(key, is a put) of every record, in file order; values are skipped, not copied."""
    size = len(payload)
    unpack = _INT.unpack_from
    pos = 0
    key_len = 0
    try:
        while True:
            (key_len,) = unpack(payload, pos)
            if key_len < 0:
                break
            start = pos + 4
            pos = start + key_len
            (value_len,) = unpack(payload, pos)
            pos += 4
            if value_len >= 0:
                pos += value_len
            if pos > size or value_len < -1:
                break
            yield payload[start : start + key_len], value_len >= 0
    except struct.error:
        pass
    # Anything irregular is described by the full parser, which is slower but precise.
    if key_len != -1 or pos + 4 != size:
        _parse_records(payload, path)
        raise _fail(path, "malformed records")


def _read_file(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except FileNotFoundError as exc:
        raise CheckpointFormatError(f"{path}: state file disappeared while loading") from exc


def write_snapshot(partition_dir_out: Path, version: int, state: dict[bytes, bytes]) -> int:
    """Write ``state`` as ``<version>.snapshot`` in ``partition_dir_out``; return its size.

    The file is written under a hidden temporary name in the same directory and moved into
    place with ``os.replace``, so readers see the old file or the complete new one. Spark's
    listing ignores the temporary name (it is not ``<digits>.<kind>``), so a crash leaves
    nothing Spark would trip over. No ``.crc`` sidecar is written: Spark loads a state file
    without one. A sidecar left from an earlier file of the same name is removed first (before
    the new file appears), so no checksum in the directory disagrees with its file; Spark 4.3
    did not check the sidecar of a local state file, but Hadoop readers that verify would.

    Raises:
        UsageError: ``version`` is below 1 (Spark never reads a snapshot for version 0).
    """
    if version < 1:
        raise UsageError(f"snapshot version must be >= 1, got {version}")
    return _write_snapshot_file(partition_dir_out, version, write_records(state.items()))


def _write_snapshot_file(partition_dir_out: Path, version: int, data: bytes) -> int:
    partition_dir_out.mkdir(parents=True, exist_ok=True)
    name = f"{version}.snapshot"
    for sidecar in (f".{name}.crc", f"{name}.crc"):
        with contextlib.suppress(FileNotFoundError):
            (partition_dir_out / sidecar).unlink()
    tmp_name = partition_dir_out / f".{name}.{secrets.token_hex(8)}.tmp"
    # Not mkstemp: its 0600 mode would outlive the rename, unlike Spark's umask-based files.
    fd = os.open(tmp_name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp_name, partition_dir_out / name)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp_name)
        raise
    _fsync_dir(partition_dir_out)
    return len(data)


def _fsync_dir(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        # Some file systems refuse fsync on directories; the rename itself already happened.
        pass
    finally:
        os.close(fd)
