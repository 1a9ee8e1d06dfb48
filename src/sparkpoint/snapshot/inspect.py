"""What a snapshot's state holds, per operator and partition, read from its files (no JVM).

Rows and bytes per partition, key skew (largest partition / mean), the event-time range of
the keys where they have a window or a timestamp column, whether the state can ever shrink
(``checkpoint/boundedness.py``), and on request a sample of decoded keys and values.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from sparkpoint.checkpoint.boundedness import (
    TIMEOUT_FIELD,
    Boundedness,
    check,
    watermarked_fields,
)
from sparkpoint.checkpoint.layout import Checkpoint, OperatorDir, StoreLayout
from sparkpoint.checkpoint.logs import CommitLogEntry
from sparkpoint.checkpoint.providers import StateProvider
from sparkpoint.checkpoint.rocksdb_keys import KeyEncoding
from sparkpoint.checkpoint.state_files import readable_partition
from sparkpoint.checkpoint.unsafe_row import read_field, read_fields
from sparkpoint.errors import UnknownOperatorError
from sparkpoint.progress import track
from sparkpoint.snapshot.manifest import operator_kind
from sparkpoint.snapshot.store import SnapshotStore

# flatMapGroupsWithState's "no timeout set" (GroupStateImpl.NO_TIMESTAMP).
NO_TIMEOUT = -1
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


@dataclass(frozen=True)
class PartitionStats:
    partition: int
    rows: int
    bytes: int


@dataclass(frozen=True)
class EventTimeRange:
    column: str
    min: str | None
    max: str | None


@dataclass(frozen=True)
class SampleRow:
    partition: int
    store: str
    key: dict[str, Any]
    value: dict[str, Any]


@dataclass
class OperatorReport:
    name: str
    operator_id: int
    kind: str
    rows: int
    bytes: int
    skew: float | None
    event_time: EventTimeRange | None
    boundedness: Boundedness
    partitions: list[PartitionStats]
    sample: list[SampleRow] | None = None
    # One line per store whose rows were asked for (--rows) but cannot be decoded here.
    undecoded: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["boundedness"] = self.boundedness.to_dict()
        if self.sample is None:
            data.pop("sample")
        return data


@dataclass
class InspectReport:
    batch_id: int
    state_store_provider: str
    operators: list[OperatorReport] = field(default_factory=list)
    snapshot: str | None = None
    job: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"snapshot": self.snapshot, "job": self.job, "batch_id": self.batch_id,
                "state_store_provider": self.state_store_provider,
                "operators": [op.to_dict() for op in self.operators]}


def _micros_iso(micros: int) -> str:
    moment = _EPOCH + dt.timedelta(microseconds=micros)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _kind_of(spark_type: Any) -> str:
    return spark_type if isinstance(spark_type, str) else str(spark_type.get("type"))


def _is_window(spark_type: Any) -> bool:
    if _kind_of(spark_type) != "struct":
        return False
    names = {f["name"]: _kind_of(f["type"]) for f in spark_type["fields"]}
    return names.get("start") in ("timestamp", "timestamp_ntz") and "end" in names


def event_time_column(key_schema: dict[str, Any] | None) -> tuple[int, str, bool] | None:
    """(index, name, is a window struct) of the key column that holds event time: the
    watermarked one, else the first window struct, else the first timestamp."""
    if key_schema is None:
        return None
    fields = key_schema.get("fields", [])
    marked = set(watermarked_fields(key_schema))
    ordered = sorted(range(len(fields)), key=lambda i: (fields[i]["name"] not in marked, i))
    for index in ordered:
        spark_type = fields[index]["type"]
        if _is_window(spark_type):
            return index, str(fields[index]["name"]), True
        if _kind_of(spark_type) in ("timestamp", "timestamp_ntz") and (
                fields[index]["name"] in marked or not marked):
            return index, str(fields[index]["name"]), False
    return None


def shown(value: Any, spark_type: Any) -> Any:
    """A decoded ``UnsafeRow`` value as JSON shows it: text, ISO times, structs as objects."""
    kind = _kind_of(spark_type)
    if value is None:
        return None
    if kind == "struct" and isinstance(value, list):
        return {f["name"]: shown(v, f["type"])
                for f, v in zip(spark_type["fields"], value, strict=True)}
    if kind in ("timestamp", "timestamp_ntz") and isinstance(value, int):
        return _micros_iso(value)
    if kind == "date" and isinstance(value, int):
        return (_EPOCH + dt.timedelta(days=value)).date().isoformat()
    if isinstance(value, bytes):
        try:
            return value.decode("utf-8") if kind == "string" else value.hex()
        except UnicodeDecodeError:
            return value.hex()
    return value


def shown_row(row: bytes, schema: dict[str, Any], where: str) -> dict[str, Any]:
    fields = schema.get("fields", [])
    values = read_fields(row, fields, where, lenient=True)
    return {f["name"]: shown(v, f["type"]) for f, v in zip(fields, values, strict=True)}


@dataclass
class _Scan:
    """What one store partition's rows tell, gathered in one pass."""

    rows: int = 0
    low: int | None = None
    high: int | None = None
    timeouts_set: bool | None = None
    sample: list[SampleRow] = field(default_factory=list)


