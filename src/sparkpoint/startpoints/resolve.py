"""Resolve a source's startpoints against its checkpoint and its input, now.

The result says what the checkpoint must hold for the source's next batch to start at the
position: the committed offset of the last batch (rewritten only when it must move forward
past input to skip) and, for Spark's file source, new entries of the source's own log
listing files to read again or to skip.

File source: its offset is an index into its log; a file is read once, when an entry
listing it is read. Reading files again means listing them in a new entry after the
committed one; skipping unread files means listing them in an entry the committed offset
then points past. Kafka (Spark's or sparkpoint's source): per partition offsets in
``{"topic":{"0":42}}``. Other sources take an explicit offset in their own format.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import re
import time
from dataclasses import dataclass, field
from typing import Any

from sparkpoint.checkpoint.layout import Checkpoint
from sparkpoint.checkpoint.source_log import (
    entry_file,
    file_source_log_offset,
    read_source_log,
    stamped,
)
from sparkpoint.errors import UsageError, ValidationError
from sparkpoint.sources.file_input import input_files, local_directory
from sparkpoint.sources.kafka import (
    KAFKA_KINDS,
    KafkaMetadata,
    KafkaSourceError,
    Offsets,
    Subscription,
    parse_offsets,
)
from sparkpoint.sources.positions import SourceDescription, parse_timestamp
from sparkpoint.startpoints.store import WHOLE_SOURCE, Startpoint


@dataclass
class Resolved:
    """What applying a source's startpoints changes, and a line per partition to show."""

    source: str
    offset_before: str | None
    offset_after: str | None
    log_files: list[tuple[str, bytes]] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)

    @property
    def moves_offset(self) -> bool:
        return self.offset_after is not None and self.offset_after != self.offset_before

    def to_dict(self) -> dict[str, Any]:
        return {"source": self.source, "offset_before": _loads(self.offset_before),
                "offset_after": _loads(self.offset_after if self.moves_offset
                                       else self.offset_before),
                "log_entries": [name for name, _ in self.log_files], "positions": self.lines}


def _loads(text: str | None) -> Any:
    if text is None:
        return None
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def resolve(source: SourceDescription, startpoints: list[Startpoint], checkpoint: Checkpoint,
            compact_interval: int) -> Resolved:
    batch = checkpoint.latest_committed_batch()
    current = (checkpoint.offsets(batch).source_offsets().get(source.name)
               if batch is not None else None)
    grouped = [s for s in startpoints if s.kind == "group"]
    if grouped and source.kind not in KAFKA_KINDS:
        raise ValidationError(
            f"{_where(grouped[0])}: a consumer group's offsets are a Kafka source's position; "
            f"'{source.name}' is a {source.kind} source: set --offset, --timestamp, "
            "--earliest or --latest")
    if source.kind == "file":
        return _resolve_file(source, startpoints, checkpoint, current, compact_interval)
    if source.kind in KAFKA_KINDS:
        return _resolve_kafka(source, startpoints, current)
    if source.kind == "rate":
        return _resolve_rate(source, startpoints, checkpoint, current)
    return _resolve_verbatim(source, startpoints, current)


def _where(startpoint: Startpoint) -> str:
    return f"startpoint {startpoint.describe()}"


def _whole_source_only(source: SourceDescription, startpoints: list[Startpoint]) -> Startpoint:
    for startpoint in startpoints:
        if startpoint.partition != WHOLE_SOURCE:
            raise ValidationError(
                f"{_where(startpoint)}: a {source.kind} source has no partitions; set the "
                "startpoint without --partition")
    return startpoints[-1]


