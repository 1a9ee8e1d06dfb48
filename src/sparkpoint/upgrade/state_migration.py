"""Migrate the state of resumed operators whose state schema changed in a way
upgrade/migration_rules.py migrates (columns widened), in the staging checkpoint of a start,
after any repartition and provider move and before Spark's restart check.

Each operator's store is rewritten by one Spark job (spark/state_reshape.py: Spark's state
reader, Spark's cast, Spark's hash, Spark's ``UnsafeRow`` encoding); each task (in the JVM,
sparkpoint's ``StateVersionWriter``; in Python for RocksDB keys stored with a prefix column)
writes its new partition's version ``batch + 1`` under ``<operator>/.migrating/`` in the
provider's files (HDFS-backed: one snapshot file; RocksDB: one SST committed as Spark commits
a version, with the settings of an empty version Spark's provider wrote). Then, on the driver, each
partition's old files are replaced by the new ones (an empty version where no key landed)
and the store's schema file is written for the new schema, byte for byte as Spark writes it,
so that Spark's schema check on restart compares the new job with the migrated state.

A start into a home in a store migrates there (:class:`InStore`), for executors that share no
disk with the driver: Spark's state reader reads the old state at a URL of the store (a
checkpoint the start placed there) and ``StateVersionWriter``'s tasks upload each new
partition's version into the checkpoint being built in the store; the driver keeps the
checkpoint's metadata, writes the empty versions of partitions no key landed in and the
schema files, and moves no state bytes.
"""

from __future__ import annotations

import functools
import os
import shutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sparkpoint.checkpoint import hdfs_state, rocksdb_writer
from sparkpoint.checkpoint.layout import Checkpoint, OperatorDir, StoreLayout
from sparkpoint.checkpoint.operators import StateSchemaFile
from sparkpoint.checkpoint.providers import ROCKSDB, StateProvider
from sparkpoint.checkpoint.rocksdb_keys import KeyEncoding, encode_value
from sparkpoint.errors import CheckpointFormatError
from sparkpoint.progress import phase
from sparkpoint.snapshot.manifest import OperatorEntry
from sparkpoint.spark.driver_disk import check_here
from sparkpoint.spark.rocksdb_template import (
    RocksDbTemplate,
    template_for,
    write_empty_version,
)
from sparkpoint.spark.state_reshape import (
    VersionFiles,
    encoded_store,
    placed_store,
    query_columns,
    sql_types,
    state_frame,
    write_in_jvm,
    write_in_python,
)
from sparkpoint.storage.fileio import join
from sparkpoint.storage.local import write_atomic
from sparkpoint.upgrade.hdfs_repartition import partition_key_fields, run_tasks
from sparkpoint.upgrade.migration_rules import (
    STATE_COLUMNS,
    AggregateMove,
    GroupMerge,
    aggregate_move,
    column_labels,
    dedupe_projection,
    group_merge,
    stripped,
    widens,
)
from sparkpoint.upgrade.provider_move import state_files_removed
from sparkpoint.upgrade.validate import (
    JobShape,
    NewOperator,
    NewStore,
    OperatorRow,
    declared_state,
)

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession

_MIGRATING = ".migrating"


@dataclass
class InStore:
    """A migration in a store: the old state read by Spark at ``read_from`` (the URL of a
    checkpoint holding it), the new versions written under ``write_to`` (the URL of the
    checkpoint being built, whose metadata is the local staging copy's). ``rewritten``
    collects the partition directories written there (relative to the checkpoint): their
    old files are not to be copied into it."""

    read_from: str
    write_to: str
    rewritten: list[str] = field(default_factory=list)


def writes_in_store(checkpoint: Path, batch: int, rows: list[OperatorRow],
                    provider: StateProvider) -> bool:
    """Whether the migrations and seeds of ``rows`` can run in a store: every store they
    write is one ``StateVersionWriter`` writes (RocksDB keys with a prefix column, a session
    window's, are written by Python tasks on the driver's disk)."""
    if provider is not ROCKSDB:
        return True
    written = {row.operator_id for row in rows if (row.action == "resume" and row.reshaped)
               or row.seed_query is not None}
    return not any(operator.key_encoding(layout).prefix_columns
                   for operator in Checkpoint(checkpoint).operators(batch)
                   if operator.operator_id in written for layout in operator.stores())


