"""Repartition HDFS-provider state offline, which Spark's own repartition refuses.

Every key is moved to the partition Spark's ``HashPartitioning`` gives it for the new count:
``pmod(murmur3(partition key columns, 42), n)``, the partition key being the columns the
operator is clustered by. Each old partition's state is read as Spark loads it (the newest
snapshot file at or below the version plus the deltas after it, or the whole delta chain, as
a snapshot holds them) and replaced by one snapshot file per new partition; the checkpoint is
rewritten in place, so run this on a staging copy only. Operator metadata and the recorded
``spark.sql.shuffle.partitions`` of the last two offsets entries are updated to the new count.
"""

from __future__ import annotations

import functools
import re
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from sparkpoint.checkpoint import hdfs_state
from sparkpoint.checkpoint.layout import (
    SHUFFLE_PARTITIONS_CONF,
    Checkpoint,
    OperatorDir,
    StoreLayout,
)
from sparkpoint.checkpoint.logs import OffsetLogEntry
from sparkpoint.checkpoint.murmur3 import partition_of
from sparkpoint.checkpoint.unsafe_row import read_fields
from sparkpoint.crash_points import crash_point
from sparkpoint.errors import CheckpointFormatError, SnapshotDamagedError
from sparkpoint.progress import phase, track
from sparkpoint.spark.driver_disk import check_here, failed_for_want_of_disk
from sparkpoint.storage.local import remove_checksum_sibling, write_atomic

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

T = TypeVar("T")
_STATE_FILE = re.compile(r"^\d+\.(delta|snapshot)$")


def store_key_fields(operator: OperatorDir, layout: StoreLayout) -> list[dict[str, Any]]:
    """The key columns of one store of ``operator``, from its schema file (parsed once: the
    schema property decodes its JSON on every access)."""
    schema = operator.schema(layout)
    if schema is None:
        raise CheckpointFormatError(
            f"{layout.partition_dir(operator.local_path, 0)}: expected the store's schema file "
            "_metadata/schema to find its key columns, found none")
    fields: list[dict[str, Any]] = schema.key_schema["fields"]
    return fields


