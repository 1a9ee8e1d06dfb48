"""``snapshot prune``: a new snapshot without the keys of one operator that a predicate selects.

The new snapshot holds the same batch as the original (same offsets, watermark and query id);
only the operator's state version N+1 (the one batch N committed, which a job started from
the snapshot loads) differs, in the partitions that held matching keys.

1. Link the original snapshot's checkpoint into a scratch directory of the home (links: the
   original is only read, and every rewrite below replaces a link by a new file).
2. One Spark job (spark/state_prune.py): Spark's state reader decodes the keys, Spark
   evaluates the predicate (sparkpoint never parses SQL), and one task per partition holding
   matches removes them from version N+1. HDFS provider: Spark encodes each matching key
   back into its stored bytes (sparkpoint's ``UnsafeRowBytes``, Spark's own encoder) and a
   Python task writes a self-contained ``<N+1>.snapshot``. RocksDB: the keys stay in the JVM;
   the task (sparkpoint's ``RocksDbKeyRemoval``) opens N+1 with the RocksDB Spark ships,
   deletes them, compacts, and packs a self-contained ``<N+1>.zip`` and its SSTs as Spark
   commits a version. Each partition's removed keys are checked against Spark's count. The
   driver moves no state bytes.
3. Where that does not apply: RocksDB versions made of changelogs go to Spark's own state
   rewriter (spark/state_rewrite.py, the class behind Spark's offline repartition: it writes
   each partition's kept keys into a fresh store, one task per partition; partitions whose
   key count changed take the rewritten files). In a caller's session without sparkpoint's
   jar, the matching keys come back to the driver as stored bytes and each partition is
   rewritten there (RocksDB keys whose partition key is not the key too: Spark's provider
   loads N+1, removes the keys and commits N+2, whose zip becomes ``<N+1>.zip``).
   Checkpoint format v2 (files named by version and id, the ids in the commit): the
   operator's version N+1 is first given plain names in the scratch (and the scratch's
   commit format v1), rewritten as above, then named by new ids, which the scratch's commit
   records: the new snapshot keeps the format.
4. The scratch checkpoint is exported as NEW_SNAP through the snapshot store, which
   publishes atomically (manifest last) on any store; the scratch is removed.
"""

from __future__ import annotations

import functools
import os
import shutil
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sparkpoint.checkpoint import hdfs_state, rocksdb_writer
from sparkpoint.checkpoint.layout import Checkpoint, OperatorDir
from sparkpoint.checkpoint.logs import CommitLogEntry, compact_json
from sparkpoint.checkpoint.providers import HDFS_BACKED, ROCKSDB, provider_named
from sparkpoint.checkpoint.rocksdb_state import locate_version
from sparkpoint.checkpoint.state_format import to_plain_names, to_unique_ids
from sparkpoint.crash_points import crash_point, steps
from sparkpoint.errors import (
    CheckpointFormatError,
    NameTakenError,
    PruneUnsupportedError,
    UnknownOperatorError,
)
from sparkpoint.progress import phase, track
from sparkpoint.snapshot.export import JobInfo
from sparkpoint.snapshot.manifest import Manifest, OperatorEntry
from sparkpoint.snapshot.object_store import ObjectSnapshotStore
from sparkpoint.snapshot.prune_in_store import local_checkpoint, prune_in_store, prunes_in_store
from sparkpoint.snapshot.store import SnapshotStore
from sparkpoint.spark import own_jar
from sparkpoint.spark.driver_disk import require_driver_disk
from sparkpoint.spark.state_prune import (
    ROCKSDB_KEY_REMOVAL,
    UNSAFE_ROW_BYTES,
    MatchedKeys,
    PartitionRemoval,
    check_condition,
    matched_key_bytes,
    matching_keys,
    remove_keys_by_tasks,
    remove_rocksdb_keys,
    remove_rocksdb_keys_by_tasks,
)
from sparkpoint.spark.state_rewrite import partition_key_fields, rewrite_without
from sparkpoint.storage.home import Home, validate_name
from sparkpoint.storage.local import link_or_copy, walk_files
from sparkpoint.storage.processes import abandoned, claim