@dataclass(frozen=True)
class _Written:
    """Where and how a task writes its new partition (picklable: it goes to the tasks)."""

    operator_dir: Path
    store: StoreLayout
    version: int
    keys: KeyEncoding
    rocksdb: RocksDbTemplate | None
    # The rows come from a seed query (whose keys may repeat), not from the state.
    from_query: bool = False

    def partition_dir(self, partition: int) -> Path:
        return self.store.partition_dir(self.operator_dir / _MIGRATING, partition)


def _write_partition(partition: int, keys: pa.Array, values: pa.Array,
                     written: _Written) -> None:
    """A Python task: one new partition's version from its rows (``UnsafeRow`` bytes), for
    RocksDB keys stored with a prefix column (``StateVersionWriter`` writes the others)."""
    check_here(written.operator_dir)
    _write_version(written, written.partition_dir(partition), keys.to_pylist(),
                   values.to_pylist())


def _in_jvm(written: _Written, partitions: int) -> VersionFiles | None:
    """Where ``StateVersionWriter`` writes the new partitions; None where the Python tasks
    do (RocksDB keys stored with a prefix column, which it does not encode)."""
    if written.rocksdb is not None and written.keys.prefix_columns != 0:
        return None
    return VersionFiles(
        [str(written.partition_dir(partition)) for partition in range(partitions)],
        written.version, str(written.operator_dir),
        None if written.rocksdb is None else (written.rocksdb.options,
                                              written.rocksdb.metadata),
        check_repeats=written.from_query)


def _write_version(written: _Written, directory: Path, keys: list[bytes],
                   values: list[bytes]) -> None:
    if len(set(keys)) != len(keys):
        raise CheckpointFormatError(
            f"{directory}: expected one row per key of the state, found "
            f"{len(keys) - len(set(keys))} key(s) given more than once (a seed query must "
            "give each key once)")
    if written.rocksdb is None:
        hdfs_state.write_snapshot(directory, written.version, dict(zip(keys, values,
                                                                       strict=True)))
        return
    import pyarrow as pa

    pairs = sorted((written.keys.encode(key, directory), encode_value(value))
                   for key, value in zip(keys, values, strict=True))
    rocksdb_writer.write_sorted(directory, written.version,
                                pa.array([k for k, _v in pairs], pa.binary()),
                                pa.array([v for _k, v in pairs], pa.binary()),
                                written.rocksdb.options, written.rocksdb.metadata)


def _rewrite_each(spark: SparkSession, checkpoint: Path, batch: int, rows: list[OperatorRow],
                  shape: JobShape, provider: StateProvider,
                  rewrite: Callable[[OperatorRow, OperatorDir, NewOperator,
                                     RocksDbTemplate | None], int]) -> int:
    """``rewrite`` each of ``rows`` (its operator in the checkpoint and in the new job) with
    the RocksDB settings new versions are written with; the keys written."""
    if not rows:
        return 0
    operators = {op.operator_id: op for op in Checkpoint(checkpoint).operators(batch)}
    planned = {op.name: op for op in shape.operators}
    keys = 0
    template = template_for(spark, provider)
    for row in rows:
        operator = operators.get(row.operator_id) if row.operator_id is not None else None
        if operator is None:
            raise CheckpointFormatError(
                f"{checkpoint}: expected operator {row.operator_id} ({row.name}) to "
                "write, found none")
        keys += rewrite(row, operator, planned[row.name], template)
    return keys


def _only_store(checkpoint: Path, row: OperatorRow, operator: OperatorDir,
                new: NewOperator) -> NewStore:
    """The new job's one store of an operator rewritten as a whole, with its schemas."""
    if len(new.stores) != 1 or len(operator.stores()) != 1:
        raise CheckpointFormatError(
            f"{checkpoint}: expected operator {row.operator_id} ({row.name}) with one state "
            "store to write, found several")
    store = new.stores[0]
    if store.key_schema is None or store.value_schema is None:
        raise CheckpointFormatError(
            f"operator '{row.name}': expected the new job's state schema from Spark's "
            "planner, found none")
    return store


