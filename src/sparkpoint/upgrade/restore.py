"""Resume a built job from snapshots: resolve its resume point, validate it, and build the
new checkpoint (assemble, repartition if asked, let Spark check it, publish).

The checkpoint is assembled in a staging directory beside the target and published by one
rename only after Spark's own restart checks pass on it, an intent file written just before
(see ``interrupted``: what a killed start leaves and how the next one rolls it back); the
batch id it holds comes from ``batches`` (the snapshot's, or renumbered past the sink).
Snapshots are only read.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from sparkpoint.checkpoint import hdfs_state
from sparkpoint.checkpoint.layout import (
    CHECKPOINT_FORMAT_CONF,
    PROVIDER_CONF,
    SHUFFLE_PARTITIONS_CONF,
    Checkpoint,
)
from sparkpoint.checkpoint.providers import HDFS_BACKED, ROCKSDB, StateProvider, provider_named
from sparkpoint.checkpoint.schema_paths import relocate_schema_paths
from sparkpoint.crash_points import crash_point
from sparkpoint.errors import (
    NameTakenError,
    SnapshotDamagedError,
    SparkpointError,
    UsageError,
    ValidationError,
)
from sparkpoint.losses import AcceptedLoss
from sparkpoint.progress import phase
from sparkpoint.snapshot.manifest import FileEntry, Manifest, OperatorEntry
from sparkpoint.snapshot.placement import copy_checked, copy_in_tasks, place_checkpoint
from sparkpoint.snapshot.store import SnapshotStore
from sparkpoint.sources.positions import (
    ResolvedPosition,
    SourceDescription,
    resolve_start,
    start_label,
)
from sparkpoint.spark.driver_disk import TEMP_BUILD_PREFIX, require_driver_disk
from sparkpoint.spark.inspect import (
    PlannedSource,
    output_mode,
    repartition,
    restart_problem,
    state_layout,
    write_empty_rocksdb_version,
)
from sparkpoint.spark.plan import PlannedOperator
from sparkpoint.spark.rocksdb_template import template_for
from sparkpoint.spark.s3a import aws_environment
from sparkpoint.spark.sink import file_sink_path, sink_format
from sparkpoint.spark.version import installed_pyspark_version
from sparkpoint.storage.fileio import join, spark_url
from sparkpoint.storage.local import copy_file, fsync_dir, walk_files
from sparkpoint.storage.location import Location, StorePath, remove_tree
from sparkpoint.storage.task_store import TaskStore, task_store
from sparkpoint.upgrade.adopt import unfinished_import_problem
from sparkpoint.upgrade.assemble import (
    AssembleResult,
    NewOperatorLayout,
    UsedSnapshot,
    assemble_checkpoint,
    fetch_into_place,
    to_format_v2,
    used_snapshots,
)
from sparkpoint.upgrade.batches import BatchChoice, SinkInfo, number_batches
from sparkpoint.upgrade.hdfs_repartition import repartition_hdfs_state
from sparkpoint.upgrade.hdfs_store_repartition import repartition_hdfs_in_store
from sparkpoint.upgrade.interrupted import clear_intent, record_intent, staging_prefix
from sparkpoint.upgrade.provider_move import asked_provider, move_problems, move_state_provider
from sparkpoint.upgrade.provider_move_in_store import move_provider_in_store
from sparkpoint.upgrade.resume_point import ReadResumePoint, ResumePoint
from sparkpoint.upgrade.rocksdb_repartition import repartition_rocksdb_state
from sparkpoint.upgrade.rocksdb_store_repartition import (
    RocksDBStoreMove,
    plan_rocksdb_in_store,
    repartition_rocksdb_in_store,
)
from sparkpoint.upgrade.state_migration import (
    InStore,
    declared_sql_problems,
    merge_sql_problems,
    migrate_operators,
    seed_operators,
    seed_problems,
    writes_in_store,
)
from sparkpoint.upgrade.validate import (
    DEFAULT_ENCODING,
    ENCODING_CONF,
    JobShape,
    NewOperator,
    NewSource,
    NewStore,
    UpgradePlan,
    default_resume_point,
    snapshot_format_problems,
    state_encoding_problems,
    validate,
)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming.readwriter import DataStreamWriter

Echo = Callable[[str], None]


class PlannedJob(Protocol):
    """A job built and planned by the runtime, its query not started."""

    @property
    def spark(self) -> SparkSession: ...

    @property
    def writer(self) -> DataStreamWriter: ...

    @property
    def operators(self) -> list[PlannedOperator]: ...

    @property
    def conf(self) -> Mapping[str, str]: ...

    @property
    def sources(self) -> list[PlannedSource]: ...


@dataclass
class Resolution:
    """A resume point checked against a built job and the snapshots it names."""

    shape: JobShape
    plan: UpgradePlan
    snapshots: dict[str, UsedSnapshot] = field(default_factory=dict)
    layouts: dict[str, NewOperatorLayout] = field(default_factory=dict)
    positions: dict[str, ResolvedPosition] = field(default_factory=dict)
    # The sink already holds batches the new job would run (a refusal, not a bad plan).
    sink_problem: str | None = None
    # The snapshots' state store provider and the one the new job asks for (the same
    # object: no move).
    provider: StateProvider = ROCKSDB
    new_provider: StateProvider = ROCKSDB
    # Input the sources no longer hold that the start goes on without (--accept-data-loss),
    # and per resumed Kafka source the offsets of the checkpoint's batch moved up to the
    # broker's earliest ones (upgrade/pipeline.py).
    accepted_loss: list[AcceptedLoss] = field(default_factory=list)
    raised_offsets: dict[str, str] = field(default_factory=dict)
    # Every used snapshot's state data files were left in the store, for Spark tasks to
    # repartition there (hdfs_store_repartition.py, rocksdb_store_repartition.py): none is
    # fetched here (RocksDB state: unless its stores are not ones the tasks move).
    state_in_tasks: bool = False


def job_shape(planned: PlannedJob) -> tuple[JobShape, dict[str, NewOperatorLayout]]:
    """Sources, operators, their schemas and the partitions asked for, from Spark's planner."""
    frame = planned.writer._df
    layout = state_layout(planned.spark, frame, output_mode(planned.writer))
    operators = []
    layouts = {}
    for op in planned.operators:
        planned_state = layout.get(op.operator_id)
        stores = planned_state.stores if planned_state is not None else []
        operators.append(NewOperator(
            name=op.name, operator_id=op.operator_id, spark_operator_name=op.spark_operator_name,
            stores=tuple(NewStore(s.name, s.key_schema, s.value_schema) for s in stores),
            named_by_user=op.named_by_user, window=op.window, aggregates=op.aggregates,
        ))
        layouts[op.name] = NewOperatorLayout(
            operator_id=op.operator_id,
            spark_operator_name=(planned_state.metadata.operator_name
                                 if planned_state is not None else op.spark_operator_name),
            stores=tuple((s.name, s.num_cols_prefix_key) for s in stores) or (("default", 0),),
            v2_files=tuple(sorted(planned_state.v2_files.items()))
            if planned_state is not None else (),
        )
    sources = tuple(NewSource(s.name, s.named_by_user, s.kind, s.path,
                              tuple(sorted(s.options.items())))
                    for s in planned.sources)
    asked = planned.conf.get(SHUFFLE_PARTITIONS_CONF)
    return JobShape(sources, tuple(operators), int(asked) if asked else None), layouts