def _resolve_file(source: SourceDescription, startpoints: list[Startpoint], checkpoint: Checkpoint,
                  current: str | None, interval: int) -> Resolved:
    startpoint = _whole_source_only(source, startpoints)
    assert source.path is not None
    log_dir = checkpoint.root / "sources" / source.name
    entries = read_source_log(log_dir)
    committed = file_source_log_offset(current)
    committed = -1 if committed is None else committed
    if startpoint.kind == "offset":
        return _file_log_offset(source, startpoint, entries, committed, current, interval)
    last_id = max(entries, default=-1)
    consumed = [r for i in sorted(entries) if i <= committed for r in entries[i]]
    pending = [r for i in sorted(entries) if i > committed for r in entries[i]]
    listed = {r["path"] for r in consumed + pending}
    present = input_files(local_directory(source.path, source.name))
    unlisted: list[dict[str, Any]] = [{"path": f.uri, "timestamp": f.mtime_ms}
                                      for f in present if f.uri not in listed]
    cut: float
    if startpoint.kind == "earliest":
        cut = -math.inf
    elif startpoint.kind == "latest":
        cut = math.inf
    else:
        cut = parse_timestamp(startpoint.value or "", _where(startpoint))
    skip = [r for r in unlisted if r["timestamp"] < cut]
    skip_pending = any(r["timestamp"] < cut for r in pending)
    resolved = Resolved(source.name, current, None)
    next_id = last_id + 1
    written: dict[int, list[dict[str, Any]]] = dict(entries)
    if skip or skip_pending:
        # Mark the unread files before the position as read, and commit past them (and past
        # entries already written but not read yet).
        records = stamped(skip, next_id)
        resolved.log_files.append(entry_file(next_id, records, written, interval))
        written[next_id] = records
        resolved.offset_after = json.dumps({"logOffset": next_id}, separators=(",", ":"))
        resolved.lines.append(f"skips {len(skip) + len(pending)} unread files")
        again = [r for r in consumed + pending if r["timestamp"] >= cut]
        next_id += 1
    else:
        again = [r for r in consumed if r["timestamp"] >= cut]
    if again:
        again.sort(key=lambda r: (r["timestamp"], r["path"]))
        resolved.log_files.append(entry_file(next_id, stamped(again, next_id), written,
                                             interval))
        resolved.lines.append(f"reads {len(again)} files again (log entry {next_id})")
    new = [r for r in unlisted if r["timestamp"] >= cut]
    if new:
        resolved.lines.append(f"then reads {len(new)} unread files as usual")
    if not resolved.lines:
        resolved.lines.append("nothing to read again or skip now (resolved again at the next "
                              "start)")
    return resolved


def _file_log_offset(source: SourceDescription, startpoint: Startpoint,
                     entries: dict[int, list[dict[str, Any]]], committed: int,
                     current: str | None, interval: int) -> Resolved:
    try:
        target = json.loads(startpoint.value or "")["logOffset"]
        assert isinstance(target, int)
    except (json.JSONDecodeError, KeyError, TypeError, AssertionError) as exc:
        raise UsageError(f"{_where(startpoint)}: a file source's offset is "
                         '{"logOffset": k} (an entry of its log)') from exc
    last_id = max(entries, default=-1)
    if target < -1 or target > last_id:
        raise ValidationError(
            f"{_where(startpoint)}: log offset {target} is past the end of the source's log "
            f"(entries 0..{last_id}); choose -1..{last_id}")
    resolved = Resolved(source.name, current, None)
    if target >= committed:
        resolved.offset_after = json.dumps({"logOffset": target}, separators=(",", ":"))
        resolved.lines.append(f"skips log entries {committed + 1}..{target}")
        return resolved
    again = [r for i in sorted(entries) if target < i <= committed for r in entries[i]]
    next_id = last_id + 1
    resolved.log_files.append(entry_file(next_id, stamped(again, next_id), entries, interval))
    resolved.lines.append(f"reads the {len(again)} files of log entries {target + 1}.."
                          f"{committed} again (log entry {next_id})")
    return resolved


def _partition_filter(startpoint: Startpoint, topic: str, partition: str) -> bool:
    if startpoint.partition == WHOLE_SOURCE:
        return True
    wanted_topic, _, wanted = startpoint.partition.rpartition(":")
    return wanted == partition and wanted_topic in ("", topic)