def migrate_operators(spark: SparkSession, checkpoint: Path, batch: int,
                      rows: list[OperatorRow], shape: JobShape, provider: StateProvider,
                      old_operators: Mapping[str, OperatorEntry],
                      in_store: InStore | None = None) -> int:
    """Migrate every resumed operator of ``rows`` whose state changes schema
    (``old_operators``: the snapshot's entry of each, by the new job's name); returns the
    keys written. ``in_store``: the old state read, the new written, in a store."""

    def migrate(row: OperatorRow, operator: OperatorDir, new: NewOperator,
                template: RocksDbTemplate | None) -> int:
        old = old_operators[row.name]
        if row.kind == "stream_stream_join":
            return _migrate_join(spark, checkpoint, batch, operator, new, old, template,
                                 in_store)
        store = _only_store(checkpoint, row, operator, new)
        assert store.key_schema is not None and store.value_schema is not None
        move = aggregate_move(old.aggregates, new.aggregates,
                              old.stores[0].value_schema, store.value_schema, old.rows)
        value_sql = _value_sql(move, old.stores[0].value_schema) \
            if isinstance(move, AggregateMove) else "value"
        labels = None
        if row.declared is not None:
            declared = declared_state(old, new, row.declared,
                                      f"state.{row.name}.set")
            value_sql = f"struct({', '.join(declared.columns)})"
            labels = state_labels(old.stores[0].key_schema, old.stores[0].value_schema)
        key_sql, collapse = "key", None
        merged = group_merge(old.spark_operator_name, old.stores[0].key_schema,
                             store.key_schema, old.aggregates, new.aggregates)
        if isinstance(merged, GroupMerge):
            key_sql = "struct(" + ", ".join(
                f"key.`{field['name']}`" for field in store.key_schema["fields"]) + ")"
            collapse = group_collapse(store.value_schema, merged)
        elif dedupe_projection(old.spark_operator_name, old.stores[0].key_schema,
                               store.key_schema) is not None:
            # The key's remaining columns, by name; equal keys keep the latest expiry
            # (dropDuplicatesWithinWatermark's value; dropDuplicates' is empty).
            key_sql = "struct(" + ", ".join(
                f"key.`{field['name']}`" for field in store.key_schema["fields"]) + ")"
            collapse = "max(value)"
        return _migrate_operator(spark, checkpoint, batch, operator, store.key_schema,
                                 key_sql, value_sql, store.value_schema, template, collapse,
                                 labels, in_store=in_store)

    return _rewrite_each(spark, checkpoint, batch,
                         [row for row in rows if row.action == "resume" and row.reshaped],
                         shape, provider, migrate)


def _migrate_join(spark: SparkSession, checkpoint: Path, batch: int, operator: OperatorDir,
                  new: NewOperator, old: OperatorEntry, template: RocksDbTemplate | None,
                  in_store: InStore | None) -> int:
    """A join's buffered-row stores whose value columns changed, rewritten: the same keys
    (so the same partitions), each new value column the old one of its name or null."""
    was_stores = {store.name: store for store in old.stores}
    keys = 0
    for new_store, layout in zip(new.stores, operator.stores(), strict=True):
        was = was_stores[new_store.name]
        if new_store.value_schema is None or new_store.key_schema is None or \
                stripped(was.value_schema) == stripped(new_store.value_schema):
            continue
        names = {f["name"] for f in (was.value_schema or {}).get("fields", [])}
        value_sql = "struct(" + ", ".join(
            f"value.`{field['name']}`" if field["name"] in names else "NULL"
            for field in new_store.value_schema["fields"]) + ")"
        keys += _migrate_operator(spark, checkpoint, batch, operator, new_store.key_schema,
                                  "key", value_sql, new_store.value_schema, template, None,
                                  layout=layout, in_store=in_store)
    return keys