def resolve(
    store: SnapshotStore, planned: PlannedJob, resume_point: ResumePoint | None,
    from_snapshot: str | None, choice: BatchChoice | None = None,
    read: ReadResumePoint | None = None, target: Location | None = None,
) -> Resolution:
    """``read``: the resume point as ``plan`` reads it, its entries that did not parse
    reported among the plan's problems (then ``resume_point`` is ``read.point``).
    ``target``: where the checkpoint will be published; when the snapshot store can copy
    there itself, a snapshot's state files are not fetched unless they must be rewritten
    here (a partition change or a format move)."""
    shape, layouts = job_shape(planned)
    manifests: dict[str, Manifest | None] = {}
    if resume_point is None:
        assert from_snapshot is not None
        resume_point = default_resume_point(shape, from_snapshot, store.get(from_snapshot))
    for name in resume_point.snapshots():
        manifests[name] = store.get(name) if store.exists(name) else None
    plan = validate(shape, resume_point, manifests, read.broken if read else frozenset())
    if read is not None:
        plan.problems[:0] = read.problems
    _check_snapshot_formats(store, plan, manifests, planned.conf)
    used = used_snapshots(plan) if plan.ok else []
    resolution = Resolution(shape, plan, layouts=layouts)
    _resolve_positions(resolution, bool(used))
    for name in used:
        manifest = manifests[name]
        if manifest is None:
            continue
        if target is not None and store.copies_into(target) \
                and shape.partitions in (None, manifest.shuffle_partitions) \
                and planned.conf.get(CHECKPOINT_FORMAT_CONF) is None \
                and planned.conf.get(PROVIDER_CONF) in (None, manifest.state_store_provider):
            # (A migration reads the state there too: see _place_old_state.)
            directory, in_store = store.local_dir_without_state(name)
            resolution.snapshots[name] = UsedSnapshot(manifest, directory, in_store)
        elif _repartitions_in_store(target, manifest, shape, planned.conf, plan) \
                or _migrates_in_store(target, manifest, shape, planned.conf, plan) \
                or _moves_provider_in_store(target, manifest, shape, planned.conf, plan):
            directory, in_store = store.local_dir_without_state(name, every_state_file=True)
            resolution.snapshots[name] = UsedSnapshot(manifest, directory, in_store)
        else:
            resolution.snapshots[name] = UsedSnapshot(manifest, store.local_dir(name))
    resolution.state_in_tasks = bool(resolution.snapshots) and all(
        used.in_store and (
            _repartitions_in_store(target, used.manifest, shape, planned.conf, plan)
            or _moves_provider_in_store(target, used.manifest, shape, planned.conf, plan))
        for used in resolution.snapshots.values())
    providers = {s.manifest.state_store_provider for s in resolution.snapshots.values()}
    if len(providers) > 1:
        plan.problems.append(
            f"the snapshots {', '.join(used)} come from different state store providers "
            f"({', '.join(sorted(p.rsplit('.', 1)[-1] for p in providers))}); resume from "
            "snapshots of one provider")
    elif providers:
        _plan_provider_move(resolution, store, planned.conf)
    if any(row.seed_query is not None for row in plan.operators):
        plan.problems.extend(seed_problems(planned.spark, plan.operators, resolution.shape))
    if any(row.reshaped for row in plan.operators):
        plan.problems.extend(merge_sql_problems(planned.spark, plan.operators,
                                                _resumed_entries(plan, manifests),
                                                resolution.shape))
    if any(row.declared is not None for row in plan.operators):
        plan.problems.extend(declared_sql_problems(planned.spark, plan.operators,
                                                   _resumed_entries(plan, manifests),
                                                   resolution.shape))
    _number_batches(resolution, planned, choice or BatchChoice())
    counts = {s.manifest.shuffle_partitions for s in resolution.snapshots.values()}
    listed_counts = ", ".join(str(c) for c in sorted(c or 0 for c in counts))
    if len(counts) > 1:
        plan.problems.append(
            f"the snapshots {', '.join(used)} have different partition counts "
            f"({listed_counts}); create them with one spark.sql.shuffle.partitions")
    return resolution


