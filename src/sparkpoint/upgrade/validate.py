"""Check a resume point against the new job and the snapshots it names; build the plan.

Every problem is collected (not just the first), each naming the entry it concerns, so a
user fixes a resume point in one pass. Nothing here touches the filesystem beyond reading
snapshot manifests.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from sparkpoint.aggregates import AggregateState
from sparkpoint.sinks.kafka_replay import KafkaReplay
from sparkpoint.snapshot.manifest import Manifest, OperatorEntry, operator_kind
from sparkpoint.upgrade.batches import BatchNumbering
from sparkpoint.upgrade.migration_rules import (
    AggregateMove,
    DeclaredValue,
    GroupMerge,
    aggregate_move,
    declared_value,
    dedupe_projection,
    group_merge,
    join_value_changes,
    store_widenings,
    stripped,
    widened_columns,
)
from sparkpoint.upgrade.resume_point import (
    InitializeSource,
    InitializeState,
    ResumePoint,
    ResumeSource,
    ResumeState,
    SeedState,
    flow_mapping,
)
from sparkpoint.windows import NO_WINDOW, WindowSpec


@dataclass(frozen=True)
class NewSource:
    name: str
    named_by_user: bool = True
    kind: str = "file"
    path: str | None = None
    options: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class NewStore:
    name: str
    key_schema: dict[str, Any] | None
    value_schema: dict[str, Any] | None


@dataclass(frozen=True)
class NewOperator:
    name: str
    operator_id: int
    spark_operator_name: str
    stores: tuple[NewStore, ...] = ()
    named_by_user: bool = True
    window: WindowSpec | None = NO_WINDOW  # None: a window sparkpoint cannot read
    # An aggregation's functions in its state's order (sparkpoint.aggregates).
    aggregates: tuple[AggregateState, ...] | None = None

    @property
    def kind(self) -> str:
        return operator_kind(self.spark_operator_name)


@dataclass(frozen=True)
class JobShape:
    """What sparkpoint learned from the new job's plan."""

    sources: tuple[NewSource, ...]
    operators: tuple[NewOperator, ...]
    partitions: int | None = None


@dataclass
class SourceRow:
    name: str
    action: str
    origin: dict[str, str] | None
    start: Any = None
    offset: Any = None

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "action": self.action, "from": self.origin,
                "start": self.start, "offset": self.offset}


@dataclass
class OperatorRow:
    name: str
    action: str
    origin: dict[str, str] | None
    compatible: bool
    reason: str
    operator_id: int | None = None
    kind: str | None = None
    repartition: tuple[int, int] | None = None
    # How a resumed operator's state is rewritten before the job starts (each a rule and
    # what it applies to); empty: resumed as it is.
    changes: list[str] = field(default_factory=list)
    # The state is rewritten into another schema (upgrade/state_migration.py).
    reshaped: bool = False
    # The resume point's ``set:`` of the operator: new value columns as Spark SQL.
    declared: dict[str, str] | None = None
    # ``mode: seed``: the batch query whose rows are the operator's state.
    seed_query: str | None = None

    @property
    def shown_action(self) -> str:
        """The action users see: a resumed operator whose state is rewritten is migrated,
        an initialized one whose state a query gives is seeded."""
        if self.seed_query is not None:
            return "seed"
        return "migrate" if self.action == "resume" and self.changes else self.action

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "action": self.shown_action, "from": self.origin,
                "compatible": self.compatible, "reason": self.reason,
                "changes": list(self.changes),
                "operator_id": self.operator_id, "kind": self.kind}


@dataclass
class UpgradePlan:
    sources: list[SourceRow] = field(default_factory=list)
    operators: list[OperatorRow] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    # Set when the job resumes from a snapshot: the batch ids it continues with.
    batches: BatchNumbering | None = None
    # A rollback into a Kafka topic: the batches written again, the abandoned records'
    # offsets (upgrade/kafka_rollback.py); each also a warning.
    kafka_replays: list[KafkaReplay] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, "sources": [s.to_dict() for s in self.sources],
                "operators": [o.to_dict() for o in self.operators],
                "problems": self.problems, "warnings": self.warnings,
                "batches": self.batches.to_dict() if self.batches is not None else None,
                "kafka_replays": [r.to_dict() for r in self.kafka_replays]}


def _describe(schema: dict[str, Any]) -> str:
    from sparkpoint.checkpoint.operators import schema_ddl

    return schema_ddl(schema)