def _positional_type(schema: dict[str, Any] | None) -> str:
    """A struct type of ``schema``'s field types named ``c0``, ``c1`` ... (Spark's DDL)."""
    from pyspark.sql.types import _parse_datatype_json_value

    fields = (schema or {}).get("fields", [])
    return "struct<" + ",".join(
        f"c{index}:{_parse_datatype_json_value(field['type']).simpleString()}"
        for index, field in enumerate(fields)) + ">"


def group_collapse(value_schema: dict[str, Any], merged: GroupMerge) -> str:
    """Spark SQL aggregating the ``value`` of the groups that become one key into one value:
    Spark's ``aggregate`` folds their buffers with each aggregate's own merge."""
    from pyspark.sql.types import _parse_datatype_json_value

    positional = _positional_type(value_schema)
    fields = ", ".join(f"{sql} AS c{index}" for index, sql in enumerate(merged.merges))
    fold = (f"aggregate(collect_list(CAST(value AS {positional})), CAST(NULL AS {positional}), "
            f"(acc, x) -> CASE WHEN acc IS NULL THEN x ELSE struct({fields}) END)")
    return f"CAST({fold} AS {_parse_datatype_json_value(value_schema).simpleString()})"


def merge_sql_problems(spark: SparkSession, rows: list[OperatorRow],
                       old_operators: Mapping[str, OperatorEntry],
                       shape: JobShape) -> list[str]:
    """What Spark finds wrong with the merge of groups that become one (an expression of a
    merge Spark SQL cannot analyse), each analysed over the new state value's type."""
    planned = {op.name: op for op in shape.operators}
    problems = []
    for row in rows:
        old, new = old_operators.get(row.name), planned.get(row.name)
        if old is None or new is None or len(old.stores) != 1 or len(new.stores) != 1:
            continue
        value = new.stores[0].value_schema
        merged = group_merge(old.spark_operator_name, old.stores[0].key_schema,
                             new.stores[0].key_schema, old.aggregates, new.aggregates)
        if not isinstance(merged, GroupMerge) or value is None:
            continue
        found = sql_types(spark, [("value", value)], {"merge": group_collapse(value, merged)})
        if isinstance(found["merge"], str):
            problems.append(f"state.{row.name}: its groups cannot be merged by Spark SQL: "
                            f"{found['merge']}; initialize the operator or keep the grouping")
    return problems


def _positional(column: str, schema: dict[str, Any] | None) -> str:
    """``column`` (a struct) cast to a struct of the same types with names ``c0``, ``c1``
    ...: buffer names repeat (two ``count`` columns), positions do not."""
    return f"CAST({column} AS {_positional_type(schema)})"


def state_labels(key: dict[str, Any] | None,
                 value: dict[str, Any] | None) -> list[tuple[str, str]]:
    """Every column of the old state by its label (migration_rules.column_labels), as Spark
    SQL over the state reader's ``key`` and ``value``."""
    key_labels = column_labels(key, STATE_COLUMNS)
    value_labels = column_labels(value, (*STATE_COLUMNS, *key_labels))
    return ([(label, f"{_positional('key', key)}.c{i}") for i, label in enumerate(key_labels)]
            + [(label, f"{_positional('value', value)}.c{i}")
               for i, label in enumerate(value_labels)])


def _value_sql(move: AggregateMove, old_value: dict[str, Any] | None) -> str:
    """Spark SQL of the new state value (a struct, cast to the new schema by position): each
    column the old value's column at its position, or the aggregate's initial value. The old
    value is first cast to a struct of positional names (``c0``, ``c1`` ...): buffer names
    repeat (two ``count`` columns)."""
    old = _positional("value", old_value)
    parts = [f"{old}.c{column}" if column is not None else str(initial)
             for column, initial in zip(move.old_column, move.initial, strict=True)]
    return f"struct({', '.join(parts)})"