def _repartitions_in_store(target: Location | None, manifest: Manifest, shape: JobShape,
                           conf: Mapping[str, str], plan: UpgradePlan) -> bool:
    """The start moves HDFS-provider or RocksDB state into another partition count, into
    a checkpoint in a store, with no move of format: Spark tasks do it there, reading the
    snapshot's files from the store (hdfs_store_repartition.py,
    rocksdb_store_repartition.py; RocksDB state whose stores those tasks do not move is
    still staged here, see build_new_checkpoint). A move to the other provider is made by
    the same tasks, which write the new partitions in its files; operators migrated or
    seeded are written into the new count (and provider) by their migration's tasks, which
    read the old state in the store."""
    return isinstance(target, StorePath) \
        and manifest.state_store_provider in (HDFS_BACKED.class_name, ROCKSDB.class_name) \
        and shape.partitions not in (None, manifest.shuffle_partitions) \
        and conf.get(CHECKPOINT_FORMAT_CONF) is None \
        and conf.get(PROVIDER_CONF) in (None, HDFS_BACKED.class_name, ROCKSDB.class_name)


def _migrates_in_store(target: Location | None, manifest: Manifest, shape: JobShape,
                       conf: Mapping[str, str], plan: UpgradePlan) -> bool:
    """The start migrates or seeds state and changes nothing else of it, into a checkpoint in
    a store: Spark tasks read the snapshot's state files where they are (a store that
    copies nothing itself: copied by tasks, see _place_old_state)."""
    return isinstance(target, StorePath) \
        and shape.partitions in (None, manifest.shuffle_partitions) \
        and conf.get(CHECKPOINT_FORMAT_CONF) is None \
        and conf.get(PROVIDER_CONF) in (None, manifest.state_store_provider) \
        and any(row.reshaped or row.seed_query is not None for row in plan.operators)


def _moves_provider_in_store(target: Location | None, manifest: Manifest, shape: JobShape,
                             conf: Mapping[str, str], plan: UpgradePlan) -> bool:
    """The start moves the state to the other provider and keeps its partition count, into a
    checkpoint in a store: Spark tasks convert each partition's files, reading the
    snapshot's from the store and writing the new ones there
    (upgrade/provider_move_in_store.py); operators migrated or seeded are written in the new
    provider's files by their migration's tasks, which read the old state in the store."""
    return isinstance(target, StorePath) \
        and manifest.state_store_provider in (HDFS_BACKED.class_name, ROCKSDB.class_name) \
        and conf.get(PROVIDER_CONF) in (HDFS_BACKED.class_name, ROCKSDB.class_name) \
        and conf.get(PROVIDER_CONF) != manifest.state_store_provider \
        and shape.partitions in (None, manifest.shuffle_partitions) \
        and conf.get(CHECKPOINT_FORMAT_CONF) is None


def _plan_provider_move(resolution: Resolution, store: SnapshotStore,
                        conf: Mapping[str, str]) -> None:
    """The provider the new job's state is in: the snapshots', or the one the job's own
    settings name, every resumed operator then migrated to it (upgrade/provider_move.py)."""
    name, used = next(iter(resolution.snapshots.items()))
    resolution.provider = provider_named(used.manifest.state_store_provider, f"snapshot '{name}'")
    try:
        resolution.new_provider = asked_provider(conf, resolution.provider)
    except SparkpointError as exc:
        resolution.plan.problems.append(str(exc))
        return
    source, target = resolution.provider, resolution.new_provider
    if target is source:
        return
    resumed = [row for row in resolution.plan.operators if row.action == "resume"]
    recorded = Checkpoint(store.logs_path(name)).offsets(used.manifest.batch_id).conf
    asked_format = conf.get(CHECKPOINT_FORMAT_CONF)
    resolution.plan.problems.extend(move_problems(
        source, target, recorded, {row.name: row.kind or "" for row in resumed},
        int(asked_format) if asked_format in ("1", "2") else None))
    for row in resumed:
        row.changes.append(f"state store provider: {source.label} -> {target.label} (every "
                           "key and value rewritten in the new provider's files)")