def compatibility(old: OperatorEntry, new: NewOperator, declared: bool = False) -> str | None:
    """Why ``new`` cannot take ``old``'s state, or None when it can (migrated, maybe)."""
    reasons = incompatibilities(old, new, migrating=True, declared=declared)
    return reasons[0] if reasons else None


def _single_stores(old: OperatorEntry, new: NewOperator) -> tuple[Any, NewStore] | None:
    if old.spark_operator_name != new.spark_operator_name or len(old.stores) != 1 \
            or len(new.stores) != 1 or old.stores[0].name != new.stores[0].name:
        return None
    return old.stores[0], new.stores[0]


def _aggregate_move(old: OperatorEntry, new: NewOperator) -> AggregateMove | str | None:
    stores = _single_stores(old, new)
    if stores is None:
        return None
    was, now = stores
    return aggregate_move(old.aggregates, new.aggregates, was.value_schema, now.value_schema,
                          old.rows)


def state_changes(old: OperatorEntry, new: NewOperator) -> list[str]:
    """What a start migrates in ``old``'s state for ``new`` (upgrade/migration_rules.py):
    empty when it resumes as it is or cannot be migrated (:func:`incompatibilities` says
    why)."""
    joined = join_value_changes(
        old.spark_operator_name if old.spark_operator_name == new.spark_operator_name else "",
        {s.name: (s.key_schema, s.value_schema) for s in old.stores},
        {s.name: (s.key_schema, s.value_schema) for s in new.stores})
    if joined:
        return joined
    stores = _single_stores(old, new)
    if stores is None:
        return []
    was, now = stores
    projected = dedupe_projection(old.spark_operator_name, was.key_schema, now.key_schema)
    if projected is not None and stripped(was.value_schema) == stripped(now.value_schema):
        return projected
    merged = group_merge(old.spark_operator_name, was.key_schema, now.key_schema,
                         old.aggregates, new.aggregates)
    if isinstance(merged, GroupMerge):
        widened = widened_columns({"fields": [
            f for f in (was.key_schema or {}).get("fields", []) if f["name"] in {
                g["name"] for g in (now.key_schema or {}).get("fields", [])}]},
            now.key_schema or {}) or []
        return list(merged.changes) + [
            f"key column {name}: {was_type} -> {now_type} (widened by Spark's cast)"
            for name, was_type, now_type in widened]
    move = _aggregate_move(old, new)
    if isinstance(move, AggregateMove):
        keys = store_widenings(was.key_schema, None, now.key_schema, None)
        return [] if keys is None else keys + list(move.changes)
    return store_widenings(was.key_schema, was.value_schema, now.key_schema,
                           now.value_schema) or []


def declared_state(old: OperatorEntry, new: NewOperator, declared: dict[str, str],
                   where: str) -> DeclaredValue:
    """The new value of an operator whose resume point entry declares ``set:`` columns."""
    stores = _single_stores(old, new)
    if stores is None:
        return DeclaredValue((), (), (f"{where}: set: applies to operators with one state "
                                      f"store; '{new.name}' has {len(new.stores)}",))
    was, now = stores
    move = _aggregate_move(old, new)
    keys = store_widenings(was.key_schema, None, now.key_schema, None)
    found = declared_value(was.key_schema, was.value_schema, now.value_schema, declared,
                           move if isinstance(move, AggregateMove) else None, where)
    if keys is None:
        return DeclaredValue(found.columns, found.changes, (
            *found.problems, f"{where}: set: defines value columns; the key changed "
            f"(snapshot has ({_describe(was.key_schema or {})}), the job has "
            f"({_describe(now.key_schema or {})}))"))
    return DeclaredValue(found.columns, (*keys, *found.changes), found.problems)