def partition_key_fields(operator_name: str, store: str, num_cols_prefix_key: int,
                         key_fields: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The leading key columns an operator's input is clustered by."""
    if operator_name == "symmetricHashJoin" and store.endswith("keyWithIndexToValue"):
        return key_fields[:-1]  # the join keys, without the value index
    if num_cols_prefix_key > 0:
        return key_fields[:num_cols_prefix_key]  # session windows: keys without the session
    return key_fields


def _partition_dirs(operator: OperatorDir) -> list[int]:
    return sorted(int(p.name) for p in operator.local_path.iterdir()
                  if p.is_dir() and p.name.isdigit())


def repartition_hdfs_state(checkpoint: Path, batch: int, partitions: int,
                           spark: SparkSession) -> None:
    """Move state version ``batch + 1`` of every operator into ``partitions`` partitions:
    stores of fixed-length records as Spark tasks (their executors must reach
    ``checkpoint``), the others in this process."""
    ckpt = Checkpoint(checkpoint)
    version = batch + 1
    for operator in ckpt.operators():
        old_partitions = _partition_dirs(operator)
        prefixes = {s.name: s.num_cols_prefix_key for s in operator.metadata.stores}
        for store in operator.stores():
            _repartition_store(operator, store.name, prefixes.get(store.name, 0),
                               old_partitions, version, partitions, spark)
        for old in old_partitions:
            if old >= partitions:
                shutil.rmtree(operator.local_path / str(old))
    record_partition_count(checkpoint, batch, partitions)


def record_partition_count(checkpoint: Path, batch: int, partitions: int) -> None:
    """Every operator's metadata and the ``spark.sql.shuffle.partitions`` of the last two
    offsets entries say ``partitions``: the count the state was moved to."""
    for operator in Checkpoint(checkpoint).operators():
        meta = operator.local_path / "_metadata" / "metadata"
        write_atomic(meta, operator.metadata.with_partitions(partitions).to_bytes())
    for offsets_batch in (batch - 1, batch):
        path = checkpoint / "offsets" / str(offsets_batch)
        if not path.is_file():
            continue
        entry = OffsetLogEntry.parse(path.read_bytes(), str(path))
        write_atomic(path, entry.with_conf({SHUFFLE_PARTITIONS_CONF: str(partitions)})
                     .to_bytes())


def _repartition_store(operator: OperatorDir, store_name: str, prefix: int,
                       old_partitions: list[int], version: int, partitions: int,
                       spark: SparkSession) -> None:
    layout = next(s for s in operator.stores() if s.name == store_name)
    if not _repartition_by_tasks(spark, operator, layout, prefix, old_partitions, version,
                                 partitions):
        _repartition_rows(operator, layout, prefix, old_partitions, version, partitions)


def _repartition_rows(operator: OperatorDir, layout: StoreLayout, prefix: int,
                      old_partitions: list[int], version: int, partitions: int) -> None:
    """The move in this process, record by record (keys of varying length: strings), every
    old partition's records held at once."""
    op_dir = operator.local_path
    records: dict[bytes, bytes] = {}
    for old in track(old_partitions, f"repartition: reading {operator.operator_name}",
                     unit="partition"):
        records.update(hdfs_state.load_version(layout.partition_dir(op_dir, old), version))
    targets: list[dict[bytes, bytes]] = [{} for _ in range(partitions)]
    if records:
        key_fields = store_key_fields(operator, layout)
        fields = partition_key_fields(operator.operator_name, layout.name, prefix, key_fields)
        types = [f["type"] for f in fields]
        where = str(layout.partition_dir(op_dir, 0))
        for key, value in records.items():
            values = read_fields(key, key_fields, where)[:len(fields)]
            targets[partition_of(values, types, partitions)][key] = value
    _remove_state_files(operator, layout, old_partitions)
    for partition, state in track(enumerate(targets), f"repartition: writing "
                                  f"{operator.operator_name}", total=partitions,
                                  unit="partition"):
        hdfs_state.write_snapshot(layout.partition_dir(op_dir, partition), version, state)
        crash_point("restore.hdfs_partition_moved")


def _remove_state_files(operator: OperatorDir, layout: StoreLayout,
                        old_partitions: list[int]) -> None:
    op_dir = operator.local_path
    for old in old_partitions:
        directory = layout.partition_dir(op_dir, old)
        for path in directory.iterdir():
            if path.is_file() and _STATE_FILE.match(path.name):
                path.unlink()
                remove_checksum_sibling(path)


def _repartition_by_tasks(spark: SparkSession, operator: OperatorDir, layout: StoreLayout,
                          prefix: int, old_partitions: list[int], version: int,
                          partitions: int) -> bool:
    """The move of a store whose records have one length as two Spark jobs, the driver
    moving no state bytes: each old partition's records are hashed and written to one
    spill file sorted by new partition (as a shuffle map task does), returning where each
    new partition's rows start; then each new partition's snapshot file is written from its
    slice of every spill. Both run as tasks over runs of partitions (:func:`task_slices`), one
    partition held at a time by each. False (nothing changed) when a store is not of
    fixed-length records or its key columns are not hashed column-wise; then
    :func:`_repartition_rows` moves it."""
    schema = operator.schema(layout)
    if schema is None or not old_partitions:
        return False
    key_fields = schema.key_schema["fields"]
    fields = partition_key_fields(operator.operator_name, layout.name, prefix, key_fields)
    op_dir = operator.local_path
    context = spark.sparkContext
    with tempfile.TemporaryDirectory(dir=op_dir, prefix=".repartition-") as spill_dir:
        spill = functools.partial(_spill_partition, op_dir=op_dir, layout=layout,
                                  version=version, key_fields=key_fields,
                                  hashed_fields=len(fields), partitions=partitions,
                                  spill_dir=Path(spill_dir))
        with phase(f"repartition: hashing {operator.operator_name} (Spark tasks)"):
            spilled = run_tasks(op_dir, lambda: context.parallelize(
                old_partitions, task_slices(context, len(old_partitions))).map(spill).collect())
        if any(result is None for result in spilled):
            return False
        widths = {result[1] for result in spilled if result is not None and result[1]}
        if len(widths) > 1:
            return False
        key_len, value_len = next(iter(widths), (8, 0))
        bounds = {old: result[0] for old, result in zip(old_partitions, spilled, strict=True)
                  if result is not None and result[1]}
        _remove_state_files(operator, layout, old_partitions)
        write = functools.partial(_write_partition, op_dir=op_dir, layout=layout,
                                  version=version, widths=(key_len, value_len),
                                  bounds=bounds, spill_dir=Path(spill_dir))
        with phase(f"repartition: writing {operator.operator_name} (Spark tasks)"):
            run_tasks(op_dir, lambda: context.parallelize(
                range(partitions), task_slices(context, partitions)).foreach(write))
        crash_point("restore.hdfs_partition_moved")
    return True


def task_slices(context: Any, partitions: int) -> int:
    """Tasks for ``partitions`` state partitions: a few per core of the application, each
    moving a run of partitions. A Python task costs tens of milliseconds to start and a
    partition of a few thousand keys less than that to move: one task per partition spent
    most of a move of 4M keys in 200 partitions starting tasks (9-13 s against 2.4 s)."""
    return max(1, min(partitions, 4 * int(context.defaultParallelism)))


# How a Python task's refusal of a damaged snapshot file ends Spark's report of it.
_TASK_FOUND_DAMAGED = re.compile(r"SnapshotDamagedError: (?:\[SNAPSHOT_DAMAGED\] )?(.+)$")
# How java/sparkpoint/spark/StateVersionWriter.java's refusals start in Spark's report.
_JVM_REFUSAL = "StateVersionWriter$StateWriteError: "


def run_tasks(op_dir: Path, job: Callable[[], T]) -> T:
    """``job``'s result; a task's failure (a state file it could not read, say) raised as
    the error sparkpoint gives for that, with the task's own message."""
    from py4j.protocol import Py4JJavaError
    from pyspark.errors import PySparkException

    try:
        return job()
    except (PySparkException, Py4JJavaError) as exc:
        text = str(exc)
        if (elsewhere := failed_for_want_of_disk(op_dir, text)) is not None:
            raise elsewhere from exc
        # A Python task's exception ends its message with the exception's own line; a
        # refusal of sparkpoint's JVM tasks (StateWriteError) is a whole sentence.
        lines = [line.strip().rpartition(_JVM_REFUSAL)[2] for line in text.splitlines()
                 if "Error:" in line]
        damaged = [found.group(1) for line in lines
                   if (found := _TASK_FOUND_DAMAGED.search(line)) is not None]
        if damaged:
            # A snapshot file a task fetched from the store is not the manifest's
            # (snapshot/placement.check_fetched): the same refusal as a fetch here gives.
            raise SnapshotDamagedError(damaged[-1]) from exc
        raise CheckpointFormatError(
            f"{op_dir}: moving the state's keys in Spark tasks failed: "
            f"{lines[-1] if lines else text.strip()[:500]}; nothing was published") from exc


def _spill_partition(old: int, op_dir: Path, layout: StoreLayout, version: int,
                     key_fields: list[dict[str, Any]], hashed_fields: int, partitions: int,
                     spill_dir: Path) -> tuple[list[int], tuple[int, int] | None] | None:
    """A task: old partition ``old``'s records, hashed to their new partitions, written to
    ``<spill_dir>/<old>`` ordered by new partition; returns the row where each new
    partition starts (and where the last ends) and the (key, value) widths (None for an
    empty partition), or None when the records are not of fixed length."""
    import numpy as np

    from sparkpoint.checkpoint.murmur3_columns import hash_columns  # numpy: imported late

    check_here(op_dir)
    state = hdfs_state.load_fixed_version(layout.partition_dir(op_dir, old), version)
    if state is None:
        return None
    if not len(state.keys):
        return [0] * (partitions + 1), None
    widths = (int(state.keys.shape[1]), int(state.values.shape[1]))
    if widths[0] % 8:
        return None
    hashed = hash_columns(state.keys, key_fields, hashed_fields)
    if hashed is None:
        return None
    # pmod, as Spark's HashPartitioning: numpy's remainder takes the divisor's sign.
    targets = hashed.astype("int64") % partitions
    order = np.argsort(targets, kind="stable")
    records = np.concatenate([state.keys, state.values], axis=1)[order]
    records.tofile(spill_dir / str(old))
    bounds = np.searchsorted(targets[order], np.arange(partitions + 1))
    return [int(bound) for bound in bounds], widths


def _write_partition(partition: int, op_dir: Path, layout: StoreLayout, version: int,
                     widths: tuple[int, int], bounds: dict[int, list[int]],
                     spill_dir: Path) -> None:
    """A task: new partition ``partition``'s snapshot file, from its slice of each spill."""
    import numpy as np

    check_here(op_dir)
    key_len, value_len = widths
    width = key_len + value_len
    parts = []
    for old, starts in sorted(bounds.items()):
        first, end = starts[partition], starts[partition + 1]
        if end > first:
            with open(spill_dir / str(old), "rb") as spill:
                spill.seek(first * width)
                parts.append(np.frombuffer(spill.read((end - first) * width), np.uint8)
                             .reshape(-1, width))
    rows = np.concatenate(parts) if parts else np.zeros((0, width), np.uint8)
    hdfs_state.write_fixed_snapshot(layout.partition_dir(op_dir, partition), version,
                                    hdfs_state.FixedState(rows[:, :key_len], rows[:, key_len:]))