def _number_batches(resolution: Resolution, planned: PlannedJob, choice: BatchChoice) -> None:
    """The new job's first batch id, checked against what its sink already holds."""
    if not resolution.snapshots:
        if choice.asked and resolution.plan.ok:
            raise UsageError("--renumber-batches, --first-batch and --rewind-output apply to "
                             "a job that resumes state or offsets from a snapshot; this one "
                             "resumes nothing and starts at batch 0")
        return
    snapshot_batch = max(s.manifest.batch_id for s in resolution.snapshots.values())
    sink = SinkInfo(sink_format(planned.writer), file_sink_path(planned.writer))
    check = number_batches(snapshot_batch, sink, choice)
    resolution.plan.batches = check.numbering
    if check.problem is not None:
        assert sink.file_path is not None  # only a file sink's log can be ahead
        # An imported snapshot's output one batch ahead: the batch its query did not commit.
        problem = next((found for name, used in resolution.snapshots.items()
                        if used.manifest.batch_id == snapshot_batch and (
                            found := unfinished_import_problem(name, used.manifest,
                                                               sink.file_path)) is not None),
                       check.problem)
        resolution.plan.problems.append(problem)
        resolution.sink_problem = problem
    if check.warning is not None:
        resolution.plan.warnings.append(check.warning)

def _check_snapshot_formats(
    store: SnapshotStore, plan: UpgradePlan, manifests: Mapping[str, Manifest | None],
    asked_conf: Mapping[str, str],
) -> None:
    """Problems for snapshots taken by another Spark, or whose resumed state was written with
    settings sparkpoint does not decode (read from the snapshot's offsets entry)."""
    state_from = {row.origin["snapshot"] for row in plan.operators
                  if row.origin is not None and row.action == "resume"}
    spark_version = installed_pyspark_version()
    encodings: dict[str, str] = {}
    for name in used_snapshots(plan):
        manifest = manifests.get(name)
        if manifest is None:
            continue
        conf = Checkpoint(store.logs_path(name)).offsets(manifest.batch_id).conf
        plan.problems.extend(snapshot_format_problems(
            name, manifest, conf, spark_version, resumes_state=name in state_from))
        # Every used snapshot's: the new checkpoint's offsets log takes its settings from
        # one of them.
        encodings[name] = (conf.get(ENCODING_CONF) or DEFAULT_ENCODING).lower()
    plan.problems.extend(state_encoding_problems(encodings, plan.operators,
                                                 asked_conf.get(ENCODING_CONF)))


def _resolve_positions(resolution: Resolution, resumes_something: bool) -> None:
    """Resolve the start of every new source that does not start at its beginning."""
    described = {s.name: s for s in resolution.shape.sources}
    for row in resolution.plan.sources:
        if row.action != "initialize" or row.start in (None, "earliest"):
            continue
        source = described[row.name]
        where = f"sources.{row.name}"
        try:
            position = resolve_start(
                SourceDescription(source.name, source.kind, source.path, dict(source.options)),
                row.start, where)
        except SparkpointError as exc:
            resolution.plan.problems.append(str(exc))
            continue
        if position is None:
            continue
        if not resumes_something:
            resolution.plan.problems.append(
                f"{where}: start {start_label(row.start)} needs a checkpoint to hold it, and "
                "this resume point resumes nothing; start the job without one and set a "
                "startpoint, or use the source's own starting option")
            continue
        resolution.positions[row.name] = position
        row.offset = json.loads(position.offset_json)
        resolution.plan.warnings.append(f"{where}: {position.summary}")


def _empty_state_writer(
    planned: PlannedJob, provider: StateProvider, scratch: Path
) -> Callable[[Path, int], None]:
    """How an initialized operator's empty state is written, per provider: an empty
    snapshot file (HDFS-backed), a copy of an empty version Spark's provider wrote once
    (RocksDB)."""
    template: list[Path] = []

    def write_rocksdb(partition_dir: Path, version: int) -> None:
        if not template:
            template.append(write_empty_rocksdb_version(planned.spark, provider.class_name,
                                                        scratch))
        copy_file(template[0], partition_dir / f"{version}.zip")

    def write_hdfs(partition_dir: Path, version: int) -> None:
        hdfs_state.write_snapshot(partition_dir, version, {})

    writers = {ROCKSDB.class_name: write_rocksdb, HDFS_BACKED.class_name: write_hdfs}
    return writers[provider.class_name]


def _resumed_entries(plan: UpgradePlan,
                     manifests: Mapping[str, Manifest | None]) -> dict[str, OperatorEntry]:
    """The snapshot's entry of every resumed operator, by the new job's name of it."""
    found = {}
    for row in plan.operators:
        manifest = manifests.get(row.origin["snapshot"]) if row.origin is not None else None
        if row.action == "resume" and row.origin is not None and manifest is not None:
            entry = manifest.operator(row.origin["operator"])
            if entry is not None:
                found[row.name] = entry
    return found