def incompatibilities(old: OperatorEntry, new: NewOperator,
                      migrating: bool = False, declared: bool = False) -> list[str]:
    """Every reason ``new`` cannot take ``old``'s state (a changed kind alone: the schemas
    of another kind of operator say nothing more). ``migrating``: what a start migrates
    (:func:`state_changes`) is no reason, and an aggregate change that cannot be migrated
    is named. ``declared``: the value is defined by ``set:`` (:func:`declared_state` checks
    it)."""
    if declared and _single_stores(old, new) is not None:
        return []
    if migrating and state_changes(old, new):
        return []
    refused = _aggregate_move(old, new) if migrating else None
    if isinstance(refused, str):
        return [f"aggregates changed and cannot be migrated: {refused}"]
    stores = _single_stores(old, new) if migrating else None
    if stores is not None:
        merged = group_merge(old.spark_operator_name, stores[0].key_schema,
                             stores[1].key_schema, old.aggregates, new.aggregates)
        if isinstance(merged, str):
            return [f"key schema changed and cannot be migrated: {merged}"]
    if old.spark_operator_name != new.spark_operator_name:
        return [f"operator kind changed: snapshot has {old.kind} ({old.spark_operator_name}), "
                f"the job has {new.kind} ({new.spark_operator_name})"]
    reasons = []
    new_stores = {store.name: store for store in new.stores}
    for store in old.stores:
        target = new_stores.get(store.name)
        if target is None:
            continue
        label = "" if store.name == "default" else f" of store {store.name}"
        if store.key_schema is not None and target.key_schema is not None and \
                stripped(store.key_schema) != stripped(target.key_schema):
            reasons.append(
                f"key schema{label} changed: snapshot has ({_describe(store.key_schema)}), "
                f"the job has ({_describe(target.key_schema)})")
        if store.value_schema is not None and target.value_schema is not None and \
                stripped(store.value_schema) != stripped(target.value_schema):
            reasons.append(
                f"value schema{label} changed (a different aggregate or state type): "
                f"snapshot has ({_describe(store.value_schema)}), the job has "
                f"({_describe(target.value_schema)})" + _unrecorded(old, new))
    return reasons


def _unrecorded(old: OperatorEntry, new: NewOperator) -> str:
    """What to do when an aggregation's change could be migrated but the snapshot does not
    say which aggregates its state holds."""
    if old.aggregates is not None or new.aggregates is None:
        return ""
    return ("; the snapshot does not record the aggregates its state holds (taken by an "
            "older sparkpoint): snapshot the old job again to have them migrated")


def window_change(old: OperatorEntry, new: NewOperator) -> str | None:
    """Why resuming ``old``'s state with ``new``'s window would mix window shapes, or None.

    Spark keys window state by the window's start and end; it neither checks nor adapts
    them, so windows of both shapes would be emitted side by side."""
    if old.window is None or new.window is None or old.window == new.window:
        return None
    if old.rows == 0:
        return None  # nothing to mix: a drained operator's windows were all emitted
    return (f"the window changed under the same name: the snapshot has "
            f"{old.window.describe()}, the job has {new.window.describe()}; resumed state "
            "would be emitted next to new windows that overlap it")


def _window_unchecked(old: OperatorEntry, new: NewOperator, snapshot: str) -> str | None:
    if new.window is None:
        return (f"state.{new.name}: its window is computed per row (a session gap from an "
                "expression); sparkpoint could not check that it is unchanged")
    if old.window is None and new.window.kind != "none":
        return (f"state.{new.name}: snapshot '{snapshot}' does not record the window of "
                f"'{old.name}' (taken by an older sparkpoint); sparkpoint could not check that "
                f"it is unchanged (the job has {new.window.describe()})")
    return None


