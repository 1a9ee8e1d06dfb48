"""The boundedness check of each operator kind, from operator metadata and state schemas."""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

import pytest

from sparkpoint.checkpoint.boundedness import check
from sparkpoint.checkpoint.layout import OperatorDir
from sparkpoint.checkpoint.operators import OperatorMetadata

WATERMARK = {"spark.watermarkDelayMs": 600000}


def _utf(text: str) -> bytes:
    data = text.encode("utf-8")
    return struct.pack(">H", len(data)) + data


def _schema_file(key: dict[str, Any], value: dict[str, Any]) -> bytes:
    """A state schema file v2 as Spark writes it: header, then key and value JSON chunks."""
    out = _utf("v2")
    for schema in (key, value):
        out += struct.pack(">i", 1) + _utf(json.dumps(schema))
    return out


def _struct(*fields: tuple[str, str, dict[str, Any]]) -> dict[str, Any]:
    return {"type": "struct", "fields": [
        {"name": n, "type": t, "nullable": True, "metadata": m} for n, t, m in fields]}


def _operator(tmp_path: Path, name: str, stores: dict[str, tuple[dict[str, Any],
              dict[str, Any]]], properties: dict[str, Any] | None = None) -> OperatorDir:
    meta: dict[str, Any] = {
        "operatorInfo": {"operatorId": 0, "operatorName": name},
        "stateStoreInfo": [{"storeName": s, "numColsPrefixKey": 0, "numPartitions": 1}
                           for s in stores]}
    if properties is not None:
        meta["operatorPropertiesJson"] = json.dumps(properties)
    for store, (key, value) in stores.items():
        sub = tmp_path / "0" if store == "default" else tmp_path / "0" / store
        (sub / "_metadata").mkdir(parents=True)
        (sub / "_metadata" / "schema").write_bytes(_schema_file(key, value))
    text = json.dumps(meta)
    metadata = OperatorMetadata.parse(f"v1\n{text}".encode(), "metadata")
    return OperatorDir(tmp_path, metadata, metadata.num_partitions)


COUNT = _struct(("count", "long", {}))


@pytest.mark.parametrize("kind,key,status", [
    ("aggregation", _struct(("user", "string", {})), "unbounded"),
    ("aggregation", _struct(("window", "struct", WATERMARK), ("user", "string", {})), "bounded"),
    ("dedupe", _struct(("event_id", "string", {})), "unbounded"),
    ("dedupe", _struct(("event_id", "string", {}), ("ts", "timestamp", WATERMARK)), "bounded"),
])
def test_keyed_state_is_bounded_by_a_watermarked_key_column(
    tmp_path: Path, kind: str, key: dict[str, Any], status: str
) -> None:
    name = "stateStoreSave" if kind == "aggregation" else "dedupe"
    result = check(_operator(tmp_path, name, {"default": (key, COUNT)}), kind)
    assert result.status == status
    assert (result.fix is None) == (status == "bounded")
    if status == "unbounded":
        assert "withWatermark" in (result.fix or "")


def test_session_window_watermark_is_in_the_value(tmp_path: Path) -> None:
    key = _struct(("user", "string", {}), ("sessionStartTime", "timestamp", {}))
    value = _struct(("session_window", "struct", WATERMARK), ("count", "long", {}))
    op = _operator(tmp_path, "sessionWindowStateStoreSaveExec", {"default": (key, value)})
    assert check(op, "session_window").status == "bounded"


def test_a_join_side_without_watermark_is_unbounded(tmp_path: Path) -> None:
    key = _struct(("field0", "string", {}), ("index", "long", {}))
    stores = {
        "left-keyWithIndexToValue": (key, _struct(("ts", "timestamp", WATERMARK))),
        "right-keyWithIndexToValue": (key, _struct(("v_ts", "timestamp", {}))),
    }
    result = check(_operator(tmp_path, "symmetricHashJoin", stores), "stream_stream_join")
    assert result.status == "unbounded"
    assert "the right input has no watermarked column" in result.reason


def _variables(*entries: tuple[str, str, bool]) -> dict[str, Any]:
    return {"timeMode": "None", "stateVariables": [
        {"stateName": n, "stateVariableType": t, "ttlEnabled": ttl} for n, t, ttl in entries]}


@pytest.mark.parametrize("properties,status", [
    (_variables(("count", "ValueState", False)), "unbounded"),
    (_variables(("count", "ValueState", True), ("seen", "ListState", True)), "bounded"),
    (_variables(("count", "ValueState", False),
                ("$procTimers_keyToTimestamp", "TimerState", False)), "bounded"),
])
def test_transform_with_state_needs_timers_or_ttl(
    tmp_path: Path, properties: dict[str, Any], status: str
) -> None:
    op = _operator(tmp_path, "transformWithStateExec", {}, properties)
    result = check(op, "transform_with_state")
    assert result.status == status
    if status == "unbounded":
        assert "count" in result.reason and "TTL" in (result.fix or "")


def test_groups_with_state_without_a_timeout_kind_are_unbounded(tmp_path: Path) -> None:
    op = _operator(tmp_path, "applyInPandasWithState",
                   {"default": (_struct(("user", "string", {})),
                                _struct(("groupState", "struct", {})))})
    result = check(op, "flat_map_groups_with_state")
    assert result.status == "unbounded" and "NoTimeout" in result.reason


@pytest.mark.parametrize("timeouts,status", [(None, "bounded"), (True, "bounded"),
                                             (False, "unbounded")])
def test_groups_with_a_timeout_kind_are_judged_by_their_timeouts(
    tmp_path: Path, timeouts: bool | None, status: str
) -> None:
    value = _struct(("groupState", "struct", {}), ("timeoutTimestamp", "long", {}))
    op = _operator(tmp_path, "flatMapGroupsWithState",
                   {"default": (_struct(("user", "string", {})), value)})
    assert check(op, "flat_map_groups_with_state", timeouts).status == status