def _resolve_kafka(source: SourceDescription, startpoints: list[Startpoint],
                   current: str | None) -> Resolved:
    bootstrap = source.options.get("kafka.bootstrap.servers")
    subscription = Subscription.of(source.options)
    if not bootstrap or subscription is None:
        raise ValidationError(
            f"source '{source.name}': the job record has no kafka.bootstrap.servers and "
            "subscribe, subscribePattern or assign for it; run the job once with this sparkpoint")
    try:
        before = parse_offsets(current, f"source '{source.name}' offset") if current else {}
    except KafkaSourceError as exc:
        raise ValidationError(str(exc)) from exc
    meta = KafkaMetadata(bootstrap)
    try:
        partitions = subscription.partitions(meta)
        after = {t: dict(before.get(t, {})) for t in partitions}
        lines: list[str] = []
        for startpoint in startpoints:
            matched = False
            explicit = (_explicit_offsets(startpoint, partitions)
                        if startpoint.kind == "offset" else None)
            group = _group_offsets(meta, startpoint, partitions) \
                if startpoint.kind == "group" else None
            if explicit is not None:
                for topic, parts in explicit.items():
                    for part in parts:
                        if topic not in partitions or int(part) not in partitions[topic]:
                            raise ValidationError(
                                f"{_where(startpoint)}: {topic}-{part} does not exist (the "
                                f"source reads {_listing(partitions)})")
            for topic, numbers in partitions.items():
                for number in numbers:
                    part = str(number)
                    if not _partition_filter(startpoint, topic, part):
                        continue
                    if explicit is not None and part not in explicit.get(topic, {}):
                        continue
                    matched = True
                    low, high = meta.bounds(topic, number)
                    was = before.get(topic, {}).get(part)
                    if group is not None and (topic, number) not in group:
                        # The application never committed here: the job's own position
                        # stays (Spark's startingOffsets for a partition it never read).
                        lines.append(f"{topic}-{part}: {'-' if was is None else was} "
                                     f"(no offset committed by group '{startpoint.value}': "
                                     "unchanged)")
                        continue
                    if startpoint.kind == "earliest":
                        offset = low
                    elif startpoint.kind == "latest":
                        offset = high
                    elif startpoint.kind == "timestamp":
                        at = parse_timestamp(startpoint.value or "", _where(startpoint))
                        offset = meta.offset_for_time(topic, number, at)
                    elif group is not None:
                        offset = group[(topic, number)]
                        if not low <= offset <= high:
                            deleted = (f"; the records from {offset} to {low - 1} were "
                                       "deleted (the topic's retention): set this partition "
                                       f"with --partition {topic}:{part} --earliest to read "
                                       "what is left") if offset < low else ""
                            raise ValidationError(
                                f"{_where(startpoint)}: the group committed offset {offset} "
                                f"of {topic}-{part}, outside what the broker "
                                f"holds ({low}..{high}){deleted}")
                    else:
                        assert explicit is not None
                        offset = explicit[topic][part]
                        if not low <= offset <= high:
                            raise ValidationError(
                                f"{_where(startpoint)}: offset {offset} of {topic}-{part} is "
                                f"outside what the broker holds ({low}..{high})")
                    after[topic][part] = offset
                    line = f"{topic}-{part}: {'-' if was is None else was} -> {offset}"
                    if startpoint.kind == "timestamp" and offset == low > 0:
                        # Kafka's offsets-for-times only sees the records still held: a time
                        # older than the first of them (e.g. past the topic's retention)
                        # lands on the log start, and what was before it cannot be read.
                        line += (f" (the earliest offset the broker holds; offsets below "
                                 f"{low} were deleted)")
                    lines.append(line)
            if not matched:
                raise ValidationError(
                    f"{_where(startpoint)}: partition {startpoint.partition} does not exist "
                    f"(the source reads {_listing(partitions)})")
    except KafkaSourceError as exc:
        raise ValidationError(f"source '{source.name}': {exc}") from exc
    finally:
        meta.close()
    text = json.dumps(after, separators=(",", ":"))
    return Resolved(source.name, current, text, lines=lines)


def _group_offsets(meta: KafkaMetadata, startpoint: Startpoint,
                   partitions: dict[str, list[int]]) -> dict[tuple[str, int], int]:
    """The offsets the consumer group committed for the source's partitions (those the
    startpoint selects); a group that committed none of them is refused: its name is
    probably wrong."""
    group = startpoint.value or ""
    if not group.strip():
        raise UsageError(f"{_where(startpoint)}: expected a consumer group's name after "
                         "--group, found an empty one")
    found = meta.group_offsets(group, partitions)
    selected = {key: offset for key, offset in found.items()
                if _partition_filter(startpoint, key[0], str(key[1]))}
    if not selected:
        raise ValidationError(
            f"{_where(startpoint)}: the consumer group has committed no offset for "
            f"{_listing(partitions)}; check the group's name (kafka-consumer-groups.sh "
            "--list) and that its application committed")
    return selected


