"""Spark 4.3's metadata logs: ``metadata``, ``offsets/<N>``, ``commits/<N>``.

Each model keeps the exact text Spark wrote, so parsing then serializing is byte-exact;
typed accessors decode the parts sparkpoint reads. Unknown JSON fields are kept verbatim
(Spark adds some between releases); unknown log versions are refused.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from sparkpoint.errors import CheckpointFormatError

OFFSET_LOG_VERSIONS = (1, 2)
COMMIT_LOG_VERSIONS = (1, 2)
NO_OFFSET = "-"
# 9999-12-31T23:59:59Z: a watermark above any event time, the one a drain batch records
# (Spark's own drain experiments used it).
MAX_WATERMARK_MS = 253402300799000


def _decode(data: bytes, path: str) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CheckpointFormatError(
            f"{path}: expected a UTF-8 text log file, found undecodable bytes ({exc}); "
            "the checkpoint is damaged or not a Spark checkpoint"
        ) from exc


def _version_header(line: str, known: tuple[int, ...], path: str) -> int:
    if not (line.startswith("v") and line[1:].isdigit()):
        raise CheckpointFormatError(
            f"{path}: expected a version header like 'v1', found {line[:40]!r}; "
            "this is not a Spark metadata log file"
        )
    version = int(line[1:])
    if version not in known:
        raise CheckpointFormatError(
            f"{path}: log format v{version} is not supported (supported: "
            f"{', '.join(f'v{v}' for v in known)}); it was written by a newer Spark"
        )
    return version


def _json_object(text: str, path: str, what: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise CheckpointFormatError(
            f"{path}: expected {what} as a JSON object, found invalid JSON ({exc.msg})"
        ) from exc
    if not isinstance(value, dict):
        raise CheckpointFormatError(
            f"{path}: expected {what} as a JSON object, found {type(value).__name__}"
        )
    return value


def compact_json(value: Any) -> str:
    """Serialize like Spark's json4s: no spaces, insertion order kept."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


@dataclass(frozen=True)
class QueryMetadata:
    """``<checkpoint>/metadata``: the query id, stable across restarts."""

    text: str

    @classmethod
    def parse(cls, data: bytes, path: str) -> QueryMetadata:
        text = _decode(data, path)
        obj = _json_object(text.strip(), path, "query metadata")
        if not isinstance(obj.get("id"), str):
            raise CheckpointFormatError(f"{path}: expected an 'id' string, found {obj!r}")
        return cls(text)

    @classmethod
    def for_id(cls, query_id: str) -> QueryMetadata:
        return cls(compact_json({"id": query_id}))

    @property
    def query_id(self) -> str:
        value: str = json.loads(self.text)["id"]
        return value

    def to_bytes(self) -> bytes:
        return self.text.encode("utf-8")


@dataclass(frozen=True)
class SourceOffset:
    """One source's line of an offsets entry.

    ``name`` is None in format v1, where sources are identified by position.
    ``offset`` is the source's own offset JSON text, or None for ``-`` (no offset yet).
    """

    name: str | None
    offset: str | None

    def to_line(self) -> str:
        body = NO_OFFSET if self.offset is None else self.offset
        return body if self.name is None else f"{self.name}:{body}"


# Spark 4.3 records this conf in every offsets entry (OffsetSeqMetadata.relevantSQLConfs) and,
# on restart, reads it from the newest entry before the session's (MicroBatchExecution's
# logicalPlan, through OffsetSeqMetadata.readValueOpt, whose default for an entry without it
# is "false"). Under "false" Spark keys sources by position ("0", "1", ...): the offsets of a
# v2 entry, keyed by name, then match no source and every source starts from its beginning.
SOURCE_EVOLUTION_CONF = "spark.sql.streaming.queryEvolution.enableSourceEvolution"


def named_sources_metadata(metadata: dict[str, Any]) -> dict[str, Any]:
    """``metadata`` of an offsets entry made to go with sources keyed by name (format v2):
    the metadata field v2 requires, and the conf under which Spark reads offsets by name."""
    named = dict(metadata)
    named.setdefault("sourceMetadataInfo", {})
    named["conf"] = {**named.get("conf", {}), SOURCE_EVOLUTION_CONF: "true"}
    return named