if TYPE_CHECKING:
    import numpy as np
    from pyspark.sql import SparkSession

# Operator kinds whose state is one store of independent keys: removing a key is exactly
# "this key was never seen". Others are refused (see _refusal).
PRUNABLE_KINDS = ("aggregation", "dedupe", "dedupe_within_watermark")


@dataclass(frozen=True)
class PruneResult:
    """What ``snapshot prune`` did (its ``--json`` document)."""

    snapshot: str
    new_snapshot: str
    operator: str
    where: str
    batch: int
    rows_before: int
    rows_after: int
    rows_removed: int
    bytes_before: int
    bytes_after: int
    partitions_rewritten: list[int]
    # "spark_tasks": one Spark task per partition, where Spark runs (sparkpoint's rewrite
    # or Spark's state rewriter); "driver": key by key in this process (a session without
    # sparkpoint's jar)
    rewritten_by: str
    manifest: Manifest

    def to_dict(self) -> dict[str, Any]:
        return {
            "snapshot": self.snapshot, "new_snapshot": self.new_snapshot,
            "operator": self.operator, "where": self.where, "batch": self.batch,
            "rows_before": self.rows_before, "rows_after": self.rows_after,
            "rows_removed": self.rows_removed, "bytes_before": self.bytes_before,
            "bytes_after": self.bytes_after,
            "partitions_rewritten": self.partitions_rewritten,
            "rewritten_by": self.rewritten_by,
        }


def _refusal(manifest: Manifest, op: OperatorEntry, operator_dir: OperatorDir) -> str | None:
    """Why this operator's state cannot be pruned key by key, or None."""
    what = f"operator '{op.name}' of snapshot '{manifest.name}' is a {op.kind}"
    if op.kind not in PRUNABLE_KINDS:
        return (f"{what}; expected one of {', '.join(PRUNABLE_KINDS)} (one store of "
                "independent keys): removing keys from its state would leave its other "
                "stores or timers inconsistent. Drop the operator's state instead with a resume "
                "point ('mode: initialize')")
    prefixed = any(store.num_cols_prefix_key for store in operator_dir.metadata.stores or ())
    if len(op.stores) != 1 or op.stores[0].name != "default" or prefixed:
        return (f"{what} with {len(op.stores)} store(s) or a prefix-keyed store; expected one "
                "plain store")
    if op.stores[0].key_schema is None or op.stores[0].value_schema is None:
        return f"{what} without a recorded key or value schema; expected both in the snapshot"
    if manifest.state_store_provider not in _PRUNING:
        return (f"snapshot '{manifest.name}' uses the state store provider "
                f"{manifest.state_store_provider}; expected Spark's RocksDB or HDFS provider")
    return None


def _clean_abandoned(scratch_root: Path) -> None:
    """Scratch directories of prunes whose process is gone (killed mid-prune)."""
    if not scratch_root.is_dir():
        return
    for entry in scratch_root.iterdir():
        pid = entry.name.split(".", 1)[0]
        if pid.isdigit() and abandoned(entry, int(pid)):
            shutil.rmtree(entry, ignore_errors=True)


def _link_tree(source: Path, target: Path) -> None:
    for path in walk_files(source):
        link_or_copy(path, target / path.relative_to(source))


def _rewrite_hdfs_partition(pdir: Path, keys: Sequence[bytes] | np.ndarray,
                            version: int) -> int:
    """Write ``version`` without ``keys`` as one self-contained snapshot file in place of
    the links that made it up; return how many keys were removed. Runs in the driver or in
    a Spark task (module level: the task imports it)."""
    fixed = hdfs_state.load_fixed_version(pdir, version)
    names = hdfs_state.files_for_version(pdir, version).names()
    if fixed is not None:
        kept, removed = hdfs_state.without_fixed_keys(fixed, keys)
    else:
        state = hdfs_state.load_version(pdir, version)
        removed = sum(1 for key in hdfs_state.key_bytes(keys)
                      if state.pop(key, None) is not None)
    for name in names:
        # Unlink, never write through: these are links to the original snapshot's files.
        (pdir / name).unlink()
    if fixed is not None:
        hdfs_state.write_fixed_snapshot(pdir, version, kept)
    else:
        hdfs_state.write_snapshot(pdir, version, state)
    return removed


