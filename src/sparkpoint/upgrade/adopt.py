"""Adopting a checkpoint that plain Spark wrote: its sources and operators matched with those
of the sparkpoint version of the same query, so that a snapshot of it carries their names.

Spark identifies sources by position (offsets log v1) unless they were named, and stateful
operators by position (ids assigned top-down from the sink): the match is by position, then
checked by kind and state schema. Every mismatch is reported; nothing is guessed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from sparkpoint.checkpoint.layout import Checkpoint
from sparkpoint.snapshot.manifest import OperatorEntry, StoreEntry, operator_kind
from sparkpoint.upgrade.validate import JobShape, NewSource, compatibility


@dataclass
class Adoption:
    """Names for the checkpoint's sources and operators, or the problems that prevent it."""

    source_names: dict[str, str] = field(default_factory=dict)
    operator_names: dict[int, str] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)


def _offset_kind(offset: str | None) -> str | None:
    """The kind of source an offset belongs to, where its shape tells; None when unknown."""
    if offset is None:
        return None
    try:
        value = json.loads(offset)
    except ValueError:
        return None
    if isinstance(value, dict) and set(value) == {"logOffset"}:
        return "file"
    if isinstance(value, dict) and value and all(
            isinstance(parts, dict) and all(str(p).isdigit() for p in parts)
            for parts in value.values()):
        return "kafka"
    return None


def _match_sources(checkpoint: Checkpoint, batch: int, sources: tuple[NewSource, ...],
                   adoption: Adoption) -> None:
    offsets = checkpoint.offsets(batch).source_offsets()
    keys = list(offsets)
    if len(keys) != len(sources):
        adoption.problems.append(
            f"sources: the checkpoint has {len(keys)} source(s) ({', '.join(keys) or 'none'}), "
            f"the job has {len(sources)} ({', '.join(s.name for s in sources) or 'none'}); "
            "give the job file of the query that wrote the checkpoint")
        return
    by_name = {source.name: source for source in sources}
    named = all(key in by_name for key in keys)
    for index, key in enumerate(keys):
        # Sources the plain job named keep their names; positional ones take the job's.
        source = by_name[key] if named else sources[index]
        found = _offset_kind(offsets[key])
        if found is not None and source.kind in ("file", "kafka") and found != source.kind:
            adoption.problems.append(
                f"source {index} of the checkpoint holds a {found} offset ({offsets[key]}), "
                f"the job's source {index} '{source.name}' is a {source.kind} source; the "
                "job's sources must be those of the query, in the same order")
            continue
        adoption.source_names[key] = source.name


def _checkpoint_operator(checkpoint: Checkpoint, operator_id: int) -> OperatorEntry | None:
    for operator in checkpoint.operators():
        if operator.operator_id != operator_id:
            continue
        stores = []
        for store in operator.stores():
            schema = operator.schema(store)
            stores.append(StoreEntry(name=store.name,
                                     key_schema=schema.key_schema if schema else None,
                                     value_schema=schema.value_schema if schema else None))
        return OperatorEntry(
            name=f"{operator.operator_name}_{operator.operator_id}",
            operator_id=operator.operator_id, kind=operator_kind(operator.operator_name),
            spark_operator_name=operator.operator_name, stores=stores,
            partitions=operator.metadata.num_partitions, rows=None, bytes=0)
    return None


def adopt(checkpoint: Checkpoint, shape: JobShape) -> Adoption:
    """Match a plain Spark checkpoint's latest committed batch with a planned job."""
    adoption = Adoption()
    batch = checkpoint.require_latest_committed_batch()
    _match_sources(checkpoint, batch, shape.sources, adoption)
    planned_ids = {op.operator_id for op in shape.operators}
    for operator in checkpoint.operators():
        if operator.operator_id not in planned_ids:
            adoption.problems.append(
                f"operator {operator.operator_id} of the checkpoint "
                f"({operator_kind(operator.operator_name)}) has no counterpart in the job: the "
                "job has fewer stateful operators than the query that wrote the checkpoint")
    for new in shape.operators:
        old = _checkpoint_operator(checkpoint, new.operator_id)
        if old is None:
            adoption.problems.append(
                f"operator '{new.name}' (id {new.operator_id}, {new.kind}): the checkpoint has "
                "no state for this id; the job has a stateful operator the query lacked")
            continue
        reason = compatibility(old, new)
        if reason is not None:
            adoption.problems.append(
                f"operator '{new.name}' (id {new.operator_id}): {reason}; the job must be the "
                "same query as the one that wrote the checkpoint")
            continue
        adoption.operator_names[new.operator_id] = new.name
    return adoption