def _migrate_operator(spark: SparkSession, checkpoint: Path, batch: int,
                      operator: OperatorDir, key_schema: dict[str, Any], key_sql: str,
                      value_sql: str, value_schema: dict[str, Any],
                      template: RocksDbTemplate | None, collapse: str | None,
                      labels: list[tuple[str, str]] | None = None,
                      source: DataFrame | None = None,
                      layout: StoreLayout | None = None,
                      in_store: InStore | None = None) -> int:
    """Rewrite one store of ``operator`` (``layout``; its only one by default) from its
    state (or ``source``), as :func:`spark.state_reshape.placed_store` gives the rows; in a
    store with ``in_store``."""
    if layout is None:
        [layout] = operator.stores()
    store_name = None if layout.subdir is None else layout.name
    prefix = operator.key_encoding(layout).prefix_columns
    key_fields = list(key_schema["fields"])
    clustered = [f["name"] for f in partition_key_fields(operator.operator_name, layout.name,
                                                         prefix, key_fields)]
    op_dir = operator.local_path
    written = _Written(op_dir, layout, batch + 1, KeyEncoding(prefix, tuple(key_fields)),
                       template, from_query=source is not None)
    shutil.rmtree(op_dir / _MIGRATING, ignore_errors=True)
    in_jvm = _in_jvm(written, operator.partitions)
    if in_store is not None:
        # Straight into the checkpoint being built in the store: none of its state files
        # are there (its old ones are not copied in).
        assert in_jvm is not None, "prefix-keyed RocksDB stores are migrated on a local disk"
        relative = [layout.partition_dir(op_dir, partition).relative_to(checkpoint).as_posix()
                    for partition in range(operator.partitions)]
        in_store.rewritten.extend(relative)
        in_jvm = VersionFiles([join(in_store.write_to, rel) for rel in relative],
                              in_jvm.version, None, in_jvm.rocksdb, in_jvm.check_repeats)
    read_from: Path | str = checkpoint if in_store is None else in_store.read_from

    def write() -> dict[int, int]:
        placed = placed_store(
            spark, source if source is not None else state_frame(
                spark, read_from, batch, operator.operator_id, labels, store_name),
            key_sql, key_schema, value_sql, value_schema, clustered, operator.partitions,
            collapse)
        if in_jvm is not None:
            return write_in_jvm(spark, placed, in_jvm)
        return write_in_python(encoded_store(spark, placed),
                               functools.partial(_write_partition, written=written))

    with phase(f"migrate: {operator.operator_name} (Spark tasks)"):
        counts = run_tasks(op_dir, write)
    for partition in range(operator.partitions):
        target = layout.partition_dir(op_dir, partition)
        # (A partition whose files are all in the store has no directory here.)
        target.mkdir(parents=True, exist_ok=True)
        state_files_removed(target)
        fresh = written.partition_dir(partition)
        if partition in counts and in_store is not None:
            continue  # written into the store by its task
        if partition in counts and fresh.is_dir():
            for entry in fresh.iterdir():
                os.rename(entry, target / entry.name)
        else:
            write_empty_version(target, written.version, written.rocksdb)
    shutil.rmtree(op_dir / _MIGRATING, ignore_errors=True)
    schema = layout.partition_dir(op_dir, 0) / "_metadata" / "schema"
    write_atomic(schema, StateSchemaFile.build(key_schema, value_schema).to_bytes())
    return sum(counts.values())