def _rewrite_rocksdb_partition(
    spark: SparkSession, state_root: Path, op: OperatorEntry, partition: int, version: int,
    keys: list[Any], rows_before: int,
) -> int:
    """Rewrite the partition's ``version`` without ``keys``; return how many keys it lost
    (its rows before, from Spark's reader, less the rows Spark's commit recorded)."""
    pdir = state_root / str(op.operator_id) / str(partition)
    store = op.stores[0]
    assert store.key_schema is not None and store.value_schema is not None
    remove_rocksdb_keys(spark, ROCKSDB.class_name, state_root, op.operator_id, partition,
                                 version, store.key_schema, store.value_schema, keys)
    committed = pdir / f"{version + 1}.zip"
    if not committed.is_file():
        raise CheckpointFormatError(
            f"{pdir}: expected Spark's provider to commit {committed.name} after removing "
            f"keys from version {version}, found none; nothing was published")
    for stale in (f"{version}.zip", f".{version}.zip.crc", f".{version + 1}.zip.crc"):
        (pdir / stale).unlink(missing_ok=True)
    # The newest zip at or below the version is now this one: no changelog is read with it.
    os.rename(committed, pdir / f"{version}.zip")
    rows_after = locate_version(pdir, version).num_keys
    if rows_after is None:
        raise CheckpointFormatError(
            f"{pdir / f'{version}.zip'}: expected Spark's commit to record its number of keys "
            "(numKeys), found none; nothing was published")
    return rows_before - rows_after


def _prune_by_spark(spark: SparkSession, checkpoint: Checkpoint, batch: int, op: OperatorEntry,
                    key_schema: dict[str, Any], where: str, scratch: Path,
                    say: Callable[[str], None]) -> dict[int, tuple[int, int]]:
    """RocksDB: the operator's version rewritten by Spark's state rewriter (one task per
    partition) without the keys ``where`` selects; each partition whose keys changed takes
    the rewritten files. Returns partition -> (rows before, rows after): the counts Spark's
    commits record (numKeys), the rows before counted by Spark's reader when the version has
    no count of its own (changelog versions)."""
    version = batch + 1
    args = (spark, checkpoint.local_root, batch, op.operator_id, key_schema, where, op.name)
    check_condition(*args)
    pdirs = _operator_partition_dirs(checkpoint, op, batch)
    before: dict[int, int | None] = {
        partition: locate_version(pdir, version).num_keys for partition, pdir in enumerate(pdirs)}
    if any(rows is None for rows in before.values()):
        with phase(f"prune: counting the keys of '{op.name}'"):
            counted = matching_keys(*args, collect_keys=False).partition_rows
        before = {partition: counted.get(partition, 0) for partition in before}
    say(f"rewriting operator '{op.name}' without the keys where {where} (Spark tasks)")
    try:
        with phase(f"prune: rewriting '{op.name}' with Spark"):
            rewritten = rewrite_without(spark, checkpoint.local_root, scratch / "rewrite",
                                        batch, op.operator_id, where)
    except Exception as exc:  # a task's failure reaches us as py4j's error
        # The condition's failure (or the state's) is raised by counting with it; otherwise
        # the rewriter itself failed.
        matching_keys(*args, collect_keys=False)
        text = str(exc).strip()
        raise CheckpointFormatError(
            f"operator '{op.name}': Spark's state rewriter failed: "
            f"{text.splitlines()[0] if text else type(exc).__name__}; nothing was published; "
            "Spark's log has its stack trace") from exc
    crash_point("prune.partition_rewritten")
    counts: dict[int, tuple[int, int]] = {}
    for partition, pdir in track(list(enumerate(pdirs)), f"prune: taking '{op.name}'",
                                 unit="partition"):
        rows_before = before[partition]
        assert rows_before is not None
        rows_after = locate_version(rewritten / str(partition), version).num_keys
        if rows_after is None:
            raise CheckpointFormatError(
                f"{rewritten / str(partition)}: expected Spark's rewrite to record its number "
                "of keys (numKeys), found none; nothing was published")
        if rows_after != rows_before:
            _take_rewritten_partition(rewritten / str(partition), pdir)
        counts[partition] = (rows_before, rows_after)
    return counts


