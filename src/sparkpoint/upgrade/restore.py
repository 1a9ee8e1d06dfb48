"""Resume a built job from snapshots: resolve its resume point, validate it, and build the
new checkpoint (assemble, repartition if asked, let Spark check it, publish).

The checkpoint is assembled in a staging directory beside the target and published by one
rename only after Spark's own restart checks pass on it; snapshots are only read.
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
from sparkpoint.checkpoint.layout import SHUFFLE_PARTITIONS_CONF, Checkpoint
from sparkpoint.checkpoint.rocksdb_state import ROCKSDB_PROVIDER
from sparkpoint.checkpoint.schema_paths import relocate_schema_paths
from sparkpoint.errors import NameTakenError, SparkpointError, ValidationError
from sparkpoint.snapshot.manifest import Manifest
from sparkpoint.snapshot.store import SnapshotStore
from sparkpoint.sources.positions import (
    ResolvedPosition,
    SourceDescription,
    resolve_start,
    start_label,
)
from sparkpoint.spark.inspect import (
    PlannedSource,
    output_mode,
    repartition,
    restart_problem,
    state_layout,
    write_empty_rocksdb_version,
)
from sparkpoint.spark.plan import PlannedOperator
from sparkpoint.storage.local import copy_file, fsync_dir
from sparkpoint.upgrade.assemble import (
    AssembleResult,
    NewOperatorLayout,
    UsedSnapshot,
    assemble_checkpoint,
    used_snapshots,
)
from sparkpoint.upgrade.hdfs_repartition import repartition_hdfs_state
from sparkpoint.upgrade.resume_point import ResumePoint
from sparkpoint.upgrade.validate import (
    JobShape,
    NewOperator,
    NewSource,
    NewStore,
    UpgradePlan,
    default_resume_point,
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
            named_by_user=op.named_by_user, window=op.window,
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
    from_snapshot: str | None,
) -> Resolution:
    shape, layouts = job_shape(planned)
    manifests: dict[str, Manifest | None] = {}
    if resume_point is None:
        assert from_snapshot is not None
        resume_point = default_resume_point(shape, from_snapshot, store.get(from_snapshot))
    for name in resume_point.snapshots():
        manifests[name] = store.get(name) if store.exists(name) else None
    plan = validate(shape, resume_point, manifests)
    used = used_snapshots(plan) if plan.ok else []
    resolution = Resolution(shape, plan, layouts=layouts)
    _resolve_positions(resolution, bool(used))
    for name in used:
        manifest = manifests[name]
        if manifest is None:
            continue
        resolution.snapshots[name] = UsedSnapshot(manifest, store.path(name))
    providers = {s.manifest.state_store_provider for s in resolution.snapshots.values()}
    if len(providers) > 1:
        plan.problems.append(
            f"the snapshots {', '.join(used)} come from different state store providers "
            f"({', '.join(sorted(p.rsplit('.', 1)[-1] for p in providers))}); resume from "
            "snapshots of one provider")
    counts = {s.manifest.shuffle_partitions for s in resolution.snapshots.values()}
    listed_counts = ", ".join(str(c) for c in sorted(c or 0 for c in counts))
    if len(counts) > 1:
        plan.problems.append(
            f"the snapshots {', '.join(used)} have different partition counts "
            f"({listed_counts}); create them with one spark.sql.shuffle.partitions")
    return resolution


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
    planned: PlannedJob, provider: str, scratch: Path
) -> Callable[[Path, int], None]:
    template: list[Path] = []

    def write(partition_dir: Path, version: int) -> None:
        if provider != ROCKSDB_PROVIDER:
            hdfs_state.write_snapshot(partition_dir, version, {})
            return
        if not template:
            template.append(write_empty_rocksdb_version(planned.spark, provider, scratch))
        copy_file(template[0], partition_dir / f"{version}.zip")

    return write


def build_new_checkpoint(
    planned: PlannedJob, resolution: Resolution, target: Path, echo: Echo,
    publish: bool = True,
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
    provider = next((s.manifest.state_store_provider for s in resolution.snapshots.values()),
                    ROCKSDB_PROVIDER)
    scratch = Path(tempfile.mkdtemp(prefix="sparkpoint-build-"))
    parent = target.parent if publish else scratch
    parent.mkdir(parents=True, exist_ok=True)
    staging = parent / f".{target.name}.{uuid.uuid4().hex[:8]}.tmp"
    try:
        result = assemble_checkpoint(staging, plan, resolution.snapshots, resolution.layouts,
                                     _empty_state_writer(planned, provider, scratch / "empty"),
                                     resolution.positions)
        if result.batch_id is None:
            return result
        wanted = resolution.shape.partitions
        if wanted is not None and result.partitions is not None and wanted != result.partitions:
            if provider == ROCKSDB_PROVIDER:
                echo(f"repartitioning state from {result.partitions} to {wanted} partitions "
                     "(Spark's offline repartition)")
                repartition(planned.spark, staging, wanted)
                # Spark's repartition commits a batch of its own: the job continues after it.
                batch = Checkpoint(staging).require_latest_committed_batch()
            else:
                # Spark refuses to repartition HDFS state; keys are moved as it would place them.
                echo(f"repartitioning state from {result.partitions} to {wanted} partitions "
                     "(HDFS state, keys rehashed as Spark places them)")
                repartition_hdfs_state(staging, result.batch_id, wanted)
                batch = result.batch_id
            result = AssembleResult(batch, wanted)
        verdict = restart_problem(planned.spark, planned.writer._df,
                                  output_mode(planned.writer), staging)
        if verdict is not None:
            plan.problems.append(f"Spark refuses the assembled checkpoint: {verdict}")
            raise ValidationError(f"Spark refuses to restart the job from the assembled "
                                  f"checkpoint: {verdict}")
        if publish:
            # transformWithState's schema paths must name where the checkpoint will live.
            relocate_schema_paths(staging, target)
            fsync_dir(staging)
            if target.exists():
                target.rmdir()
            os.rename(staging, target)
        return result
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
