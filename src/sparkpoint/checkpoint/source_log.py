"""The file source's log, ``sources/<name>/<k>`` (and ``<k>.compact``).

Each entry is ``v1`` then one JSON line per input file:
``{"path":"file:///abs/in/f.json","timestamp":<mtime ms>,"batchId":k}``; ``batchId`` is the
log's own id, the ``logOffset`` the offsets log refers to. Every 10th entry is a compaction
holding all files up to it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from sparkpoint.checkpoint.logs import compact_json
from sparkpoint.errors import CheckpointFormatError
from sparkpoint.storage.location import Location

SOURCE_LOG_VERSIONS = (1,)


@dataclass(frozen=True)
class FileSourceLogEntry:
    version: int
    lines: tuple[str, ...]

    @classmethod
    def parse(cls, data: bytes, path: str) -> FileSourceLogEntry:
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise CheckpointFormatError(
                f"{path}: expected a UTF-8 file source log entry, found undecodable bytes"
            ) from exc
        header, *lines = text.split("\n")
        if header != "v1":
            raise CheckpointFormatError(
                f"{path}: expected file source log header 'v1', found {header[:20]!r}"
            )
        for line in lines:
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise CheckpointFormatError(
                    f"{path}: expected one JSON object per line, found {line[:80]!r}"
                ) from exc
            if not isinstance(record, dict) or "path" not in record:
                raise CheckpointFormatError(
                    f"{path}: expected entries with a 'path', found {line[:80]!r}"
                )
        return cls(1, tuple(lines))

    def to_bytes(self) -> bytes:
        return "\n".join([f"v{self.version}", *self.lines]).encode("utf-8")

    @property
    def files(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.lines]


def file_source_log_offset(offset_json: str | None) -> int | None:
    """The ``logOffset`` of a file source's offset, or None for other sources."""
    if offset_json is None:
        return None
    try:
        parsed = json.loads(offset_json)
    except json.JSONDecodeError:
        return None
    if isinstance(parsed, dict) and isinstance(parsed.get("logOffset"), int):
        value: int = parsed["logOffset"]
        return value
    return None


DEFAULT_SOURCE_COMPACT_INTERVAL = 10  # spark.sql.streaming.fileSource.log.compactInterval


def is_compaction_id(log_id: int, interval: int) -> bool:
    """Spark writes entry ``log_id`` as ``<log_id>.compact`` (every entry so far) when true."""
    return (log_id + 1) % interval == 0


def read_source_log(log_dir: Location) -> dict[int, list[dict[str, Any]]]:
    """Every file-source log entry by id, from the newest compaction and the entries after it.

    A compaction holds the files of every entry up to it, each with its own ``batchId``.
    The directory is listed once (each look is a request in a store).
    """
    names = {p.name for p in log_dir.iterdir() if not p.name.startswith(".")} \
        if log_dir.is_dir() else set()
    ids = sorted({int(name.split(".")[0]) for name in names if name.split(".")[0].isdigit()})
    entries: dict[int, list[dict[str, Any]]] = {}
    compactions = [i for i in ids if f"{i}.compact" in names]
    start = 0
    if compactions:
        base = compactions[-1]
        path = log_dir / f"{base}.compact"
        for record in FileSourceLogEntry.parse(path.read_bytes(), str(path)).files:
            entries.setdefault(int(record["batchId"]), []).append(record)
        for log_id in range(base + 1):
            entries.setdefault(log_id, [])
        start = base + 1
    for log_id in (i for i in ids if i >= start):
        found = log_dir / (str(log_id) if str(log_id) in names else f"{log_id}.compact")
        entries[log_id] = FileSourceLogEntry.parse(found.read_bytes(), str(found)).files
    return entries


def stamped(files: list[dict[str, Any]], log_id: int) -> list[dict[str, Any]]:
    """Records of ``files`` (each with a ``path`` and a ``timestamp``) for entry ``log_id``."""
    return [{"path": f["path"], "timestamp": f["timestamp"], "batchId": log_id} for f in files]


def entry_file(log_id: int, records: list[dict[str, Any]],
               earlier: dict[int, list[dict[str, Any]]], interval: int) -> tuple[str, bytes]:
    """The file (name, bytes) Spark would write for entry ``log_id`` holding ``records``:
    a plain entry, or a compaction that also repeats every ``earlier`` entry."""
    if is_compaction_id(log_id, interval):
        every = [r for i in sorted(earlier) if i < log_id for r in earlier[i]] + records
        lines = tuple(compact_json(r) for r in every)
        return f"{log_id}.compact", FileSourceLogEntry(1, lines).to_bytes()
    return str(log_id), FileSourceLogEntry(1, tuple(compact_json(r) for r in records)).to_bytes()
