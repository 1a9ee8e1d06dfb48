"""``snapshot import``: a checkpoint that plain Spark wrote adopted as a snapshot, its sources
and operators named after those of the sparkpoint version of the same query. The checkpoint
is only read; on any mismatch nothing is created (``upgrade/adopt.py`` says what matches).

A checkpoint on S3 or HDFS is read where it is, through the store layer, as a job's
checkpoint in a home there is: its logs and metadata are read here, and its state files go
the way a snapshot of such a job's state goes. A snapshot store in the same S3 store copies
them inside the store (CopyObject), and the rows the manifest records are counted by
Spark's state reader in its tasks; any other snapshot store (local disk, WebHDFS, which has
no copy request) holds its files itself, so they are fetched, and the import says so."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from sparkpoint.checkpoint.layout import Checkpoint
from sparkpoint.checkpoint.providers import HDFS_BACKED
from sparkpoint.errors import (
    NameTakenError,
    PreconditionError,
    UsageError,
    ValidationError,
)
from sparkpoint.losses import ACCEPT_OPTION, AcceptedLoss
from sparkpoint.runtime.registry import now_iso
from sparkpoint.runtime.runner import PlannedJob, plan_job
from sparkpoint.snapshot.export import ROWS_FROM_PROGRESS_KINDS, JobInfo
from sparkpoint.snapshot.manifest import Manifest, operator_kind
from sparkpoint.snapshot.store import open_snapshot_store
from sparkpoint.sources.input_gaps import check
from sparkpoint.spark.s3a import s3a_conf
from sparkpoint.spark.state_rows import count_state_rows
from sparkpoint.spark.state_windows import stored_windows_in_spark
from sparkpoint.spark.version import installed_pyspark_version, require_supported_pyspark
from sparkpoint.storage.fileio import is_local, spark_url
from sparkpoint.storage.home import Home
from sparkpoint.storage.location import StorePath, location_at
from sparkpoint.storage.paths import check_location
from sparkpoint.upgrade.adopt import (
    IMPORTED_JOB_PREFIX,
    WindowReader,
    adopt,
    import_warning,
    sink_ahead,
)
from sparkpoint.upgrade.inputs_held import import_sources
from sparkpoint.upgrade.restore import job_shape

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

Echo = Callable[[str], None]


def import_plain_checkpoint(
    home: Home, checkpoint_at: Path | str, snapshot: str, job_file: Path,
    params: Mapping[str, str], conf: Mapping[str, str], master: str | None,
    spark: SparkSession | None, echo: Echo, accept_data_loss: bool = False,
) -> Manifest:
    """The snapshot ``snapshot`` of the plain checkpoint at ``checkpoint_at`` (a local
    directory, or a URL: ``s3a://``, ``hdfs://``), checked against ``job_file`` planned with
    ``params`` and ``conf``, and against what its sources still hold (a gap refuses the
    import unless ``accept_data_loss``; then it is recorded in the snapshot's manifest)."""
    store = open_snapshot_store(home)
    if store.exists(snapshot):
        raise NameTakenError(
            f"snapshot '{snapshot}' already exists; choose another name or delete it first")
    checkpoint = _plain_checkpoint(checkpoint_at)
    batch = checkpoint.require_latest_committed_batch()
    in_store = isinstance(checkpoint.root, StorePath) and store.copies_into(checkpoint.root)
    if isinstance(checkpoint.root, StorePath) and not in_store:
        echo(f"warning: the snapshot store {store.location} cannot copy files inside the "
             f"store of {checkpoint.root}: its state files are fetched through this "
             "process; a snapshot store in the same S3 store (--snapshots s3://...) copies "
             "them there instead")
    if spark is None:  # sparkpoint starts Spark itself: an untested pyspark is refused first
        require_supported_pyspark()
    # Spark reads a checkpoint on S3 through s3a, with the settings a home on S3 gets.
    session_conf = {**s3a_conf(str(checkpoint.root), conf), **conf}
    planned = plan_job("import", job_file.absolute(), dict(params), session_conf, master,
                       spark, log_dir=home.logs_dir, command="snapshot import")
    try:
        shape, _layouts = job_shape(planned)
        # State files the store copies are not read here, for their windows either.
        adoption = adopt(checkpoint, shape, _windows_in_spark(planned, checkpoint)
                         if in_store else None)
        if adoption.problems:
            raise ValidationError(
                f"the checkpoint does not match {job_file.name} ({len(adoption.problems)} "
                "problem(s)); nothing was created:\n  " + "\n  ".join(adoption.problems),
                problems=adoption.problems)
        for note in adoption.notes:
            echo(f"warning: {note}")
        ahead = sink_ahead(checkpoint,
                           planned.sink.location if planned.sink is not None else None)
        if ahead is not None:
            echo(f"warning: {import_warning(ahead, checkpoint, snapshot)}")
        accepted = _prove_sources(checkpoint, snapshot, adoption.source_names, planned,
                                  accept_data_loss, echo)
        counted = _rows_counted_by_spark(planned, checkpoint, batch) if in_store else {}
    finally:
        planned.release()
    info = JobInfo(job=f"{IMPORTED_JOB_PREFIX}{checkpoint.root}",
                   operator_names=adoption.operator_names,
                   operator_windows=adoption.operator_windows,
                   operator_aggregates={op.operator_id: op.aggregates for op in shape.operators},
                   job_file=str(job_file.absolute()),
                   params=dict(params), spark_version=installed_pyspark_version(),
                   source_names=adoption.source_names, accepted_loss=tuple(accepted),
                   counted_rows=counted)
    echo(f"importing {checkpoint.root} as snapshot '{snapshot}': sources "
         + ", ".join(f"{k} -> {v}" for k, v in adoption.source_names.items())
         + "; operators " + ", ".join(f"{k} -> {v}" for k, v in adoption.operator_names.items()))
    return store.create(snapshot, checkpoint, info, progress=echo)


def _plain_checkpoint(checkpoint_at: Path | str) -> Checkpoint:
    """The checkpoint the user named, where it is: a URL is read through its store
    (nothing is fetched ahead), and one that names no checkpoint is refused in one line."""
    text = str(checkpoint_at)
    if not is_local(text):
        check_location(text, "checkpoint")
    checkpoint = Checkpoint(location_at(text))
    try:
        found = checkpoint.exists()
    except PermissionError as exc:
        raise PreconditionError(
            f"{checkpoint.root}: expected to read a Spark streaming checkpoint, found access "
            f"denied ({exc}); give credentials that may read it (for S3: AWS_ACCESS_KEY_ID "
            "and AWS_SECRET_ACCESS_KEY)") from exc
    if not found:
        raise UsageError(
            f"{checkpoint.root}: expected a Spark streaming checkpoint (a directory with "
            "'metadata', 'offsets/', 'commits/'), found none; give the checkpointLocation "
            "of the query")
    return checkpoint


def _windows_in_spark(planned: PlannedJob, checkpoint: Checkpoint) -> WindowReader:
    url = spark_url(str(checkpoint.root))
    return lambda operator, batch: stored_windows_in_spark(planned.spark, url, batch, operator)


def _rows_counted_by_spark(planned: PlannedJob, checkpoint: Checkpoint,
                           batch: int) -> dict[int, int]:
    """The rows of each single-store operator of an HDFS-provider checkpoint whose state
    files the snapshot store copies inside the store: counted by Spark's state reader in
    its tasks, so that no state file is read here. (RocksDB's rows are in the small
    metadata file of each version, which is read anyway; other kinds are counted from
    their files as before.)"""
    if checkpoint.state_provider(batch).class_name != HDFS_BACKED.class_name:
        return {}
    wanted = [operator.operator_id for operator in checkpoint.operators(batch)
              if operator_kind(operator.operator_name) in ROWS_FROM_PROGRESS_KINDS]
    return count_state_rows(planned.spark, spark_url(str(checkpoint.root)), batch, wanted)


def _prove_sources(checkpoint: Checkpoint, snapshot: str, names: Mapping[str, str],
                   planned: PlannedJob, accept: bool, echo: Echo) -> list[AcceptedLoss]:
    """Whether the checkpoint's sources still hold what a start from its committed batch
    reads: Kafka offsets on the broker, and the input files its file sources' logs name
    for batches planned and not committed (a query stopped mid-batch). A gap refuses the
    import, nothing created, unless accepted."""
    batch = checkpoint.require_latest_committed_batch()
    found = check(import_sources(checkpoint, batch, names, planned.sources))
    if not found.refuse_unless_accepted(
            accept, f"snapshot '{snapshot}' not imported, nothing was created",
            f"to import it anyway, recording the loss in the snapshot, run again with "
            f"{ACCEPT_OPTION} (a start from the snapshot checks its sources again)", echo):
        return []
    for line in found.source_lines():
        echo(f"warning: accepted ({ACCEPT_OPTION}): {line}")
    return found.accepted(now_iso(), "snapshot import")
