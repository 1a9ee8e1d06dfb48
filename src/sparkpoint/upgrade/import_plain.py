"""``snapshot import``: a checkpoint that plain Spark wrote adopted as a snapshot, its sources
and operators named after those of the sparkpoint version of the same query. The checkpoint
is only read; on any mismatch nothing is created (``upgrade/adopt.py`` says what matches)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from sparkpoint.checkpoint.layout import Checkpoint
from sparkpoint.errors import NameTakenError, SourceDataLostError, UsageError, ValidationError
from sparkpoint.losses import ACCEPT_OPTION, AcceptedLoss
from sparkpoint.runtime.registry import now_iso
from sparkpoint.runtime.runner import PlannedJob, plan_job
from sparkpoint.snapshot.export import JobInfo
from sparkpoint.snapshot.manifest import Manifest
from sparkpoint.snapshot.store import open_snapshot_store
from sparkpoint.sources.input_gaps import check
from sparkpoint.spark.version import installed_pyspark_version, require_supported_pyspark
from sparkpoint.storage.home import Home
from sparkpoint.upgrade.adopt import adopt, import_warning, sink_ahead
from sparkpoint.upgrade.inputs_held import import_sources
from sparkpoint.upgrade.restore import job_shape

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

Echo = Callable[[str], None]


def import_plain_checkpoint(
    home: Home, checkpoint_dir: Path, snapshot: str, job_file: Path,
    params: Mapping[str, str], conf: Mapping[str, str], master: str | None,
    spark: SparkSession | None, echo: Echo, accept_data_loss: bool = False,
) -> Manifest:
    """The snapshot ``snapshot`` of the plain checkpoint in ``checkpoint_dir``, checked against
    ``job_file`` planned with ``params`` and ``conf``, and against what its sources still
    hold (a gap refuses the import unless ``accept_data_loss``; then it is recorded in the
    snapshot's manifest)."""
    store = open_snapshot_store(home)
    if store.exists(snapshot):
        raise NameTakenError(
            f"snapshot '{snapshot}' already exists; choose another name or delete it first")
    checkpoint = Checkpoint(checkpoint_dir.absolute())
    if not checkpoint.exists():
        raise UsageError(
            f"{checkpoint.root}: expected a Spark streaming checkpoint (a directory with "
            "'metadata', 'offsets/', 'commits/'), found none; give the checkpointLocation "
            "of the query")
    checkpoint.require_latest_committed_batch()
    if spark is None:  # sparkpoint starts Spark itself: an untested pyspark is refused first
        require_supported_pyspark()
    planned = plan_job("import", job_file.absolute(), dict(params), dict(conf), master, spark,
                       log_dir=home.logs_dir, command="snapshot import")
    try:
        shape, _layouts = job_shape(planned)
    finally:
        planned.release()
    adoption = adopt(checkpoint, shape)
    if adoption.problems:
        raise ValidationError(
            f"the checkpoint does not match {job_file.name} ({len(adoption.problems)} "
            "problem(s)); nothing was created:\n  " + "\n  ".join(adoption.problems),
            problems=adoption.problems)
    for note in adoption.notes:
        echo(f"warning: {note}")
    ahead = sink_ahead(checkpoint, planned.sink.location if planned.sink is not None else None)
    if ahead is not None:
        echo(f"warning: {import_warning(ahead, checkpoint, snapshot)}")
    accepted = _prove_sources(checkpoint, snapshot, adoption.source_names, planned,
                              accept_data_loss, echo)
    info = JobInfo(job=f"import:{checkpoint.root}", operator_names=adoption.operator_names,
                   operator_windows=adoption.operator_windows,
                   operator_aggregates={op.operator_id: op.aggregates for op in shape.operators},
                   job_file=str(job_file.absolute()),
                   params=dict(params), spark_version=installed_pyspark_version(),
                   source_names=adoption.source_names, accepted_loss=tuple(accepted))
    echo(f"importing {checkpoint.root} as snapshot '{snapshot}': sources "
         + ", ".join(f"{k} -> {v}" for k, v in adoption.source_names.items())
         + "; operators " + ", ".join(f"{k} -> {v}" for k, v in adoption.operator_names.items()))
    return store.create(snapshot, checkpoint, info, progress=echo)


def _prove_sources(checkpoint: Checkpoint, snapshot: str, names: Mapping[str, str],
                   planned: PlannedJob, accept: bool, echo: Echo) -> list[AcceptedLoss]:
    """Whether the checkpoint's sources still hold what a start from its committed batch
    reads: Kafka offsets on the broker, and the input files its file sources' logs name
    for batches planned and not committed (a query stopped mid-batch). A gap refuses the
    import, nothing created, unless accepted."""
    batch = checkpoint.require_latest_committed_batch()
    found = check(import_sources(checkpoint, batch, names, planned.sources))
    for warning in found.warnings:
        echo(f"warning: {warning}")
    if found.ok:
        return []
    if not accept:
        raise SourceDataLostError(
            found.refusal(f"snapshot '{snapshot}' not imported, nothing was created",
                          f"to import it anyway, recording the loss in the snapshot, run "
                          f"again with {ACCEPT_OPTION} (a start from the snapshot checks "
                          "its sources again)"),
            gaps=[gap.to_dict() for gap in found.gaps])
    for line in found.source_lines():
        echo(f"warning: accepted ({ACCEPT_OPTION}): {line}")
    return found.accepted(now_iso(), "snapshot import")
