"""The snapshot manifest: sparkpoint's own file, strict and versioned."""

from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic import ValidationError as PydanticValidationError

from sparkpoint.aggregates import AggregateState
from sparkpoint.errors import SnapshotDamagedError
from sparkpoint.losses import AcceptedLoss
from sparkpoint.storage.local import checksum_of
from sparkpoint.windows import WindowSpec

MANIFEST_FILE = "manifest.json"
CHECKPOINT_SUBDIR = "checkpoint"
FORMAT_VERSION = 1

# Spark's operator names mapped to the kinds users reason about.
OPERATOR_KINDS = {
    "stateStoreSave": "aggregation",
    "dedupe": "dedupe",
    "dedupeWithinWatermark": "dedupe_within_watermark",
    "symmetricHashJoin": "stream_stream_join",
    "sessionWindowStateStoreSaveExec": "session_window",
    "flatMapGroupsWithState": "flat_map_groups_with_state",
    "applyInPandasWithState": "flat_map_groups_with_state",
    "transformWithStateExec": "transform_with_state",
    "transformWithStateInPySparkExec": "transform_with_state",
    "transformWithStateInPandasExec": "transform_with_state",
}


def operator_kind(spark_operator_name: str) -> str:
    return OPERATOR_KINDS.get(spark_operator_name, spark_operator_name)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class FileEntry(_Strict):
    path: str
    bytes: int
    # Taken of the bytes by sparkpoint, for every file that passed through its process.
    xxh3_128: str | None = None
    # A file copied inside its store (S3's CopyObject) without passing through sparkpoint:
    # the source object's ETag, its identity there, and the SHA-256 the store computed of
    # the snapshot's copy (base64, as S3 gives it).
    etag: str | None = None
    sha256: str | None = None
    # In a store of content-addressed files (snapshot/object_store.py): the name the file is
    # stored under when it is not its content's (a copy of its own, made while a collection
    # had announced the content's file); None: the content's name.
    blob: str | None = None

    @model_validator(mode="after")
    def _identified(self) -> FileEntry:
        if self.xxh3_128 is None and self.etag is None:
            raise ValueError("a file needs its xxh3_128 checksum or its store's etag")
        return self

    @property
    def content_key(self) -> tuple[str, int]:
        """Equal for files of equal content (as far as their checksums tell)."""
        if self.xxh3_128 is not None:
            return f"xxh3:{self.xxh3_128}", self.bytes
        return f"etag:{self.etag}", self.bytes


def content_mismatch(path: Path, entry: FileEntry) -> str | None:
    """How a local copy of a snapshot's file differs from what the manifest records (the
    expected and the found size and checksum), or None when it matches."""
    if entry.xxh3_128 is not None:
        size, digest = checksum_of(path)
        if size == entry.bytes and digest == entry.xxh3_128:
            return None
        return (f"expected {entry.bytes} bytes with xxh3-128 {entry.xxh3_128[:16]}..., found "
                f"{size} bytes with {digest[:16]}...")
    hasher = hashlib.sha256() if entry.sha256 is not None else hashlib.md5()
    size = 0
    with open(path, "rb") as reader:
        while chunk := reader.read(1 << 20):
            hasher.update(chunk)
            size += len(chunk)
    if entry.sha256 is not None:
        found, expected, kind = base64.b64encode(hasher.digest()).decode(), entry.sha256, "sha256"
    elif entry.etag is not None and "-" not in entry.etag:
        # A single-part upload's ETag is the MD5 of its bytes.
        found, expected, kind = hasher.hexdigest(), entry.etag, "md5"
    else:
        found, expected, kind = "", "", "size only"
    if size == entry.bytes and found == expected:
        return None
    return (f"expected {entry.bytes} bytes with {kind} {expected[:16]}..., found {size} bytes "
            f"with {found[:16]}...")


class SourceEntry(_Strict):
    name: str
    offset: Any = Field(description="the source's offset as Spark records it (parsed JSON)")


class StoreEntry(_Strict):
    name: str
    key_schema: dict[str, Any] | None
    value_schema: dict[str, Any] | None


class OperatorEntry(_Strict):
    name: str
    operator_id: int
    kind: str
    spark_operator_name: str
    stores: list[StoreEntry]
    partitions: int
    rows: int | None
    bytes: int
    # The event-time window of its keys when the snapshot was taken; None in manifests of
    # older versions (then a window change cannot be checked).
    window: WindowSpec | None = None
    # An aggregation's functions in its state's order; None: not an aggregation, or not
    # recorded (then an aggregate added or removed cannot be migrated).
    aggregates: tuple[AggregateState, ...] | None = None


class Manifest(_Strict):
    format_version: Literal[1] = 1
    name: str
    job: str
    created_at: str
    batch_id: int
    spark_version: str
    state_store_provider: str
    shuffle_partitions: int | None
    query_id: str
    watermark_ms: int
    job_file: str | None
    params: dict[str, str]
    sources: list[SourceEntry]
    operators: list[OperatorEntry]
    files: list[FileEntry]
    total_bytes: int
    # Bytes of files the store did not hold before this snapshot (same content is stored
    # once); None in manifests of older versions and of stores that copy every file.
    added_bytes: int | None = None
    # An imported checkpoint's input that its sources no longer held, accepted with
    # --accept-data-loss; empty in manifests of older versions.
    accepted_loss: tuple[AcceptedLoss, ...] = ()

    def to_json(self) -> str:
        return json.dumps(self.model_dump(mode="json"), indent=2, sort_keys=False) + "\n"

    def operator(self, name: str) -> OperatorEntry | None:
        return next((op for op in self.operators if op.name == name), None)

    def source(self, name: str) -> SourceEntry | None:
        return next((src for src in self.sources if src.name == name), None)


def read_manifest(snapshot_dir: Path) -> Manifest:
    path = snapshot_dir / MANIFEST_FILE
    try:
        data = path.read_bytes()
    except FileNotFoundError as exc:
        raise SnapshotDamagedError(
            f"{path}: expected the snapshot manifest, found nothing; the snapshot is incomplete, "
            "delete it with 'sparkpoint snapshot delete'"
        ) from exc
    except OSError as exc:
        raise SnapshotDamagedError(
            f"{path}: expected a JSON manifest, found unreadable content ({exc}); "
            "the snapshot is damaged: delete it and create it again from the job"
        ) from exc
    return parse_manifest(data, str(path))


def parse_manifest(raw: bytes, where: str) -> Manifest:
    """A manifest from its bytes; ``where`` names it in errors (a path or URL)."""
    try:
        data = json.loads(raw.decode("utf-8"))
    except (ValueError, RecursionError) as exc:  # JSON and UTF-8 errors included
        raise SnapshotDamagedError(
            f"{where}: expected a JSON manifest, found unreadable content ({exc}); "
            "the snapshot is damaged: delete it and create it again from the job"
        ) from exc
    version = data.get("format_version") if isinstance(data, dict) else None
    if version != FORMAT_VERSION:
        raise SnapshotDamagedError(
            f"{where}: expected manifest format_version {FORMAT_VERSION}, found {version!r}; "
            "it was written by another sparkpoint version"
        )
    try:
        return Manifest.model_validate(data)
    except PydanticValidationError as exc:
        first = exc.errors()[0]
        loc = ".".join(str(part) for part in first["loc"])
        raise SnapshotDamagedError(
            f"{where}: manifest field '{loc}': {first['msg']}; the snapshot is damaged"
        ) from exc
