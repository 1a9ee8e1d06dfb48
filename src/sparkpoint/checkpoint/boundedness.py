"""Can a stateful operator's state ever shrink? Decided from what the checkpoint records.

Spark evicts state only where something bounds it in time: a watermark on a key column of
a dedupe or an aggregation (the column's schema carries ``spark.watermarkDelayMs``), a
watermark on both inputs of a stream-stream join, timeouts of flatMapGroupsWithState (whose
state has a ``timeoutTimestamp`` column only when it was given a timeout kind), timers
or TTLs of transformWithState. An operator with none of these keeps every key it ever saw.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any, Literal

from sparkpoint.checkpoint.layout import OperatorDir

WATERMARK_METADATA = "spark.watermarkDelayMs"
Status = Literal["bounded", "unbounded", "unknown"]


@dataclass(frozen=True)
class Boundedness:
    status: Status
    reason: str
    fix: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def watermarked_fields(schema: dict[str, Any] | None) -> list[str]:
    """Top-level fields of a schema that carry the event-time watermark."""
    if schema is None:
        return []
    return [str(f["name"]) for f in schema.get("fields", [])
            if WATERMARK_METADATA in (f.get("metadata") or {})]


def _names(schema: dict[str, Any]) -> str:
    return ", ".join(str(f["name"]) for f in schema.get("fields", [])) or "none"


def _keyed(kind: str, key_schema: dict[str, Any] | None,
           value_schema: dict[str, Any] | None) -> Boundedness:
    if key_schema is None:
        return Boundedness("unknown", "the checkpoint has no state schema file for its keys")
    marked = watermarked_fields(key_schema)
    if kind == "session_window" and not marked:
        # Session state keys hold the session's start; the window, which carries the
        # watermark, is in the value.
        marked = watermarked_fields(value_schema)
    if marked:
        return Boundedness("bounded", f"column {marked[0]} carries the event-time "
                                      "watermark: Spark evicts keys the watermark passes")
    reason = (f"no key column carries an event-time watermark (key: {_names(key_schema)}): "
              "every key stays in state forever")
    if kind == "dedupe":
        fix = ("add withWatermark(ts, delay) and include ts in dropDuplicates([...]), or use "
               "dropDuplicatesWithinWatermark")
    elif kind == "session_window":
        fix = "add withWatermark(ts, delay) on the session window's time column"
    else:
        fix = ("add withWatermark(ts, delay) and group by window(ts, ...) or by the "
               "watermarked column itself (append or update mode)")
    return Boundedness("unbounded", reason, fix)


def _join(operator: OperatorDir) -> Boundedness:
    sides = {}
    for store in operator.stores():
        if store.name.endswith("keyWithIndexToValue"):
            schema = operator.schema(store)
            if schema is None:
                return Boundedness("unknown", "the checkpoint has no state schema files")
            sides[store.name.split("-")[0]] = watermarked_fields(schema.value_schema)
    missing = sorted(side for side, marked in sides.items() if not marked)
    if not sides:
        return Boundedness("unknown", "the join's state stores were not recognized")
    if missing:
        return Boundedness(
            "unbounded", f"the {' and '.join(missing)} input has no watermarked column: its "
                         "rows stay in state forever",
            "add withWatermark to both inputs and a condition bounding their event times "
            "against each other (e.g. r.ts BETWEEN l.ts AND l.ts + INTERVAL 1 HOUR)")
    return Boundedness("bounded", "both inputs carry a watermark: Spark evicts rows the "
                                  "join condition can no longer match")


def _transform_with_state(operator: OperatorDir) -> Boundedness:
    text = operator.metadata.obj.get("operatorPropertiesJson")
    if not isinstance(text, str):
        return Boundedness("unknown", "the operator metadata does not list state variables")
    properties = json.loads(text)
    variables = properties.get("stateVariables", [])
    timers = [v for v in variables if v.get("stateVariableType") == "TimerState"]
    plain = [v for v in variables if v.get("stateVariableType") != "TimerState"]
    if timers:
        return Boundedness("bounded", f"the processor registers timers "
                                      f"({properties.get('timeMode', '?')}): state can be "
                                      "cleared when they fire")
    no_ttl = [str(v.get("stateName")) for v in plain if not v.get("ttlEnabled")]
    if plain and not no_ttl:
        return Boundedness("bounded", "every state variable has a TTL")
    return Boundedness(
        "unbounded", f"no timers, and state variable(s) {', '.join(no_ttl) or 'none'} have no "
                     "TTL: state is only removed by the processor's own clear() calls",
        "register timers (timeMode ProcessingTime or EventTime) that clear state when they "
        "fire, or give the state variables a TTL (TTLConfig)")


TIMEOUT_FIELD = "timeoutTimestamp"
_TIMEOUT_FIX = ("use GroupStateTimeout.EventTimeTimeout (state.setTimeoutTimestamp) or "
                "ProcessingTimeTimeout (state.setTimeoutDuration) and remove the group's state "
                "when it times out")


def has_timeout_column(value_schema: dict[str, Any] | None) -> bool:
    """Spark stores a group's timeout beside its state only when the operator was given a
    timeout (not GroupStateTimeout.NoTimeout)."""
    return any(f["name"] == TIMEOUT_FIELD for f in (value_schema or {}).get("fields", []))


def _groups_with_state(operator: OperatorDir, timeouts_set: bool | None) -> Boundedness:
    stores = operator.stores()
    schema = operator.schema(stores[0]) if stores else None
    if schema is None:
        return Boundedness("unknown", "the checkpoint has no state schema file")
    if not has_timeout_column(schema.value_schema):
        return Boundedness(
            "unbounded", "the operator runs with GroupStateTimeout.NoTimeout: a group's state "
                         "stays until the function calls state.remove()", _TIMEOUT_FIX)
    if timeouts_set is False:
        return Boundedness(
            "unbounded", "a timeout kind is configured but no group in state has a timeout "
                         "set: their state stays until the function calls state.remove()",
            _TIMEOUT_FIX)
    return Boundedness("bounded", "groups can time out: the function can remove their state "
                                  "when they do")


def check(operator: OperatorDir, kind: str, timeouts_set: bool | None = None) -> Boundedness:
    """The boundedness of one operator. ``timeouts_set``: for flatMapGroupsWithState, whether
    any group in state has a timeout set (None: not looked at, or no group in state)."""
    if kind in ("aggregation", "dedupe", "session_window"):
        stores = operator.stores()
        schema = operator.schema(stores[0]) if stores else None
        return _keyed(kind, schema.key_schema if schema else None,
                      schema.value_schema if schema else None)
    if kind == "dedupe_within_watermark":
        return Boundedness("bounded", "dropDuplicatesWithinWatermark evicts keys the "
                                      "watermark passes")
    if kind == "stream_stream_join":
        return _join(operator)
    if kind == "transform_with_state":
        return _transform_with_state(operator)
    if kind == "flat_map_groups_with_state":
        return _groups_with_state(operator, timeouts_set)
    return Boundedness("unknown", f"operator kind {kind} is not checked")
