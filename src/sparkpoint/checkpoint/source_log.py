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

from sparkpoint.errors import CheckpointFormatError

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
