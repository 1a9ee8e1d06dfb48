"""Resolve a start position (earliest, latest, a timestamp, an offset) of one source into
what a checkpoint must hold for the source's next batch to start there.

Positions are written as the source's committed offset plus, for a file source, a log
entry marking the files before the position as read. ``earliest`` needs nothing: a source
with no committed offset starts at its own beginning.
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass, field
from typing import Any

from sparkpoint.checkpoint.source_log import (
    DEFAULT_SOURCE_COMPACT_INTERVAL,
    entry_file,
    stamped,
)
from sparkpoint.errors import ValidationError
from sparkpoint.sources.file_input import input_files, local_directory
from sparkpoint.sources.kafka import KAFKA_KINDS, KafkaMetadata, KafkaSourceError, Subscription


@dataclass(frozen=True)
class SourceDescription:
    """What sparkpoint knows of a source from the job's plan."""

    name: str
    kind: str  # "file", or the short name of another source ("rate", "kafka", ...)
    path: str | None = None
    options: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class ResolvedPosition:
    """A source's committed offset and the files of its own log (name -> bytes)."""

    offset_json: str
    log_files: dict[str, bytes] = field(default_factory=dict)
    summary: str = ""


def parse_timestamp(text: str, where: str) -> int:
    """Milliseconds since the epoch of an ISO 8601 time with a zone (``Z`` or ``+hh:mm``)."""
    try:
        parsed = dt.datetime.fromisoformat(text)
    except ValueError as exc:
        raise ValidationError(
            f"{where}: expected an ISO 8601 time such as 2026-01-01T00:00:00Z, found {text!r}"
        ) from exc
    if parsed.tzinfo is None:
        raise ValidationError(
            f"{where}: the time {text!r} has no zone; add Z or an offset such as +01:00")
    return int(parsed.timestamp() * 1000)


def start_label(start: Any) -> str:
    if isinstance(start, dict):
        key, value = next(iter(start.items()))
        return f"{key} {json.dumps(value) if not isinstance(value, str) else value}"
    return str(start)


def resolve_start(source: SourceDescription, start: Any, where: str) -> ResolvedPosition | None:
    """The position ``start`` means for ``source`` now; None for the source's own beginning.

    ``start`` is "earliest", "latest", {"timestamp": iso} or {"offset": json}.
    """
    if start == "earliest":
        return None
    if source.kind == "file":
        return _file_position(source, start, where)
    if source.kind in KAFKA_KINDS and not (isinstance(start, dict) and "offset" in start):
        return _kafka_position(source, start, where)
    if isinstance(start, dict) and "offset" in start:
        offset = start["offset"]
        text = offset if isinstance(offset, str) else json.dumps(offset, separators=(",", ":"))
        return ResolvedPosition(text, summary=f"offset {text}")
    raise ValidationError(
        f"{where}: start {start_label(start)} is not supported for a '{source.kind}' source; "
        "give an explicit {offset: ...} in the source's own offset format")


def _file_position(source: SourceDescription, start: Any, where: str) -> ResolvedPosition | None:
    if isinstance(start, dict) and "offset" in start:
        raise ValidationError(
            f"{where}: a file source's offset indexes its own log, which a new source does not "
            "have; use start: latest or {timestamp: ...}")
    assert source.path is not None
    files = input_files(local_directory(source.path, source.name))
    if start == "latest":
        skipped, label = files, "latest"
    else:
        cut = parse_timestamp(str(start["timestamp"]), where)
        skipped = [f for f in files if f.mtime_ms < cut]
        label = f"timestamp {start['timestamp']}"
    if not skipped:
        return None
    listing: list[dict[str, Any]] = [{"path": f.uri, "timestamp": f.mtime_ms} for f in skipped]
    name, data = entry_file(0, stamped(listing, 0), {}, DEFAULT_SOURCE_COMPACT_INTERVAL)
    return ResolvedPosition(
        json.dumps({"logOffset": 0}, separators=(",", ":")), {name: data},
        summary=f"{label}: skips {len(skipped)} of {len(files)} files now in {source.path}")


def kafka_position_at(source: SourceDescription, timestamp_ms: int,
                      where: str) -> ResolvedPosition:
    """A Kafka source's position at a moment: per partition, the first record at or after
    ``timestamp_ms`` (the partition's end where every record is older)."""
    moment = dt.datetime.fromtimestamp(timestamp_ms / 1000, dt.UTC)
    return _kafka_position(source, {"timestamp": moment.isoformat(timespec="milliseconds")},
                           where)


def _kafka_position(source: SourceDescription, start: Any, where: str) -> ResolvedPosition:
    bootstrap = source.options.get("kafka.bootstrap.servers", "")
    subscription = Subscription.of(source.options)
    if not bootstrap or subscription is None:
        raise ValidationError(f"{where}: resolving {start_label(start)} needs the source's "
                              "kafka.bootstrap.servers and subscribe, subscribePattern or "
                              "assign options")
    meta = KafkaMetadata(bootstrap)
    try:
        partitions = subscription.partitions(meta)
        if start == "latest":
            offsets = meta.latest(partitions)
        else:
            offsets = meta.offsets_at(partitions,
                                      parse_timestamp(str(start["timestamp"]), where))
    except KafkaSourceError as exc:
        raise ValidationError(f"{where}: {exc}") from exc
    finally:
        meta.close()
    text = json.dumps(offsets, separators=(",", ":"))
    return ResolvedPosition(text, summary=f"{start_label(start)}: starts at {text}")