def _asked_state_format(conf: Mapping[str, str], provider: StateProvider) -> int | None:
    """The state format the job's own settings ask for (Spark itself keeps a restarted
    query in the format of its latest commit, whatever the setting says); None: keep the
    snapshot's. ``provider``: the one the new job's state will be in."""
    value = conf.get(CHECKPOINT_FORMAT_CONF)
    if value is None:
        return None
    if value not in ("1", "2"):
        raise UsageError(f"{CHECKPOINT_FORMAT_CONF}: expected 1 or 2, found {value!r}")
    if value == "2" and not provider.has_unique_ids:
        raise UsageError(f"{CHECKPOINT_FORMAT_CONF}=2 needs the RocksDB state store; the "
                         "snapshot's state is the HDFS provider's (Spark refuses format v2 "
                         "for it)")
    return int(value)


def _repartition_rocksdb(planned: PlannedJob, staging: Path, batch: int, partitions: int,
                         wanted: int, echo: Echo) -> int:
    """RocksDB state moved to ``wanted`` partitions: its keys rehashed as Spark places them,
    else by Spark's offline repartition (which commits a batch of its own: the job continues
    after it). Returns the checkpoint's batch."""
    if repartition_rocksdb_state(staging, batch, wanted, planned.spark):
        echo(f"repartitioned state from {partitions} to {wanted} partitions "
             "(RocksDB state, keys rehashed as Spark places them)")
        return batch
    echo(f"repartitioning state from {partitions} to {wanted} partitions "
         "(Spark's offline repartition)")
    with phase("repartition: Spark's offline repartition"):
        repartition(planned.spark, staging, wanted)
    return Checkpoint(staging).require_latest_committed_batch()


def _repartition_hdfs(planned: PlannedJob, staging: Path, batch: int, partitions: int,
                      wanted: int, echo: Echo) -> int:
    """HDFS-backed state (Spark refuses to repartition it): keys moved as Spark would place
    them."""
    echo(f"repartitioning state from {partitions} to {wanted} partitions "
         "(HDFS state, keys rehashed as Spark places them)")
    repartition_hdfs_state(staging, batch, wanted, planned.spark)
    return batch


# How each provider's state moves to another partition count (checkpoint/providers.py).
_REPARTITIONS = {ROCKSDB.class_name: _repartition_rocksdb,
                 HDFS_BACKED.class_name: _repartition_hdfs}


def _store_entries(resolution: Resolution) -> dict[str, FileEntry]:
    """The manifest's entry of each snapshot file left in the store, by URL."""
    return {url: entry for used in resolution.snapshots.values()
            for entry in used.manifest.files if (url := used.in_store.get(entry.path))}


def _task_stores(planned: PlannedJob, result: AssembleResult,
                 target_url: str) -> tuple[TaskStore, TaskStore]:
    """The stores the tasks read the snapshot's files from and write the new ones to."""
    return (_task_store(planned, next(iter(result.in_store.values()))),
            _task_store(planned, target_url))


def _task_store(planned: PlannedJob, location: str) -> TaskStore:
    """How Spark tasks reach ``location``'s store (the application's s3a settings)."""
    return task_store(location, aws_environment(
        dict(planned.spark.sparkContext.getConf().getAll())))


def _begin_in_target(target: StorePath, staging: Path) -> None:
    """Before Spark tasks write into ``target``: the start's intent, then the checkpoint's
    ``metadata``, so that a start cut off once a task wrote is recognised, and rolled back,
    by the next."""
    record_intent(target, staging)
    target.io.put_files([(staging / "metadata", join(target.url, "metadata"))])


def _repartition_in_store(planned: PlannedJob, resolution: Resolution, staging: Path,
                          target: StorePath, result: AssembleResult, wanted: int,
                          echo: Echo, rocksdb: RocksDBStoreMove | None,
                          rewritten_later: frozenset[int] = frozenset()) -> AssembleResult:
    """HDFS-provider or RocksDB state (``rocksdb``: its move, planned) moved to ``wanted``
    partitions by Spark tasks that read the snapshot's files in the store and write the new
    ones into ``target``; this process moves none of its keys or values. The intent and the
    checkpoint's ``metadata`` go into the home first: a start cut off once a task wrote is
    recognised, and rolled back, by the next. ``rewritten_later``: operators a migration
    writes into the new count afterwards (it placed their old state, and the intent)."""
    assert result.batch_id is not None
    if not rewritten_later:
        _begin_in_target(target, staging)
    source, into = _task_stores(planned, result, target.url)
    partitions = result.partitions or 0
    kind = "RocksDB" if rocksdb is not None else "HDFS"
    other = resolution.new_provider is not resolution.provider
    also = f", written as {resolution.new_provider.label} versions" if other else ""
    later = "; the migrated operators' state is written into the new count by their " \
        "migration" if rewritten_later else ""
    echo(f"repartitioning state from {partitions} to {wanted} partitions ({kind} state, keys "
         f"rehashed as Spark places them{also}, in Spark tasks that read and write the "
         f"store{later})")
    if rocksdb is not None:
        left, moved = repartition_rocksdb_in_store(
            planned.spark, rocksdb, staging, result.batch_id, partitions, wanted,
            result.in_store, source, into, into_hdfs=other)
    else:
        left, moved = repartition_hdfs_in_store(
            planned.spark, staging, result.batch_id, partitions, wanted, result.in_store,
            _store_entries(resolution), source, into,
            template_for(planned.spark, resolution.new_provider), rewritten_later)
    echo(f"the tasks read {moved.read_bytes} bytes of state from the store and wrote "
         f"{moved.files} files of {moved.written_bytes} bytes into {target.url}")
    return AssembleResult(result.batch_id, wanted, left)