def _scan_partition(pdir: Path, version: int, provider: StateProvider, store: StoreLayout,
                    key_schema: dict[str, Any] | None, value_schema: dict[str, Any] | None,
                    partition: int, sample_rows: int, scan: _Scan,
                    keys: KeyEncoding, unique_id: str | None) -> int:
    """Decode the keys (and the values the checks need); returns the partition's rows."""
    column = event_time_column(key_schema)
    value_fields = (value_schema or {}).get("fields", [])
    timeout_index = next((i for i, f in enumerate(value_fields)
                          if f["name"] == TIMEOUT_FIELD and _kind_of(f["type"]) == "long"), None)
    where = str(pdir)
    rows = 0
    for key, value in provider.read_pairs(pdir, version, keys, unique_id):
        rows += 1
        if column is not None and key_schema is not None:
            index, _name, window = column
            raw = read_field(key, key_schema["fields"], index, where, lenient=True)
            if raw is not None:
                low, high = (raw[0], raw[1]) if window else (raw, raw)
                if low is not None:
                    scan.low = low if scan.low is None else min(scan.low, low)
                if high is not None:
                    scan.high = high if scan.high is None else max(scan.high, high)
        if timeout_index is not None:
            timeout = read_field(value, value_fields, timeout_index, where, lenient=True)
            scan.timeouts_set = bool(scan.timeouts_set) or (timeout not in (None, NO_TIMEOUT))
        if len(scan.sample) < sample_rows and key_schema is not None:
            scan.sample.append(SampleRow(
                partition, store.name, shown_row(key, key_schema, where),
                shown_row(value, value_schema, where) if value_schema else {}))
    return rows


def not_decoded(operator: str, kind: str, store: str) -> str:
    """Why the rows of a store without a schema v2 file are counted but not shown."""
    return (f"[STATE_NOT_DECODED] operator '{operator}' store '{store}' ({kind}): its rows "
            "are counted (RocksDB keys of all its column families: state variables and "
            "timers), not decoded: transformWithState keeps each state variable in its own "
            "column family with its own schema (state schema v3), which this reader does not "
            "decode; read them with spark.read.format('statestore').option('stateVarName', "
            "NAME)")


def _needs_rows(operator: OperatorDir, kind: str, sample_rows: int) -> bool:
    if sample_rows > 0 or kind == "flat_map_groups_with_state":
        return True
    return any(event_time_column(schema.key_schema) is not None
               for store in operator.stores()
               if (schema := operator.schema(store)) is not None)


