"""``snapshot prune`` of a snapshot in a store (S3, HDFS), with Spark tasks only: executors
that share no disk with the driver, and no state bytes through the driver.

1. The snapshot is placed as a checkpoint under a scratch prefix of the snapshot store
   (snapshot/placement.py: the logs and metadata uploaded, the state files copied inside the
   store), where Spark's state reader reads it from any executor. Spark counts, per
   partition, the operator's keys and those the condition selects (spark/state_prune.py).
2. The new snapshot's checkpoint is laid out beside it: the same files, but the state files
   of the partitions holding matches.
3. One Spark job writes those partitions: Spark's state reader gives their keys and values
   as stored, Spark drops the matching ones, and sparkpoint's ``StateVersionWriter`` tasks
   write each partition's version N+1 as one self-contained file set (HDFS-backed: one
   snapshot file; RocksDB: one SST and its zip, with the settings of Spark's provider) and
   upload it into the new checkpoint. Each partition's kept keys are checked against Spark's
   counts. A partition left with no key gets an empty version from the driver.
4. The snapshot store exports the new checkpoint as NEW_SNAP (copying its files inside the
   store where it can, manifest last); the scratch prefix is removed.

A prune cut off leaves its scratch prefix: the next prune on the same machine removes it
when its process is gone, any prune once it is older than a snapshot's registration lasts.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from sparkpoint.checkpoint.layout import Checkpoint
from sparkpoint.checkpoint.providers import HDFS_BACKED, ROCKSDB
from sparkpoint.crash_points import crash_point, steps
from sparkpoint.errors import CheckpointFormatError
from sparkpoint.progress import phase
from sparkpoint.snapshot.export import JobInfo
from sparkpoint.snapshot.manifest import Manifest, OperatorEntry
from sparkpoint.snapshot.object_store import LEASE_EXPIRY, ObjectSnapshotStore
from sparkpoint.snapshot.placement import place_checkpoint
from sparkpoint.spark import own_jar
from sparkpoint.spark.rocksdb_template import (
    RocksDbTemplate,
    rocksdb_template,
    write_empty_version,
)
from sparkpoint.spark.s3a import aws_environment
from sparkpoint.spark.state_prune import check_condition, matching_keys
from sparkpoint.spark.state_reshape import STATE_VERSION_WRITER, VersionFiles, write_in_jvm
from sparkpoint.storage.fileio import join, scheme_of, spark_url
from sparkpoint.storage.location import StorePath, remove_tree
from sparkpoint.storage.store_scratch import clean_abandoned, new_scratch
from sparkpoint.storage.task_store import task_store

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

# Columns of the rewritten rows, named so that no key column of a job collides with them.
_KEY = "__sparkpoint_key"
_VALUE = "__sparkpoint_value"
_PARTITION = "__sparkpoint_partition"
_CHECKPOINT = "checkpoint/"
_S3A = "org.apache.hadoop.fs.s3a.S3AFileSystem"


def local_checkpoint(store: ObjectSnapshotStore, name: str) -> tuple[Path, dict[str, str]]:
    """The snapshot's checkpoint here without its state files (path in the snapshot -> URL
    of each): left in the store for the tasks."""
    local, in_store = store.local_dir_without_state(
        name, every_state_file=not store.io.capabilities.server_side_copy)
    return local / _CHECKPOINT.rstrip("/"), in_store


def prunes_in_store(store: object, manifest: Manifest, spark: SparkSession,
                    operator_id: int) -> bool:
    """Whether this prune runs in the store: a snapshot store in S3 or HDFS, the HDFS-backed
    or RocksDB provider, the operator's state in checkpoint format v1, and a session that
    loads sparkpoint's jar (whose tasks write the versions)."""
    if not isinstance(store, ObjectSnapshotStore) \
            or manifest.state_store_provider not in (HDFS_BACKED.class_name,
                                                     ROCKSDB.class_name) \
            or not own_jar.loadable(spark, STATE_VERSION_WRITER):
        return False
    if scheme_of(store.location) == "s3" and not own_jar.loadable(spark, _S3A):
        return False  # a caller's session without Spark's s3a: pruned in a copy here
    checkpoint = Checkpoint(local_checkpoint(store, manifest.name)[0])
    return not checkpoint.commit(manifest.batch_id).state_unique_ids.get(operator_id)


def _scratch_root(store: ObjectSnapshotStore) -> str:
    """Beside the snapshots, in their store (a name no snapshot can take)."""
    return join(store.location, ".scratch", "prune")