def _move_provider_in_store(planned: PlannedJob, resolution: Resolution, staging: Path,
                            target: StorePath, result: AssembleResult, echo: Echo,
                            rewritten_later: frozenset[int] = frozenset()) -> AssembleResult:
    """The state moved to the other provider by Spark tasks that read the snapshot's files
    in the store and write the new ones into ``target``; this process moves none of its
    keys or values. The intent and the checkpoint's ``metadata`` go into the home first: a
    start cut off once a task wrote is recognised, and rolled back, by the next.
    ``rewritten_later``: operators a migration writes in the new provider's files
    afterwards (it placed their old state, and the intent)."""
    assert result.batch_id is not None
    if not rewritten_later:
        _begin_in_target(target, staging)
    source, into = _task_stores(planned, result, target.url)
    provider, new_provider = resolution.provider, resolution.new_provider
    left, keys, moved = move_provider_in_store(
        planned.spark, staging, result.batch_id, result.in_store, _store_entries(resolution),
        provider, new_provider, source, into, rewritten_later)
    later = "; the migrated operators' state is written in its files by their migration" \
        if rewritten_later else ""
    echo(f"moved the state from the {provider.label} provider to {new_provider.label} "
         f"({keys} keys, as Spark tasks that read and write the store: they read "
         f"{moved.read_bytes} bytes and wrote {moved.files} files of {moved.written_bytes} "
         f"bytes into {target.url}{later})")
    return AssembleResult(result.batch_id, result.partitions, left)


# Where, inside the checkpoint being built in a store, a migration reads the old state from
# (removed before the checkpoint is published; a start cut off before is rolled back whole).
_OLD_STATE = ".sparkpoint-old-state"


def _place_old_state(planned: PlannedJob, resolution: Resolution, staging: Path,
                     target: StorePath, result: AssembleResult) -> InStore:
    """Prepare a migration in the store: the start's intent and its checkpoint's
    ``metadata`` into the home (a start cut off from now on is rolled back by the next);
    for a migration of resumed state, the checkpoint as assembled placed inside the target
    (its files built here uploaded, the snapshot's state files copied by the store or by
    Spark tasks), where Spark's state reader reads it from any executor."""
    _begin_in_target(target, staging)
    read_from = join(target.url, _OLD_STATE)
    migrated = tuple(f"state/{row.operator_id}/" for row in resolution.plan.operators
                     if row.action == "resume" and row.reshaped)
    if migrated:
        place_checkpoint(planned.spark, staging, StorePath(target.io, read_from),
                         {rel: url for rel, url in result.in_store.items()
                          if rel.startswith(migrated)},
                         _store_entries(resolution), _task_store(planned, target.url))
    return InStore(spark_url(read_from), spark_url(target.url))


def _after_store_migration(planned: PlannedJob, resolution: Resolution, target: StorePath,
                           result: AssembleResult, migration: InStore) -> AssembleResult:
    """The old state's copy removed; of the snapshot's files still to be copied into the
    checkpoint, those of the partitions the migration wrote dropped (and the others copied
    now by Spark tasks, where the store copies nothing itself)."""
    remove_tree(target / _OLD_STATE)
    rewritten = tuple(f"{directory}/" for directory in migration.rewritten)
    left = {rel: url for rel, url in result.in_store.items() if not rel.startswith(rewritten)}
    if not target.io.capabilities.server_side_copy:
        copy_in_tasks(planned.spark, sorted((url, join(target.url, rel))
                                            for rel, url in left.items()),
                      _store_entries(resolution), _task_store(planned, target.url))
        left = {}
    return AssembleResult(result.batch_id, result.partitions, left)


def upload_checkpoint(staging: Path, target: StorePath,
                      in_store: Mapping[str, str] | None = None,
                      expected_sha256: Mapping[str, str] | None = None) -> None:
    """Publish a checkpoint built here in a store: its ``metadata`` (the query id the intent
    names) first, so that whatever part a cut-off upload leaves is recognised as this
    start's and rolled back by the next; then every other file, several at once, and the
    files ``in_store`` (path in the checkpoint -> URL in the same store) copied there by
    the store, each checked against the SHA-256 the snapshot recorded (``expected_sha256``,
    by URL) where it has one."""
    files = sorted(p for p in walk_files(staging) if p.is_file())
    first = [p for p in files if p == staging / "metadata"]
    rest = [p for p in files if p != staging / "metadata"]
    for batch in (first, rest):
        target.io.put_files([(p, join(target.url, p.relative_to(staging).as_posix()))
                             for p in batch])
    crash_point("restore.files_uploaded")
    copies = sorted((url, join(target.url, rel)) for rel, url in (in_store or {}).items())
    copy_checked(target.io, copies, expected_sha256 or {})