def _prune_hdfs_by_tasks(spark: SparkSession, checkpoint: Checkpoint, batch: int,
                         op: OperatorEntry, key_schema: dict[str, Any], where: str,
                         say: Callable[[str], None]) -> list[PartitionRemoval] | None:
    """HDFS provider: the keys ``where`` selects removed by one Spark task per partition
    holding any (spark/state_prune.py), each partition's removals checked against Spark's
    count; None when the session lacks sparkpoint's jar (then the driver does it)."""
    if not own_jar.loadable(spark, UNSAFE_ROW_BYTES):
        return None
    say(f"rewriting operator '{op.name}' without the keys where {where} (Spark tasks)")
    with phase(f"prune: rewriting '{op.name}' with Spark"):
        removals = remove_keys_by_tasks(
            spark, checkpoint.local_root, batch, op.operator_id, key_schema, where, op.name,
            functools.partial(_rewrite_hdfs_partition, version=batch + 1))
    for removal in removals:
        _check_removed(op, removal.partition, removal.matched, removal.removed)
    crash_point("prune.partition_rewritten")
    return removals


def _prune_rocksdb_by_tasks(spark: SparkSession, checkpoint: Checkpoint, batch: int,
                            op: OperatorEntry, key_schema: dict[str, Any], where: str,
                            say: Callable[[str], None]) -> list[PartitionRemoval] | None:
    """RocksDB: one Spark job (spark/state_prune.py): Spark matches the keys, and one task per
    partition holding matches removes them with the RocksDB Spark ships, in the JVM
    (sparkpoint's ``RocksDbKeyRemoval``), each partition's removals checked against Spark's
    count. None when that does not apply: no sparkpoint jar in the session, or a version
    made of changelogs (then Spark's rewriter does it)."""
    if not own_jar.loadable(spark, ROCKSDB_KEY_REMOVAL):
        return None
    version = batch + 1
    zips: dict[int, str] = {}
    for partition, pdir in enumerate(_operator_partition_dirs(checkpoint, op, batch)):
        if rocksdb_writer.plain_zip_metadata(pdir, version) is None:
            return None
        zips[partition] = locate_version(pdir, version).zip_name
    say(f"rewriting operator '{op.name}' without the keys where {where} (Spark tasks)")
    with phase(f"prune: rewriting '{op.name}' with Spark"):
        removals = remove_rocksdb_keys_by_tasks(
            spark, checkpoint.local_root, batch, op.operator_id, key_schema, where, op.name,
            zips)
    for removal in removals:
        _check_removed(op, removal.partition, removal.matched, removal.removed)
    crash_point("prune.partition_rewritten")
    return removals


def _check_removed(op: OperatorEntry, partition: int, matched: int, removed: int) -> None:
    """A partition's rewrite removed exactly the keys Spark's reader matched there."""
    if removed != matched:
        raise CheckpointFormatError(
            f"operator '{op.name}' partition {partition}: Spark's reader matched {matched} "
            f"key(s), the store removed {removed}; expected the same keys in both; nothing "
            "was published")