@dataclass(frozen=True)
class OffsetLogEntry:
    """``offsets/<N>``: the write-ahead record of what batch N reads."""

    version: int
    metadata_text: str
    sources: tuple[SourceOffset, ...]

    @classmethod
    def parse(cls, data: bytes, path: str) -> OffsetLogEntry:
        lines = _decode(data, path).split("\n")
        version = _version_header(lines[0], OFFSET_LOG_VERSIONS, path)
        if len(lines) < 2:
            raise CheckpointFormatError(
                f"{path}: expected a metadata line after the header, found end of file"
            )
        _json_object(lines[1], path, "offset sequence metadata")
        sources = []
        for line in lines[2:]:
            if version == 1:
                sources.append(SourceOffset(None, None if line == NO_OFFSET else line))
                continue
            name, sep, body = line.partition(":")
            if not sep or not name:
                raise CheckpointFormatError(
                    f"{path}: expected '<source name>:<offset>' lines in a v2 offsets entry, "
                    f"found {line[:80]!r}"
                )
            sources.append(SourceOffset(name, None if body == NO_OFFSET else body))
        return cls(version, lines[1], tuple(sources))

    def to_bytes(self) -> bytes:
        lines = [f"v{self.version}", self.metadata_text]
        lines.extend(source.to_line() for source in self.sources)
        return "\n".join(lines).encode("utf-8")

    @property
    def metadata(self) -> dict[str, Any]:
        value: dict[str, Any] = json.loads(self.metadata_text)
        return value

    @property
    def batch_watermark_ms(self) -> int:
        return int(self.metadata.get("batchWatermarkMs", 0))

    @property
    def batch_timestamp_ms(self) -> int:
        return int(self.metadata.get("batchTimestampMs", 0))

    @property
    def conf(self) -> dict[str, str]:
        conf: dict[str, str] = self.metadata.get("conf", {})
        return conf

    def with_conf(self, settings: dict[str, str]) -> OffsetLogEntry:
        """This entry with ``settings`` in its recorded conf (the SQL settings Spark restores
        from it on restart)."""
        metadata = self.metadata
        metadata.setdefault("conf", {}).update(settings)
        return OffsetLogEntry(self.version, compact_json(metadata), self.sources)

    def source_offsets(self) -> dict[str, str | None]:
        """Offsets by source name; v1 entries are keyed by position ('0', '1', ...)."""
        return {
            source.name if source.name is not None else str(index): source.offset
            for index, source in enumerate(self.sources)
        }



@dataclass(frozen=True)
class CommitLogEntry:
    """``commits/<N>``: batch N completed; carries the watermark for batch N+1."""

    version: int
    text: str

    @classmethod
    def parse(cls, data: bytes, path: str) -> CommitLogEntry:
        lines = _decode(data, path).split("\n", 1)
        version = _version_header(lines[0], COMMIT_LOG_VERSIONS, path)
        body = lines[1] if len(lines) > 1 else ""
        _json_object(body, path, "commit metadata")
        return cls(version, body)

    def to_bytes(self) -> bytes:
        return f"v{self.version}\n{self.text}".encode()

    @property
    def metadata(self) -> dict[str, Any]:
        value: dict[str, Any] = json.loads(self.text)
        return value

    @property
    def next_batch_watermark_ms(self) -> int:
        return int(self.metadata.get("nextBatchWatermarkMs", 0))

    @cached_property
    def state_unique_ids(self) -> dict[int, list[list[str]]]:
        """Checkpoint format v2: per operator id, per partition, per store (in the
        operator's store order) the unique id of the state version this batch committed;
        empty for format v1. Parsed once: readers look an id up per partition and store."""
        ids = self.metadata.get("stateUniqueIds") or {}
        return {int(op): [[str(i) for i in stores] for stores in partitions]
                for op, partitions in ids.items()}