def validate(
    job: JobShape, resume_point: ResumePoint, manifests: Mapping[str, Manifest | None],
    broken: frozenset[str] = frozenset(),
) -> UpgradePlan:
    """``manifests`` maps every snapshot the resume point names to its manifest (None: absent).
    ``broken``: entries (``sources.NAME``, ``state.NAME``, whole sections) that the file has
    but could not be read; their problem is reported already, so they are not called missing,
    and old operators they might have resumed are not called left behind."""
    plan = UpgradePlan()
    problems = plan.problems

    def has_broken(section: str, name: str) -> bool:
        return section in broken or f"{section}.{name}" in broken
    for name in resume_point.snapshots():
        if manifests.get(name) is None:
            problems.append(f"snapshot '{name}' does not exist (see 'sparkpoint snapshot list')")

    # Sources: one entry each, resumed ones must exist in their snapshot.
    job_sources = {s.name: s for s in job.sources}
    for source in job.sources:
        if not source.named_by_user:
            plan.warnings.append(
                f"source '{source.name}' has no name; name it with spark.readStream.name(...) so "
                "that its offsets follow it across changes")
        entry = resume_point.sources.get(source.name)
        if entry is None and has_broken("sources", source.name):
            continue
        if entry is None:
            problems.append(f"sources.{source.name}: the job reads source '{source.name}' but the "
                            "resume point has no entry for it (add mode: resume or initialize)")
            continue
        if isinstance(entry, InitializeSource):
            # Positions other than earliest are resolved against the input when the
            # checkpoint is built (restore.resolve_positions).
            start = entry.start if isinstance(entry.start, str) else entry.start.model_dump()
            plan.sources.append(SourceRow(source.name, "initialize", None, start=start))
            continue
        assert isinstance(entry, ResumeSource)
        old_name = entry.source or source.name
        origin = {"snapshot": entry.snapshot, "source": old_name}
        manifest = manifests.get(entry.snapshot)
        if manifest is None:
            plan.sources.append(SourceRow(source.name, "resume", origin))
            continue
        old_source = manifest.source(old_name)
        if old_source is None:
            known = ", ".join(s.name for s in manifest.sources) or "none"
            problems.append(f"sources.{source.name}: snapshot '{entry.snapshot}' has no source "
                            f"'{old_name}' (it has: {known})")
            continue
        plan.sources.append(SourceRow(source.name, "resume", origin, offset=old_source.offset))
    for name in resume_point.sources:
        if name not in job_sources:
            problems.append(f"sources.{name}: the job has no source '{name}' (it reads: "
                            f"{', '.join(job_sources) or 'none'}); remove the entry")

    # Operators: one entry each; resumed ones must exist and be compatible.
    job_operators = {op.name: op for op in job.operators}
    resumed_by: dict[tuple[str, str], list[str]] = {}
    for op in job.operators:
        if not op.named_by_user:
            plan.warnings.append(
                f"stateful operator '{op.name}' (Spark operator {op.operator_id}) has a derived "
                "name; name it with ctx.stateful(name, df) so that its state survives changes")
        state_entry = resume_point.state.get(op.name)
        if state_entry is None and has_broken("state", op.name):
            continue
        if state_entry is None:
            problems.append(f"state.{op.name}: the job has stateful operator '{op.name}' "
                            f"({op.kind}) but the resume point has no entry for it (add mode: "
                            "resume or initialize)")
            continue
        if isinstance(state_entry, SeedState):
            # Assembled as a new operator (empty state), then written from the query.
            row = OperatorRow(op.name, "initialize", None, True,
                              "state from a batch query", op.operator_id, op.kind,
                              seed_query=state_entry.query)
            if len(op.stores) != 1:
                problems.append(f"state.{op.name}: mode: seed applies to operators with one "
                                f"state store; '{op.name}' has {len(op.stores)}")
                row.compatible = False
            plan.operators.append(row)
            continue
        if isinstance(state_entry, InitializeState):
            plan.operators.append(OperatorRow(op.name, "initialize", None, True,
                                              "new operator: starts with empty state",
                                              op.operator_id, op.kind))
            continue
        assert isinstance(state_entry, ResumeState)
        entry_snapshot = state_entry.snapshot
        old_name = state_entry.operator or op.name
        origin = {"snapshot": entry_snapshot, "operator": old_name}
        resumed_by.setdefault((entry_snapshot, old_name), []).append(op.name)
        manifest = manifests.get(entry_snapshot)
        if manifest is None:
            plan.operators.append(OperatorRow(op.name, "resume", origin, False,
                                              f"snapshot '{entry_snapshot}' does not exist",
                                              op.operator_id, op.kind))
            continue
        old = manifest.operator(old_name)
        if old is None:
            known = ", ".join(o.name for o in manifest.operators) or "none"
            reason = f"snapshot '{entry_snapshot}' has no operator '{old_name}' (it has: {known})"
            problems.append(f"state.{op.name}: {reason}")
            plan.operators.append(OperatorRow(op.name, "resume", origin, False, reason,
                                              op.operator_id, op.kind))
            continue
        why = compatibility(old, op, declared=state_entry.set is not None)
        if why is not None:
            problems.append(f"state.{op.name}: cannot resume from {entry_snapshot}/{old_name}: "
                            f"{why}")
            plan.operators.append(OperatorRow(op.name, "resume", origin, False, why,
                                              op.operator_id, op.kind))
            continue
        changed = window_change(old, op)
        if changed is not None:
            assert old.window is not None
            problems.append(
                f"state.{op.name}: cannot resume from {entry_snapshot}/{old_name}: {changed}. "
                f"Either initialize it ({flow_mapping(mode='initialize')}), drain the old job "
                "first ('sparkpoint drain JOB --snapshot SNAP') and start from that snapshot, "
                f"or keep the old window ({old.window.describe()})")
            plan.operators.append(OperatorRow(op.name, "resume", origin, False, changed,
                                              op.operator_id, op.kind))
            continue
        unchecked = _window_unchecked(old, op, entry_snapshot)
        if unchecked is not None:
            plan.warnings.append(unchecked)
        rows = "?" if old.rows is None else str(old.rows)
        reason = f"state of {entry_snapshot}/{old_name} ({rows} rows)"
        changes = state_changes(old, op)
        if state_entry.set is not None:
            declared = declared_state(old, op, state_entry.set, f"state.{op.name}.set")
            problems.extend(declared.problems)
            changes = list(declared.changes)
        row = OperatorRow(op.name, "resume", origin, True, reason, op.operator_id, op.kind,
                          changes=changes, reshaped=bool(changes) or state_entry.set is not None,
                          declared=state_entry.set)
        if job.partitions is not None and old.partitions != job.partitions:
            row.repartition = (old.partitions, job.partitions)
            row.reason += f", repartitioned from {old.partitions} to {job.partitions} partitions"
        plan.operators.append(row)
    for name in resume_point.state:
        if name not in job_operators:
            problems.append(f"state.{name}: the job has no stateful operator '{name}' (it has: "
                            f"{', '.join(job_operators) or 'none'}); remove the entry or list the "
                            "old state under drop")
    for (snap, old_name), targets in resumed_by.items():
        if len(targets) > 1:
            problems.append(f"state of {snap}/{old_name} is resumed by {len(targets)} operators "
                            f"({', '.join(targets)}); one operator's state can go to one place")

    # Every operator of every snapshot used is resumed or deliberately dropped.
    dropped: set[tuple[str, str]] = set()
    for index, drop in enumerate(resume_point.drop):
        key = (drop.snapshot, drop.operator)
        manifest = manifests.get(drop.snapshot)
        if manifest is not None and manifest.operator(drop.operator) is None:
            problems.append(f"drop[{index}]: snapshot '{drop.snapshot}' has no operator "
                            f"'{drop.operator}'")
            continue
        if key in resumed_by:
            problems.append(f"drop[{index}]: {drop.snapshot}/{drop.operator} is both dropped and "
                            f"resumed by {', '.join(resumed_by[key])}")
            continue
        dropped.add(key)
        gone = manifest.operator(drop.operator) if manifest is not None else None
        plan.operators.append(OperatorRow(drop.operator, "drop", {"snapshot": drop.snapshot,
                                          "operator": drop.operator}, True,
                                          "state deliberately left behind", None,
                                          gone.kind if gone is not None else None))
    unread_state = "drop" in broken or any(b == "state" or b.startswith("state.")
                                           for b in broken)
    for snap in resume_point.snapshots():
        manifest = manifests.get(snap)
        if manifest is None or unread_state:
            continue
        for left in manifest.operators:
            if (snap, left.name) not in resumed_by and (snap, left.name) not in dropped:
                rows = "?" if left.rows is None else str(left.rows)
                problems.append(
                    f"snapshot '{snap}' operator '{left.name}' ({left.kind}, {rows} rows) is "
                    "neither resumed nor dropped: resume it into an operator of the job or add "
                    f"{flow_mapping(snapshot=snap, operator=left.name)} to drop")
    return plan