def _prune_in_driver(spark: SparkSession, state_root: Path, op: OperatorEntry,
                     matched: MatchedKeys, runs: Iterable[tuple[int, list[Any]]],
                     pruning: _Pruning, version: int) -> int:
    """The matched keys (``runs``: each partition's, in turn) removed in this process,
    partition by partition; return how many."""
    removed = 0
    for partition, keys in track(runs, f"prune: rewriting '{op.name}'",
                                 total=len(matched.matched_rows), unit="partition"):
        gone = pruning.rewrite_partition(spark, state_root, op, partition, version, keys,
                                         matched.partition_rows.get(partition, 0))
        _check_removed(op, partition, matched.matched_rows[partition], gone)
        removed += gone
        crash_point("prune.partition_rewritten")
    return removed


def _take_rewritten_partition(rewritten: Path, pdir: Path) -> None:
    """Put the partition's version as Spark's rewriter wrote it in place of the scratch's
    links of that version."""
    for entry in pdir.iterdir():
        # The scratch holds links and the operator's version only: all of it is replaced.
        if entry.name != "_metadata":
            shutil.rmtree(entry) if entry.is_dir() else entry.unlink()
    for entry in rewritten.iterdir():
        if entry.name != "_metadata":
            os.rename(entry, pdir / entry.name)


def _operator_partition_dirs(checkpoint: Checkpoint, op: OperatorEntry,
                             batch: int) -> list[Path]:
    operator = next(o for o in checkpoint.operators(batch) if o.operator_id == op.operator_id)
    return [operator.local_path / str(partition) for partition in range(operator.partitions)]


def _plain_names(checkpoint: Checkpoint, op: OperatorEntry, batch: int,
                 ids: list[list[str]]) -> None:
    """Format v2 to plain names for the operator's version batch+1, in the scratch only
    (every file there is a link: renames and removals leave the original snapshot whole)."""
    for partition, pdir in enumerate(_operator_partition_dirs(checkpoint, op, batch)):
        to_plain_names(pdir, batch + 1, ids[partition][0])


def _commit_as_format_v1(checkpoint: Checkpoint, batch: int) -> dict[str, Any]:
    """The scratch's commit of ``batch`` rewritten in format v1 (no ids), which Spark's
    state rewriter reads with format v1 settings; return the format v2 commit's body."""
    body = checkpoint.commit(batch).metadata
    path = checkpoint.local_root / "commits" / str(batch)
    path.unlink()  # a link to the original snapshot's commit: never written through
    plain = {key: value for key, value in body.items() if key != "stateUniqueIds"}
    path.write_bytes(CommitLogEntry(1, compact_json(plain)).to_bytes())
    return body


def _unique_names(checkpoint: Checkpoint, op: OperatorEntry, batch: int,
                  body: dict[str, Any]) -> None:
    """Back to format v2: new ids for the operator's version batch+1, recorded in the
    scratch's commit (``body``, the original commit's) in place of the old ones (other
    operators keep theirs)."""
    ids = [[to_unique_ids(pdir, batch + 1)]
           for pdir in _operator_partition_dirs(checkpoint, op, batch)]
    path = checkpoint.local_root / "commits" / str(batch)
    body["stateUniqueIds"] = {**body.get("stateUniqueIds", {}), str(op.operator_id): ids}
    path.unlink(missing_ok=True)
    path.write_bytes(CommitLogEntry(2, compact_json(body)).to_bytes())


def _rewrite_hdfs_partition_in_driver(
    spark: SparkSession, state_root: Path, op: OperatorEntry, partition: int, version: int,
    keys: list[Any], rows_before: int,
) -> int:
    return _rewrite_hdfs_partition(state_root / str(op.operator_id) / str(partition), keys,
                                   version)


RewritePartition = Callable[["SparkSession", Path, OperatorEntry, int, int, list[Any], int],
                            int]
ByTasks = Callable[["SparkSession", Checkpoint, int, OperatorEntry, dict[str, Any], str,
                    Callable[[str], None]], "list[PartitionRemoval] | None"]