def inspect_operator(operator: OperatorDir, name: str, version: int, provider: StateProvider,
                     commit: CommitLogEntry, sample_rows: int = 0) -> OperatorReport:
    """Report one operator at a state version (a snapshot of batch N holds version N+1),
    made by ``commit`` (which names the version's files in checkpoint format v2)."""
    kind = operator_kind(operator.operator_name)
    decode = _needs_rows(operator, kind, sample_rows)
    scan = _Scan()
    stats = []
    undecoded = [] if sample_rows == 0 else [
        not_decoded(name, kind, store.name) for store in operator.stores()
        if operator.schema(store) is None]
    for partition in track(range(operator.partitions), f"inspect: {name}", unit="partition"):
        rows = size = 0
        for store_index, store in enumerate(operator.stores()):
            pdir = readable_partition(store.partition_dir(operator.path, partition), version)
            schema = operator.schema(store)
            unique_id = operator.unique_id(commit, partition, store_index) \
                if provider.has_unique_ids else None
            size += provider.version_bytes(pdir, version, unique_id)
            # A store without a schema v2 file (transformWithState) is counted, not decoded.
            if decode and schema is not None:
                rows += _scan_partition(
                    pdir, version, provider, store, schema.key_schema, schema.value_schema,
                    partition, sample_rows, scan,
                    operator.key_encoding(store), unique_id)
            else:
                rows += provider.count_rows(pdir, version, unique_id)
        stats.append(PartitionStats(partition, rows, size))
    total = sum(p.rows for p in stats)
    skew = (round(max(p.rows for p in stats) / (total / len(stats)), 2)
            if stats and total else None)
    column = None
    for store in operator.stores():
        schema = operator.schema(store)
        if schema is not None and (found := event_time_column(schema.key_schema)) is not None:
            column = found[1]
            break
    event_time = None if column is None else EventTimeRange(
        column, None if scan.low is None else _micros_iso(scan.low),
        None if scan.high is None else _micros_iso(scan.high))
    return OperatorReport(
        name=name, operator_id=operator.operator_id, kind=kind, rows=total,
        bytes=sum(p.bytes for p in stats), skew=skew, event_time=event_time,
        boundedness=check(operator, kind, scan.timeouts_set),
        partitions=stats, sample=scan.sample if sample_rows > 0 else None,
        undecoded=undecoded)


def inspect_checkpoint(checkpoint: Checkpoint, batch: int, names: Mapping[int, str],
                       only: str | None = None, sample_rows: int = 0) -> InspectReport:
    """Every operator of the checkpoint (or the one named ``only``) at committed ``batch``."""
    provider = checkpoint.state_provider(batch)
    commit = checkpoint.commit(batch)
    report = InspectReport(batch, checkpoint.provider(batch))
    for operator in checkpoint.operators(batch):
        name = names.get(operator.operator_id,
                         f"{operator.operator_name}_{operator.operator_id}")
        if only is not None and name != only:
            continue
        report.operators.append(
            inspect_operator(operator, name, batch + 1, provider, commit, sample_rows))
    return report


def operator_checks(checkpoint: Checkpoint, names: Mapping[int, str]) -> list[dict[str, Any]]:
    """Boundedness of each operator from the checkpoint's metadata and schemas alone (no
    state file read; flatMapGroupsWithState's timeouts are then unknown)."""
    checks = []
    for operator in checkpoint.operators():
        kind = operator_kind(operator.operator_name)
        name = names.get(operator.operator_id,
                         f"{operator.operator_name}_{operator.operator_id}")
        checks.append({"operator": name, "kind": kind, **check(operator, kind).to_dict()})
    return checks


def inspect_snapshot(store: SnapshotStore, snapshot: str, operator: str | None,
                     rows: int) -> InspectReport:
    """What the snapshot's state holds (the one operator named, or all), with ``rows``
    decoded rows per operator; an operator the snapshot lacks is refused by name."""
    manifest = store.get(snapshot)
    if operator is not None and manifest.operator(operator) is None:
        names = ", ".join(op.name for op in manifest.operators) or "none"
        raise UnknownOperatorError(
            f"snapshot '{snapshot}' has no operator '{operator}' (operators: {names}); see "
            f"'sparkpoint snapshot show {snapshot}'")
    checkpoint = Checkpoint(store.checkpoint_path(snapshot))
    report = inspect_checkpoint(checkpoint, manifest.batch_id,
                                {op.operator_id: op.name for op in manifest.operators},
                                only=operator, sample_rows=rows)
    report.snapshot, report.job = manifest.name, manifest.job
    return report