def prune_in_store(store: ObjectSnapshotStore, spark: SparkSession,
                   manifest: Manifest, op: OperatorEntry, new_snapshot: str, where: str,
                   say: Callable[[str], None]) -> tuple[Manifest, int, int, list[int]]:
    """Write ``new_snapshot``: ``manifest``'s snapshot without the keys of ``op`` that
    ``where`` selects. Returns its manifest, the operator's keys before, the keys removed
    and the partitions rewritten."""
    batch = manifest.batch_id
    version = batch + 1
    root = _scratch_root(store)
    # Those of prunes cut off: no create from them can still publish after a registration's
    # lifetime.
    clean_abandoned(store.io, root, LEASE_EXPIRY)
    scratch = StorePath(store.io, new_scratch(store.io, root))
    local, in_store = local_checkpoint(store, manifest.name)
    checkpoint = Checkpoint(local)
    entries = {url: entry for entry in manifest.files
               if (url := in_store.get(entry.path)) is not None}
    state = {rel.removeprefix(_CHECKPOINT): url for rel, url in in_store.items()}
    tasks_reach = task_store(scratch.url, aws_environment(
        dict(spark.sparkContext.getConf().getAll())))
    old, new = scratch / "old", scratch / "new"
    operator = next(o for o in checkpoint.operators(batch) if o.operator_id == op.operator_id)
    key_schema = op.stores[0].key_schema
    assert key_schema is not None
    op_dir = operator.local_path.relative_to(checkpoint.local_root).as_posix()
    try:
        # Spark's reader reads the pruned operator's state only.
        place_checkpoint(spark, checkpoint.local_root, old,
                         {rel: url for rel, url in state.items()
                          if rel.startswith(f"{op_dir}/")}, entries, tasks_reach)
        crash_point("prune.scratch_linked")
        old_url = spark_url(old.url)
        check_condition(spark, old_url, batch, op.operator_id, key_schema, where, op.name)
        say(f"finding the keys of operator '{op.name}' where {where}")
        with phase(f"prune: counting the keys of '{op.name}'"):
            matched = matching_keys(spark, old_url, batch, op.operator_id, key_schema, where,
                                    op.name, collect_keys=False)
        rewritten = sorted(matched.matched_rows)
        kept_out = tuple(f"{op_dir}/{partition}/" for partition in rewritten)
        place_checkpoint(spark, checkpoint.local_root, new,
                         {rel: url for rel, url in state.items()
                          if not (rel.startswith(kept_out) and "/_metadata/" not in rel)},
                         entries, tasks_reach)
        if rewritten:
            say(f"rewriting operator '{op.name}' without the keys where {where} (Spark "
                "tasks that read and write the store)")
            template = rocksdb_template(spark) \
                if manifest.state_store_provider == ROCKSDB.class_name else None
            # Where the version of a partition left with no key is written, to upload.
            with tempfile.TemporaryDirectory(prefix="sparkpoint-prune-") as scratch_here:
                kept = _write_kept(spark, old_url, batch, op, where, rewritten,
                                   [join(spark_url(new.url), op_dir, str(p))
                                    for p in range(operator.partitions)], template)
                for partition in rewritten:
                    want = matched.partition_rows.get(partition, 0) \
                        - matched.matched_rows[partition]
                    if kept.get(partition, 0) != want:
                        raise CheckpointFormatError(
                            f"operator '{op.name}' partition {partition}: Spark's reader "
                            f"counted {want} key(s) to keep, the rewrite wrote "
                            f"{kept.get(partition, 0)}; nothing was published")
                    if partition not in kept:
                        _upload_empty(new, f"{op_dir}/{partition}", version, template,
                                      Path(scratch_here))
        crash_point("prune.partition_rewritten")
        removed = matched.count
        crash_point("prune.state_rewritten")
        steps.info("removed %s of %s key(s); writing snapshot '%s'", removed,
                   matched.total_rows, new_snapshot)
        created = store.create(new_snapshot, Checkpoint(new), JobInfo.of_snapshot(manifest),
                               progress=say)
    finally:
        remove_tree(scratch)
    return created, matched.total_rows, removed, rewritten


def _write_kept(spark: SparkSession, checkpoint: str, batch: int, op: OperatorEntry,
                where: str, rewritten: list[int], partition_dirs: list[str],
                template: RocksDbTemplate | None) -> dict[int, int]:
    """The keys of the ``rewritten`` partitions that ``where`` does not select, written as
    each partition's version by ``StateVersionWriter``'s tasks into ``partition_dirs``;
    the keys written per partition."""
    from pyspark.sql import functions as F

    from sparkpoint.spark.state_prune import state_frame

    frame = state_frame(spark, checkpoint, batch, op.operator_id)
    flat = frame.select(F.col("key").alias(_KEY), F.col("value").alias(_VALUE),
                        F.col("partition_id").alias(_PARTITION), "key.*")
    # A null condition selects nothing, as when the keys were counted.
    kept = flat.filter(F.col(_PARTITION).isin(rewritten)) \
        .filter(~F.coalesce(F.expr(where), F.lit(False))) \
        .select(F.col(_PARTITION), F.col(_KEY), F.col(_VALUE))
    files = VersionFiles(partition_dirs, batch + 1, None,
                         None if template is None else (template.options, template.metadata),
                         check_repeats=False)
    with phase(f"prune: rewriting '{op.name}' with Spark"):
        return write_in_jvm(spark, kept, files)


def _upload_empty(new: StorePath, partition_dir: str, version: int,
                  template: RocksDbTemplate | None, scratch: Path) -> None:
    """A partition left with no key: an empty version of the provider, written here."""
    here = scratch / "empty" / partition_dir
    here.mkdir(parents=True, exist_ok=True)
    write_empty_version(here, version, template)
    new.io.put_files([(path, join(new.url, partition_dir, path.relative_to(here).as_posix()))
                      for path in sorted(here.rglob("*")) if path.is_file()])