def _explicit_offsets(startpoint: Startpoint, partitions: dict[str, list[int]]) -> Offsets:
    """The offsets an ``offset`` startpoint names, per topic and partition. With a partition
    (``--partition TOPIC:P`` or ``P``) the offset may be a plain number, that partition's
    offset; offset JSON must then name that partition only: a JSON naming others contradicts
    the partition given, and is refused as such rather than ignored."""
    text = (startpoint.value or "").strip()
    whole = startpoint.partition == WHOLE_SOURCE
    if _PLAIN_OFFSET.fullmatch(text):
        if whole:
            raise UsageError(
                f"{_where(startpoint)}: a plain number is one partition's offset; name the "
                "partition with --partition TOPIC:P, or give offset JSON such as "
                f'{{"topic":{{"0":{text}}}}} for the partitions it names')
        selected = [(topic, str(number)) for topic, numbers in partitions.items()
                    for number in numbers if _partition_filter(startpoint, topic, str(number))]
        if len(selected) > 1:
            topics = ", ".join(topic for topic, _ in selected)
            raise UsageError(
                f"{_where(startpoint)}: partition {startpoint.partition} is in several topics "
                f"({topics}); name one with --partition TOPIC:{startpoint.partition}")
        if not selected:
            raise ValidationError(
                f"{_where(startpoint)}: partition {startpoint.partition} does not exist "
                f"(the source reads {_listing(partitions)})")
        topic, part = selected[0]
        return {topic: {part: int(text)}}
    explicit = parse_offsets(text, _where(startpoint))
    if not whole:
        named = [(topic, part) for topic, parts in explicit.items() for part in parts]
        others = [f"{topic}-{part}" for topic, part in named
                  if not _partition_filter(startpoint, topic, part)]
        if others or not named:
            raise UsageError(
                f"{_where(startpoint)}: --offset names {', '.join(others) or 'no partition'}, "
                f"which --partition {startpoint.partition} does not select; give that "
                "partition's offset as a number (--partition "
                f"{startpoint.partition} --offset N), or drop --partition to set the "
                "partitions the JSON names")
    return explicit


# A partition's offset given alone: ``--partition TOPIC:P --offset 42``.
_PLAIN_OFFSET = re.compile(r"\d+")


def _listing(partitions: dict[str, list[int]]) -> str:
    return ", ".join(f"{t} partitions {','.join(map(str, ps))}" for t, ps in partitions.items())


def _resolve_rate(source: SourceDescription, startpoints: list[Startpoint], checkpoint: Checkpoint,
                  current: str | None) -> Resolved:
    """The rate source's offset is whole seconds since its start time, which its own log
    (``sources/<name>/0``: ``v1`` and the start in ms) holds; second s yields the rows
    stamped start + s*1000 ms onwards."""
    startpoint = _whole_source_only(source, startpoints)
    log = checkpoint.root / "sources" / source.name / "0"
    try:
        started_ms = int(log.read_text().split("\n")[1])
    except (OSError, IndexError, ValueError) as exc:
        raise ValidationError(f"{log}: expected the rate source's start time ('v1' and "
                              "milliseconds), found none; run the job once first") from exc
    now = max(0, (int(time.time() * 1000) - started_ms) // 1000)
    if startpoint.kind == "earliest":
        seconds = 0
    elif startpoint.kind == "latest":
        seconds = now
    elif startpoint.kind == "timestamp":
        at = parse_timestamp(startpoint.value or "", _where(startpoint))
        seconds = max(0, -((started_ms - at) // 1000))  # ceiling: rows at or after the time
    else:
        try:
            seconds = int(json.loads(startpoint.value or ""))
        except (json.JSONDecodeError, TypeError, ValueError) as exc:
            raise UsageError(f"{_where(startpoint)}: a rate source's offset is a whole number "
                             "of seconds since its start") from exc
        if seconds < 0:
            raise ValidationError(f"{_where(startpoint)}: offset {seconds} is negative")
    if seconds > now:
        # The source cannot start after the second it has reached (Spark asserts start <= end).
        raise ValidationError(
            f"{_where(startpoint)}: second {seconds} is past the end: the source is at second "
            f"{now} ({_iso(started_ms + now * 1000)})")
    return Resolved(source.name, current, str(seconds),
                    lines=[f"second {current or '-'} -> {seconds} (rows from "
                           f"{_iso(started_ms + seconds * 1000)})"])


def _iso(millis: int) -> str:
    return dt.datetime.fromtimestamp(millis / 1000, dt.UTC).isoformat()


def _resolve_verbatim(source: SourceDescription, startpoints: list[Startpoint],
                      current: str | None) -> Resolved:
    startpoint = _whole_source_only(source, startpoints)
    if startpoint.kind != "offset" or startpoint.value is None:
        raise ValidationError(
            f"{_where(startpoint)}: a '{source.kind}' source takes only --offset, in its own "
            f"offset format (its current offset is {current or 'none'})")
    try:
        text = json.dumps(json.loads(startpoint.value), separators=(",", ":"))
    except json.JSONDecodeError as exc:
        raise UsageError(f"{_where(startpoint)}: expected JSON, found "
                         f"{startpoint.value!r}") from exc
    return Resolved(source.name, current, text, lines=[f"{current or '-'} -> {text}"])