@dataclass(frozen=True)
class _Pruning:
    """How one provider's state is pruned (checkpoint/providers.py: the providers)."""

    #: Spark tasks that match and remove the keys (None when they do not apply).
    by_tasks: ByTasks
    #: One partition rewritten without the keys, in the driver.
    rewrite_partition: RewritePartition
    #: Spark's own state rewriter can remove keys of this provider's stores.
    spark_rewriter: bool
    #: The driver's rewrite is handed the keys as Spark's rows (else their bytes).
    keys_as_rows: bool


_PRUNING: dict[str, _Pruning] = {
    ROCKSDB.class_name: _Pruning(_prune_rocksdb_by_tasks, _rewrite_rocksdb_partition,
                                 spark_rewriter=True, keys_as_rows=True),
    HDFS_BACKED.class_name: _Pruning(_prune_hdfs_by_tasks, _rewrite_hdfs_partition_in_driver,
                                     spark_rewriter=False, keys_as_rows=False),
}


def prune_snapshot(
    home: Home,
    store: SnapshotStore,
    spark: SparkSession,
    snapshot: str,
    new_snapshot: str,
    operator: str,
    where: str,
    say: Callable[[str], None],
) -> PruneResult:
    """Write NEW_SNAP = SNAP without the keys of ``operator`` matching ``where``."""
    manifest = store.get(snapshot)
    entry = manifest.operator(operator)
    if entry is not None and isinstance(store, ObjectSnapshotStore) \
            and prunes_in_store(store, manifest, spark, entry.operator_id):
        # In the store, by Spark tasks (snapshot/prune_in_store.py): no scratch copy here,
        # no disk shared with the executors.
        op = check_prunable(store, manifest, new_snapshot, operator,
                            local_checkpoint(store, snapshot)[0])
        created, rows_before, removed, rewritten = prune_in_store(
            store, spark, manifest, op, new_snapshot, where, say)
        return _result(manifest, op, where, created, rows_before, removed, rewritten, True)
    op = check_prunable(store, manifest, new_snapshot, operator)
    batch = manifest.batch_id
    version = batch + 1
    scratch_root = home.scratch_dir / "prune"
    _clean_abandoned(scratch_root)
    scratch = scratch_root / f"{os.getpid()}.{new_snapshot}.{uuid.uuid4().hex[:8]}"
    try:
        # Spark's tasks read and rewrite the scratch copy: the executors must reach it
        # (asked before a snapshot in a store is fetched to be linked here).
        scratch.mkdir(parents=True)
        claim(scratch)
        require_driver_disk(spark, scratch)
        checkpoint = Checkpoint(scratch / "checkpoint")
        _link_tree(store.checkpoint_path(snapshot), checkpoint.local_root)
        crash_point("prune.scratch_linked")
        provider = provider_named(manifest.state_store_provider, f"snapshot '{snapshot}'")
        pruning = _PRUNING[provider.class_name]
        unique_ids = (checkpoint.commit(batch).state_unique_ids.get(op.operator_id)
                      if provider.has_unique_ids else None)
        v2_commit = None
        if unique_ids is not None:
            _plain_names(checkpoint, op, batch, unique_ids)
            v2_commit = _commit_as_format_v1(checkpoint, batch)
        key_schema = op.stores[0].key_schema
        assert key_schema is not None
        state_root = checkpoint.local_root / "state"
        by_spark = True
        if (removals := pruning.by_tasks(spark, checkpoint, batch, op, key_schema, where,
                                         say)) is not None:
            removed = sum(removal.removed for removal in removals)
            rows_before = (op.rows if op.rows is not None else matching_keys(
                spark, checkpoint.local_root, batch, op.operator_id, key_schema, where,
                op.name, collect_keys=False).total_rows)
            rewritten_partitions = [removal.partition for removal in removals]
        # Spark's rewriter evaluates the condition on the stored key's partition key: the
        # same columns as the key for every prunable kind, checked rather than assumed.
        elif pruning.spark_rewriter and partition_key_fields(
                spark, checkpoint.local_root, batch, op.operator_id) == [
                    field["name"] for field in key_schema.get("fields", [])]:
            counts = _prune_by_spark(spark, checkpoint, batch, op, key_schema, where, scratch,
                                     say)
            removed = sum(before - after for before, after in counts.values())
            rows_before = sum(before for before, _after in counts.values())
            rewritten_partitions = sorted(p for p, (b, a) in counts.items() if b != a)
        else:
            by_spark = False
            say(f"finding the keys of operator '{op.name}' where {where}")
            args = (spark, checkpoint.local_root, batch, op.operator_id, key_schema, where,
                    op.name)
            with phase(f"prune: finding the keys of '{op.name}'"):
                # RocksDB: the JVM's rows, for Spark's provider to remove; HDFS: counted
                # here, their bytes taken below a partition at a time.
                matched = matching_keys(*args, collect_keys=pruning.keys_as_rows)
            runs: Iterable[tuple[int, list[Any]]] = (
                sorted(matched.by_partition.items()) if pruning.keys_as_rows
                else matched_key_bytes(*args, matched.matched_rows))
            removed = _prune_in_driver(spark, state_root, op, matched, runs, pruning, version)
            rows_before = matched.total_rows
            rewritten_partitions = sorted(matched.matched_rows)
        if v2_commit is not None:
            _unique_names(checkpoint, op, batch, v2_commit)
        crash_point("prune.state_rewritten")
        # The command's result line says it again: a step, not output.
        steps.info("removed %s of %s key(s); writing snapshot '%s'", removed,
                   rows_before, new_snapshot)
        created = store.create(new_snapshot, checkpoint, JobInfo.of_snapshot(manifest),
                               progress=say)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return _result(manifest, op, where, created, rows_before, removed, rewritten_partitions,
                   by_spark)