# Settings a query records in its offsets log that change how its state files are encoded.
# sparkpoint reads and rewrites state files itself (repartitioning, drain, empty versions),
# and decodes only these values; state written otherwise would be misread. The state
# encoding (unsaferow or avro) has checks of its own: state_encoding_problems.
DECODED_STATE_SETTINGS: dict[str, tuple[str, ...]] = {
    "spark.sql.streaming.stateStore.rowChecksum.enabled": ("false",),
    "spark.sql.streaming.stateStore.compression.codec": (
        "lz4", "org.apache.spark.io.lz4compressioncodec"),
}


def snapshot_format_problems(
    snapshot: str, manifest: Manifest, state_conf: Mapping[str, str], spark_version: str,
    resumes_state: bool,
) -> list[str]:
    """Why the snapshot's files cannot be trusted to this Spark and to sparkpoint's readers.

    ``state_conf`` is the conf map of the snapshot's offsets entry; settings it lacks have
    Spark's defaults, which sparkpoint decodes."""
    problems = []
    if manifest.spark_version != spark_version:
        problems.append(
            f"snapshot '{snapshot}' was taken with Spark {manifest.spark_version}, this is "
            f"Spark {spark_version}: checkpoint and state formats differ between Spark versions; "
            f"start from a snapshot taken with Spark {spark_version}, or run the job with Spark "
            f"{manifest.spark_version}")
    if resumes_state:
        for setting, decoded in DECODED_STATE_SETTINGS.items():
            value = state_conf.get(setting)
            if value is not None and value.lower() not in decoded:
                problems.append(
                    f"snapshot '{snapshot}': its state was written with {setting}={value}, "
                    f"sparkpoint decodes only {setting}={decoded[0]}; initialize the state "
                    "instead of resuming it, or take the snapshot from a job run with "
                    f"{setting}={decoded[0]}")
    return problems