def declared_sql_problems(spark: SparkSession, rows: list[OperatorRow],
                          old_operators: Mapping[str, OperatorEntry],
                          shape: JobShape) -> list[str]:
    """What Spark finds wrong with each ``set:`` column: its SQL analysed over the old
    state's columns (by label), its type the new column's, a widening of it, or null."""
    planned = {op.name: op for op in shape.operators}
    problems = []
    for row in rows:
        old = old_operators.get(row.name)
        new = planned.get(row.name)
        if row.declared is None or old is None or new is None or len(old.stores) != 1 \
                or len(new.stores) != 1:
            continue
        key, value = old.stores[0].key_schema, old.stores[0].value_schema
        key_labels = column_labels(key, STATE_COLUMNS)
        readable = [*zip(key_labels, [f["type"] for f in (key or {}).get("fields", [])],
                         strict=True),
                    *zip(column_labels(value, (*STATE_COLUMNS, *key_labels)),
                         [f["type"] for f in (value or {}).get("fields", [])], strict=True)]
        new_value = new.stores[0].value_schema or {}
        wanted = dict(zip(column_labels(new_value),
                          [f["type"] for f in new_value.get("fields", [])], strict=True))
        found = sql_types(spark, readable, {label: sql for label, sql in row.declared.items()
                                            if label in wanted})
        for label, result in found.items():
            where, sql = f"state.{row.name}.set.{label}", row.declared[label]
            if isinstance(result, str):
                problems.append(f"{where}: Spark cannot evaluate {sql!r} over the old state's "
                                f"columns ({', '.join(name for name, _t in readable)}): "
                                f"{result}")
                continue
            got = result["json"]
            if got == "void" or stripped(got) == stripped(wanted[label]) \
                    or widens(got, wanted[label]):
                continue
            problems.append(f"{where}: {sql!r} gives {stripped(got)}, the new state's column "
                            f"is {stripped(wanted[label])}; cast it")
    return problems


def _seed_columns(store_key: dict[str, Any] | None,
                  store_value: dict[str, Any] | None) -> tuple[list[str], list[str]]:
    """The names a seed query's columns go by: the new state's key and value columns as
    `plan` lists them."""
    key_labels = column_labels(store_key)
    return key_labels, column_labels(store_value, tuple(key_labels))


def seed_problems(spark: SparkSession, rows: list[OperatorRow], shape: JobShape) -> list[str]:
    """What Spark finds wrong with each ``mode: seed`` query: one it cannot analyse, a state
    column it does not give, one of another type (a widening or null is taken)."""
    planned = {op.name: op for op in shape.operators}
    problems = []
    for row in rows:
        new = planned.get(row.name)
        if row.seed_query is None or new is None or len(new.stores) != 1:
            continue
        where = f"state.{row.name}.query"
        store = new.stores[0]
        keys, values = _seed_columns(store.key_schema, store.value_schema)
        wanted = dict(zip(keys + values, [f["type"] for schema in (store.key_schema,
                                                                   store.value_schema)
                                          for f in (schema or {}).get("fields", [])],
                          strict=True))
        found = query_columns(spark, row.seed_query)
        if isinstance(found, str):
            problems.append(f"{where}: Spark cannot run the query: {found}")
            continue
        for name, want in wanted.items():
            got = found.get(name)
            if got is None:
                problems.append(f"{where}: expected a column {name} ({stripped(want)}) among "
                                f"the query's columns ({', '.join(found) or 'none'}); the "
                                f"state's columns: key ({', '.join(keys)}), value "
                                f"({', '.join(values)})")
            elif got != "void" and stripped(got) != stripped(want) and not widens(got, want):
                problems.append(f"{where}: its column {name} is {stripped(got)}, the state's is "
                                f"{stripped(want)}; cast it")
    return problems


def seed_operators(spark: SparkSession, checkpoint: Path, batch: int,
                   rows: list[OperatorRow], shape: JobShape, provider: StateProvider,
                   in_store: InStore | None = None) -> int:
    """Write the state of every ``mode: seed`` operator from its query's rows (assembled
    empty as a new operator); returns the keys written. ``in_store``: written in a store."""

    def seed(row: OperatorRow, operator: OperatorDir, new: NewOperator,
             template: RocksDbTemplate | None) -> int:
        store = _only_store(checkpoint, row, operator, new)
        assert row.seed_query is not None and store.value_schema is not None
        key_names, value_names = _seed_columns(store.key_schema, store.value_schema)
        return _migrate_operator(
            spark, checkpoint, batch, operator, store.key_schema or {},
            "struct(" + ", ".join(f"`{name}`" for name in key_names) + ")",
            "struct(" + ", ".join(f"`{name}`" for name in value_names) + ")",
            store.value_schema, template, None, source=spark.sql(row.seed_query),
            in_store=in_store)

    return _rewrite_each(spark, checkpoint, batch,
                         [row for row in rows if row.seed_query is not None], shape, provider,
                         seed)