def _result(manifest: Manifest, op: OperatorEntry, where: str, created: Manifest,
            rows_before: int, removed: int, rewritten: list[int], by_spark: bool) -> PruneResult:
    new_op = created.operator(op.name)
    assert new_op is not None
    return PruneResult(
        snapshot=manifest.name, new_snapshot=created.name, operator=op.name, where=where,
        batch=manifest.batch_id, rows_before=rows_before,
        rows_after=new_op.rows if new_op.rows is not None else rows_before - removed,
        rows_removed=removed, bytes_before=op.bytes, bytes_after=new_op.bytes,
        partitions_rewritten=rewritten,
        rewritten_by="spark_tasks" if by_spark else "driver", manifest=created,
    )


def check_prunable(
    store: SnapshotStore, manifest: Manifest, new_snapshot: str, operator: str,
    checkpoint: Path | None = None,
) -> OperatorEntry:
    """Everything that can be refused before Spark starts: the new name, the operator
    (``checkpoint``: the snapshot's checkpoint here, its state files not needed)."""
    validate_name(new_snapshot, "snapshot")
    if store.exists(new_snapshot):
        raise NameTakenError(
            f"snapshot '{new_snapshot}' already exists; choose another name for the pruned "
            "snapshot or delete it first")
    op = manifest.operator(operator)
    if op is None:
        known = ", ".join(entry.name for entry in manifest.operators) or "none"
        raise UnknownOperatorError(
            f"snapshot '{manifest.name}' has no stateful operator '{operator}' (operators: "
            f"{known}); see 'sparkpoint snapshot show {manifest.name}'")
    if checkpoint is None:
        # Its metadata only: a snapshot in a store is not fetched whole for it.
        checkpoint = local_checkpoint(store, manifest.name)[0] \
            if isinstance(store, ObjectSnapshotStore) else store.checkpoint_path(manifest.name)
    operator_dir = next(
        (d for d in Checkpoint(checkpoint).operators(manifest.batch_id)
         if d.operator_id == op.operator_id), None)
    if operator_dir is None:
        raise CheckpointFormatError(
            f"snapshot '{manifest.name}': expected the state of operator '{op.name}' under "
            f"state/{op.operator_id}, found none; run 'sparkpoint snapshot verify "
            f"{manifest.name}'")
    problem = _refusal(manifest, op, operator_dir)
    if problem is not None:
        raise PruneUnsupportedError(problem)
    return op