ENCODING_CONF = "spark.sql.streaming.stateStore.encodingFormat"
DEFAULT_ENCODING = "unsaferow"
# Spark encodes transformWithState's state in Avro when asked (for its schema evolution) and
# refuses Avro for every other stateful operator at the query's start. sparkpoint never
# decodes transformWithState's state (it copies it, and Spark repartitions it), so Avro
# state is resumed as it is.
AVRO_ENCODING = "avro"
AVRO_KINDS = ("transform_with_state",)


def state_encoding_problems(
    encodings: Mapping[str, str], operators: list[OperatorRow], asked: str | None
) -> list[str]:
    """Why the state encodings of the snapshots a plan uses (``encodings``: snapshot ->
    encodingFormat of its offsets entry) cannot go into one new query. Spark keeps one
    encoding per query, taken from the checkpoint's offsets log whatever the job's own
    setting (``asked``) says."""
    problems = []
    for snapshot, encoding in sorted(encodings.items()):
        if encoding not in (DEFAULT_ENCODING, AVRO_ENCODING):
            problems.append(
                f"snapshot '{snapshot}': its state was written with {ENCODING_CONF}="
                f"{encoding}; expected {DEFAULT_ENCODING} or {AVRO_ENCODING}: initialize the "
                "state instead of resuming it")
    found = sorted(set(encodings.values()))
    if len(found) > 1:
        listed = ", ".join(f"{name}: {value}" for name, value in sorted(encodings.items()))
        problems.append(
            f"the snapshots this job resumes from were written with different state "
            f"encodings ({ENCODING_CONF}: {listed}); a query has one encoding for all its "
            "state: resume from snapshots of one encoding, or initialize the operators of "
            "the others")
        return problems
    if not found:
        return problems
    encoding = found[0]
    if asked is not None and asked.lower() != encoding:
        problems.append(
            f"the job asks {ENCODING_CONF}={asked}, the snapshot's state was written with "
            f"{encoding}; Spark keeps the encoding a checkpoint was started with, and state "
            f"cannot move between encodings: drop the setting or set it to {encoding}")
    if encoding == AVRO_ENCODING:
        for row in operators:
            if row.action != "drop" and row.kind is not None and row.kind not in AVRO_KINDS:
                problems.append(
                    f"operator '{row.name}' ({row.kind}) would run with the snapshot's state "
                    f"encoding {ENCODING_CONF}={AVRO_ENCODING}, which Spark supports for "
                    "transformWithState only (it refuses the query at its start): keep this "
                    "operator in a job of its own, or resume from a snapshot written with "
                    f"{DEFAULT_ENCODING}")
    return problems


def default_resume_point(job: JobShape, snapshot_name: str, manifest: Manifest) -> ResumePoint:
    """Same-named sources and operators resume from the snapshot; the rest initialize
    (sources from ``earliest``). Snapshot operators the job lacks are not dropped: state is
    left behind only when the user says so, so validation will name them."""
    sources: dict[str, Any] = {}
    for source in job.sources:
        if manifest.source(source.name) is not None:
            sources[source.name] = {"mode": "resume", "snapshot": snapshot_name,
                                    "source": source.name}
        else:
            sources[source.name] = {"mode": "initialize", "start": "earliest"}
    state: dict[str, Any] = {}
    for op in job.operators:
        if manifest.operator(op.name) is not None:
            state[op.name] = {"mode": "resume", "snapshot": snapshot_name, "operator": op.name}
        else:
            state[op.name] = {"mode": "initialize"}
    return ResumePoint.model_validate({"version": 1, "sources": sources, "state": state,
                                       "drop": []})