def build_new_checkpoint(
    planned: PlannedJob, resolution: Resolution, target: Location, echo: Echo,
    publish: bool = True, spark_location: str | None = None,
) -> AssembleResult:
    """Assemble, repartition if asked, let Spark check, then publish at ``target``.

    With ``publish=False`` (a dry run) everything is done in scratch space and removed.
    Spark's refusal is added to the plan's problems and raised as a ValidationError.
    """
    plan = resolution.plan
    if not plan.ok:
        raise ValidationError("the resume point has problems:\n  " + "\n  ".join(plan.problems))
    if target.exists() and any(target.iterdir()):
        raise NameTakenError(f"{target}: a checkpoint already exists; choose a new job name")
    provider, new_provider = resolution.provider, resolution.new_provider
    state_format = _asked_state_format(planned.conf, new_provider)
    snapshots_v2 = any(used.checkpoint.commit(used.manifest.batch_id).state_unique_ids
                       for used in resolution.snapshots.values())
    if new_provider is not provider and state_format is None and snapshots_v2:
        # The state is moved in format v1 (the HDFS provider has no other; a move to
        # RocksDB comes from the HDFS provider's v1): a RocksDB snapshot in v2 renamed first.
        state_format = 1
    reshaped = any(row.reshaped for row in plan.operators)
    seeded = any(row.seed_query is not None for row in plan.operators)
    # Migrations read and write state under format v1 names; a start in format v2 (asked,
    # or the snapshots') is given v2 names after them.
    back_to_v2 = (reshaped or seeded) and (state_format == 2 or (state_format is None
                                                                 and snapshots_v2))
    if back_to_v2:
        state_format = 1
    if publish and isinstance(target, Path):
        # Beside the target, so that publishing is one rename and an interrupted start's
        # debris is found (and rolled back) by the next one.
        target.parent.mkdir(parents=True, exist_ok=True)
        prefix = staging_prefix(target)
        scratch = Path(tempfile.mkdtemp(prefix=f"{prefix}scratch.", suffix=".tmp",
                                        dir=target.parent))
        staging = target.parent / f"{prefix}{uuid.uuid4().hex[:8]}.tmp"
    else:
        scratch = Path(tempfile.mkdtemp(prefix=TEMP_BUILD_PREFIX))
        staging = scratch / f".{target.name}.tmp"
    batches = plan.batches
    # Spark tasks wrote into the target before it is published (a repartition in the
    # store): a failure from then on takes the start back out of the home.
    started_in_target = False
    try:
        result = assemble_checkpoint(staging, plan, resolution.snapshots, resolution.layouts,
                                     _empty_state_writer(planned, provider, scratch / "empty"),
                                     resolution.positions,
                                     batches.checkpoint_batch if batches is not None else None,
                                     state_format, resolution.raised_offsets)
        if result.batch_id is None:
            return result
        # transformWithState's schema paths name the snapshot's job's checkpoint, which may be
        # gone: Spark's repartition and restart check read them from the staging copy (they
        # are pointed at the final place when it is published).
        relocate_schema_paths(staging)
        if publish:
            crash_point("restore.assembled")
        wanted = resolution.shape.partitions
        moved = wanted is not None and result.partitions is not None \
            and wanted != result.partitions
        rewritten = moved or new_provider is not provider or reshaped or seeded
        # Migrations and seeds in the store (the old state read there, the new written
        # there by Spark tasks): no disk shared with the executors, no state bytes through
        # this process. With a partition change or a provider move, the migrated
        # operators' tasks write the new count in the new provider's files and the
        # repartition's or the provider move's tasks move the others; not a reshaped
        # join's (its migration rewrites only the stores whose values changed, the others
        # would be left as they were: staged here, as before).
        other_provider = new_provider is not provider
        join_reshaped = any(row.kind == "stream_stream_join" and row.action == "resume"
                            and row.reshaped for row in plan.operators)
        can_migrate_in_store = (reshaped or seeded) and publish \
            and not ((moved or other_provider) and join_reshaped) \
            and (not other_provider or bool(result.in_store)) \
            and isinstance(target, StorePath) and new_provider in (HDFS_BACKED, ROCKSDB) \
            and not back_to_v2 and provider in (HDFS_BACKED, ROCKSDB) \
            and result.batch_id is not None \
            and writes_in_store(staging, result.batch_id, plan.operators, new_provider)
        # The operators the migration's tasks write (none unless they run in the store):
        # the repartition's or the provider move's tasks leave them alone.
        rewritten_later = frozenset(
            row.operator_id for row in plan.operators if row.operator_id is not None and (
                (row.action == "resume" and row.reshaped) or row.seed_query is not None)
        ) if can_migrate_in_store else frozenset()
        in_tasks = resolution.state_in_tasks and publish and isinstance(target, StorePath) \
            and moved and provider in (HDFS_BACKED, ROCKSDB) \
            and new_provider in (HDFS_BACKED, ROCKSDB) \
            and (can_migrate_in_store or not (reshaped or seeded or back_to_v2)) \
            and bool(result.in_store)
        rocksdb_move = None
        if in_tasks and provider is ROCKSDB:
            # Only stores the tasks can move (else staged here, as before).
            assert isinstance(target, StorePath) and result.batch_id is not None
            rocksdb_move = plan_rocksdb_in_store(
                planned.spark, staging, result.batch_id, result.partitions or 0,
                result.in_store, _store_entries(resolution),
                _task_stores(planned, result, target.url)[0], rewritten_later)
            in_tasks = rocksdb_move is not None
        # A move to the other provider in the store (the snapshot in format v1: one in v2
        # was fetched here to be renamed to v1).
        provider_in_store = resolution.state_in_tasks and publish \
            and isinstance(target, StorePath) and other_provider and not moved \
            and (can_migrate_in_store or not (reshaped or seeded or back_to_v2)) \
            and bool(result.in_store)
        if provider_in_store:
            in_tasks = True
        migrating_in_store = can_migrate_in_store and (
            in_tasks if moved or other_provider else True)
        in_store_migration = None
        if migrating_in_store:
            assert isinstance(target, StorePath) and result.batch_id is not None
            started_in_target = True
            in_store_migration = _place_old_state(planned, resolution, staging, target,
                                                  result)
            crash_point("restore.old_state_placed")
            in_tasks = True
        if rewritten and not in_tasks:
            # These ways of moving the state run Spark tasks on the staging copy: asked
            # before the state is fetched into it.
            require_driver_disk(planned.spark, staging)
        if result.in_store and not in_tasks and (
                rewritten or not isinstance(target, StorePath) or not publish):
            # The state is read here (a repartition), or it is not published into the store.
            fetch_into_place({staging / rel: url for rel, url in result.in_store.items()})
            result = AssembleResult(result.batch_id, result.partitions)
        # The repartition's tasks in the store wrote the new provider's files.
        provider_moved = False
        if moved and wanted is not None and result.batch_id is not None:
            if in_tasks:
                assert isinstance(target, StorePath)
                started_in_target = True
                result = _repartition_in_store(planned, resolution, staging, target, result,
                                               wanted, echo, rocksdb_move, rewritten_later)
                provider_moved = new_provider is not provider
            else:
                move = _REPARTITIONS[provider.class_name]
                batch = move(planned, staging, result.batch_id or 0, result.partitions or 0,
                             wanted, echo)
                result = AssembleResult(batch, wanted)
            if publish:
                crash_point("restore.repartitioned")
        if provider_in_store and result.batch_id is not None:
            assert isinstance(target, StorePath)
            started_in_target = True
            result = _move_provider_in_store(planned, resolution, staging, target, result,
                                             echo, rewritten_later)
            if publish:
                crash_point("restore.provider_moved")
        elif provider_moved:
            if publish:
                crash_point("restore.provider_moved")
        elif new_provider is not provider and result.batch_id is not None:
            keys = move_state_provider(staging, result.batch_id, provider, new_provider,
                                       planned.spark)
            echo(f"moved the state from the {provider.label} provider to {new_provider.label} "
                 f"({keys} keys, as Spark tasks)")
            if publish:
                crash_point("restore.provider_moved")
        if reshaped and result.batch_id is not None:
            keys = migrate_operators(planned.spark, staging, result.batch_id, plan.operators,
                                     resolution.shape, new_provider,
                                     _resumed_entries(plan, {name: used.manifest for name, used
                                                             in resolution.snapshots.items()}),
                                     in_store_migration)
            echo(f"migrated the state of the operators whose state changed ({keys} keys, as "
                 "Spark tasks" + (" that read and write the store)" if in_store_migration
                                  else ")"))
        if seeded and result.batch_id is not None:
            keys = seed_operators(planned.spark, staging, result.batch_id, plan.operators,
                                  resolution.shape, new_provider, in_store_migration)
            names = ", ".join(row.name for row in plan.operators if row.seed_query)
            echo(f"seeded the state of {names} from its query ({keys} keys, as Spark tasks)")
        if in_store_migration is not None:
            assert isinstance(target, StorePath)
            result = _after_store_migration(planned, resolution, target, result,
                                            in_store_migration)
        if back_to_v2 and result.batch_id is not None:
            to_format_v2(staging, result.batch_id)
        if (reshaped or seeded) and publish:
            crash_point("restore.state_migrated")
        verdict = restart_problem(planned.spark, planned.writer._df,
                                  output_mode(planned.writer), staging)
        if verdict is not None:
            plan.problems.append(f"Spark refuses the assembled checkpoint: {verdict}")
            raise ValidationError(f"Spark refuses to restart the job from the assembled "
                                  f"checkpoint: {verdict}")
        if publish:
            # transformWithState's schema paths must name where the checkpoint will live.
            # ``spark_location``: the URL Spark will be given when the checkpoint is built
            # here for a home in a store (it reads the schemas there, from any machine).
            relocate_schema_paths(staging, spark_location or str(target))
            if isinstance(target, Path):
                fsync_dir(staging)
                record_intent(target, staging)
                if target.exists():
                    target.rmdir()
                os.rename(staging, target)
                fsync_dir(target.parent)
            else:
                record_intent(target, staging)
                try:
                    upload_checkpoint(staging, target, result.in_store, {
                        url: entry.sha256 for snap in resolution.snapshots.values()
                        for entry in snap.manifest.files
                        if entry.sha256 is not None and (url := snap.in_store.get(entry.path))})
                except SnapshotDamagedError:
                    # Refused: nothing of this start stays in the home.
                    if not started_in_target:  # else taken back below
                        remove_tree(target)
                        clear_intent(target)
                    raise
            crash_point("restore.published")
        return result
    except Exception:
        if started_in_target:
            remove_tree(target)
            clear_intent(target)
        raise
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
