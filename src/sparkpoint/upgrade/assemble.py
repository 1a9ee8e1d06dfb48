"""Assemble a new job's checkpoint from the snapshots a validated resume point names.

The new checkpoint continues at batch N = the newest batch among the snapshots used, so that
no source goes back in time; each resumed operator's state is copied to the new job's operator
id (its metadata patched) with its state files renumbered so that version N+1 is the one
batch N commits (every file of an HDFS-provider chain shifts by the same amount). Resumed
sources keep their offsets under their new names (offsets v2, whose recorded conf must say
``enableSourceEvolution=true``: Spark restores it on restart); sources that initialize at
``earliest`` are left out of the offsets log, which Spark treats as a new source starting at
its own beginning; other starts are written as the source's committed offset (and,
for a file source, a log entry marking the files before the start as read). New operators get
their metadata and an empty version N+1 in every partition. Snapshots are only read.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from sparkpoint.checkpoint import hdfs_state
from sparkpoint.checkpoint.layout import Checkpoint
from sparkpoint.checkpoint.logs import (
    CommitLogEntry,
    OffsetLogEntry,
    QueryMetadata,
    SourceOffset,
    compact_json,
    named_sources_metadata,
)
from sparkpoint.checkpoint.operators import OperatorMetadata
from sparkpoint.checkpoint.state_format import to_plain_names, to_unique_ids
from sparkpoint.errors import ValidationError
from sparkpoint.progress import track
from sparkpoint.snapshot.manifest import CHECKPOINT_SUBDIR, Manifest
from sparkpoint.sources.positions import ResolvedPosition
from sparkpoint.storage.local import link_or_copy, write_atomic
from sparkpoint.storage.location import StorePath, copy_into
from sparkpoint.upgrade.validate import UpgradePlan

_VERSIONED = re.compile(r"^(\d+)\.(zip|snapshot|delta|changelog)$")

# Writes an empty committed state store version into a partition (or store) directory.
EmptyStateWriter = Callable[[Path, int], None]


@dataclass(frozen=True)
class NewOperatorLayout:
    """What Spark's operator metadata needs for an operator that starts empty."""

    operator_id: int
    spark_operator_name: str
    stores: tuple[tuple[str, int], ...]  # (store name, numColsPrefixKey)
    # transformWithState: metadata v2 and schema files Spark wrote when planning the job.
    v2_files: tuple[tuple[str, bytes], ...] = ()


@dataclass(frozen=True)
class UsedSnapshot:
    manifest: Manifest
    directory: Path
    # State data files left in the snapshot store (copied inside the store when the
    # checkpoint is published): path relative to ``directory`` -> the file's URL.
    in_store: Mapping[str, str] = field(default_factory=dict)

    @property
    def checkpoint(self) -> Checkpoint:
        return Checkpoint(self.directory / CHECKPOINT_SUBDIR)

    def state_in_store(self, operator_dir: Path) -> dict[Path, str]:
        """The operator's files left in the store: where they would be locally -> URL."""
        found = {}
        for rel, url in self.in_store.items():
            path = self.directory / rel
            if operator_dir in path.parents:
                found[path] = url
        return found


@dataclass(frozen=True)
class AssembleResult:
    batch_id: int | None
    partitions: int | None
    # Files of the new checkpoint still to be copied inside the store: path relative to
    # the checkpoint -> the snapshot's file URL.
    in_store: Mapping[str, str] = field(default_factory=dict)


def fetch_into_place(placed: dict[Path, str]) -> None:
    """Fetch files left in a store to their local paths (several at once); ``placed`` is
    emptied: every file is local now."""
    copy_into([(StorePath.of(url), path) for path, url in placed.items()])
    placed.clear()


def _shifted_name(name: str, shift: int) -> str:
    match = _VERSIONED.match(name)
    if not match or shift == 0:
        return name
    return f"{int(match.group(1)) + shift}.{match.group(2)}"


def _copy_operator(src: Path, dst: Path, new_id: int, shift: int,
                   in_store: Mapping[Path, str], placed: dict[Path, str]) -> None:
    """Link the operator's files from ``src`` into ``dst`` under their new names; those
    ``in_store`` (not fetched) are only noted in ``placed``: new path -> URL."""
    delta_dirs: set[Path] = set()
    snapshot_dirs: set[Path] = set()
    local = [path for path in src.rglob("*") if path.is_file()]
    for path in track(sorted([*local, *in_store]), f"restore: state of operator {new_id}",
                      unit="file"):
        rel = path.relative_to(src)
        if rel.parent.as_posix() == "_metadata/v2" and rel.name.isdigit():
            # transformWithState's metadata is kept per batch: it moves with the batches.
            name = str(int(rel.name) + shift)
        else:
            name = _shifted_name(rel.name, shift)
        if path in in_store:
            placed[dst / rel.parent / name] = in_store[path]
        else:
            link_or_copy(path, dst / rel.parent / name)
        if name.endswith(".delta"):
            delta_dirs.add(dst / rel.parent)
        elif name.endswith(".snapshot"):
            snapshot_dirs.add(dst / rel.parent)
    if shift > 0:
        # A delta chain without a snapshot file starts from the empty state of version 0.
        # Shifted, it starts at shift + 1, and Spark, finding no snapshot file at or below
        # the version it loads, would look for the deltas 1..shift: an empty snapshot file
        # at version ``shift`` is the same empty start under the new numbers.
        for directory in sorted(delta_dirs - snapshot_dirs):
            hdfs_state.write_snapshot(directory, shift, {})
    v2 = dst / "_metadata" / "v2"
    metadata_files = [dst / "_metadata" / "metadata"] if not v2.is_dir() else sorted(
        p for p in v2.iterdir() if p.name.isdigit())
    for meta in metadata_files:
        metadata = OperatorMetadata.parse(meta.read_bytes(), str(meta))
        # Replace the link by a new file: the snapshot's copy must keep its own id.
        write_atomic(meta, metadata.with_operator_id(new_id).to_bytes())


def _shift_versions(store_dir: Path, shift: int) -> None:
    """Renumber a store directory's plain-named state files by ``shift`` versions (from the
    newest down, so that no name is taken twice)."""
    named = [(int(m.group(1)), path) for path in store_dir.iterdir()
             if (m := _VERSIONED.match(path.name))]
    for _version, path in sorted(named, reverse=True):
        path.rename(path.with_name(_shifted_name(path.name, shift)))


def _base_for_changelogs(store_dir: Path, empty_state: EmptyStateWriter,
                         placed: Mapping[Path, str] | None = None) -> None:
    """RocksDB changelogs renumbered without a zip below them (changelog checkpointing writes
    its first zip after several versions) started from the empty store at version 0; Spark,
    finding no zip at or below the version it loads, would replay from version 1, which is
    gone. The same empty start under the new numbers: an empty zip just below the first
    changelog. ``placed``: files of the directory still to be copied inside a store."""
    names = [path.name for path in store_dir.iterdir()] if store_dir.is_dir() else []
    names += [path.name for path in (placed or {}) if path.parent == store_dir]
    versions = [(int(m.group(1)), m.group(2)) for name in names
                if (m := _VERSIONED.match(name))]
    changelogs = [version for version, kind in versions if kind == "changelog"]
    if not changelogs or min(changelogs) == 1:
        return
    first = min(changelogs)
    zips = [version for version, kind in versions if kind == "zip"]
    if not any(version < first for version in zips):
        empty_state(store_dir, first - 1)


def _state_dirs(op_dir: Path, placed: Mapping[Path, str]) -> set[Path]:
    """The directories of an operator's versioned state files, here or still to be copied
    inside a store."""
    return {path.parent for path in [*op_dir.rglob("*"), *placed]
            if op_dir in path.parents and _VERSIONED.match(path.name)}


def _store_dirs(op_dir: Path) -> list[list[Path]]:
    """Per partition, the store directories of an operator's state (one unless a join's),
    in the order format v2's commit names their ids: a join's by name, which is its
    metadata's order (left- before right-, keyToNumValues before keyWithIndexToValue)."""
    partitions = sorted((p for p in op_dir.iterdir() if p.name.isdigit()),
                        key=lambda p: int(p.name))
    found = []
    for pdir in partitions:
        stores = sorted(d for d in pdir.iterdir() if d.is_dir() and d.name not in
                        ("SSTs", "_metadata"))
        found.append(stores or [pdir])
    return found


def _resumed_ids(plan: UpgradePlan, snapshots: Mapping[str, UsedSnapshot]
                 ) -> dict[int, tuple[list[list[str]], int]]:
    """Operators resumed from format v2 state: new operator id -> (the ids its snapshot's
    commit names, per partition and store; that snapshot's batch)."""
    found = {}
    for row in plan.operators:
        if row.operator_id is None or row.action != "resume" or row.origin is None:
            continue
        snap = snapshots[row.origin["snapshot"]]
        old = snap.manifest.operator(row.origin["operator"])
        assert old is not None
        ids = snap.checkpoint.commit(snap.manifest.batch_id).state_unique_ids.get(
            old.operator_id)
        if ids is not None:
            found[row.operator_id] = (ids, snap.manifest.batch_id)
    return found


def _state_format(out: Path, batch: int, plan: UpgradePlan,
                  snapshots: Mapping[str, UsedSnapshot], wanted: int | None,
                  empty_state: EmptyStateWriter) -> dict[int, list[list[str]]] | None:
    """Put every operator's state of the new checkpoint in one format: ``wanted`` (the
    job's stateStore.checkpointFormatVersion when it gives one), else the resumed state's.
    Returns the ids of format v2 per operator id (per partition, per store), None for v1.

    Format v2 files are named by version and id (a changelog's lineage names its
    predecessors so): state that moves to another batch (several snapshots, new batch
    numbers) is given plain names at its own version, renumbered as format v1's is, and
    named by new ids at the new version."""
    source_ids: dict[int, list[list[str]] | None] = {
        row.operator_id: None for row in plan.operators if row.operator_id is not None}
    resumed_v2 = _resumed_ids(plan, snapshots)
    for op, (ids, snap_batch) in resumed_v2.items():
        if snap_batch == batch:
            source_ids[op] = ids
            continue
        for partition, stores in enumerate(_store_dirs(out / "state" / str(op))):
            for index, store_dir in enumerate(stores):
                to_plain_names(store_dir, snap_batch + 1, ids[partition][index])
                _shift_versions(store_dir, batch - snap_batch)
                _base_for_changelogs(store_dir, empty_state)
    resumed = {op: ids for op, ids in source_ids.items() if ids is not None}
    target = wanted or (2 if resumed_v2 else 1)
    if target == 1:
        for op, ids in resumed.items():
            for partition, stores in enumerate(_store_dirs(out / "state" / str(op))):
                for index, store_dir in enumerate(stores):
                    to_plain_names(store_dir, batch + 1, ids[partition][index])
        return None
    found: dict[int, list[list[str]]] = {}
    for op, kept in source_ids.items():
        if kept is not None:
            found[op] = kept
            continue
        found[op] = [[to_unique_ids(store, batch + 1) for store in stores]
                     for stores in _store_dirs(out / "state" / str(op))]
    return found


def _operator_metadata(layout: NewOperatorLayout, partitions: int) -> bytes:
    body = {
        "operatorInfo": {"operatorId": layout.operator_id,
                         "operatorName": layout.spark_operator_name},
        "stateStoreInfo": [
            {"storeName": name, "numColsPrefixKey": prefix, "numPartitions": partitions}
            for name, prefix in layout.stores
        ],
    }
    return f"v1\n{compact_json(body)}".encode()


def used_snapshots(plan: UpgradePlan) -> list[str]:
    """Snapshots whose state or offsets a plan resumes, sorted."""
    return sorted(
        {row.origin["snapshot"] for row in plan.sources
         if row.origin is not None and row.action == "resume"}
        | {row.origin["snapshot"] for row in plan.operators
           if row.origin is not None and row.action == "resume"}
    )


def assemble_checkpoint(
    out: Path,
    plan: UpgradePlan,
    snapshots: Mapping[str, UsedSnapshot],
    new_operators: Mapping[str, NewOperatorLayout],
    empty_state: EmptyStateWriter,
    positions: Mapping[str, ResolvedPosition] | None = None,
    batch_id: int | None = None,
    state_format: int | None = None,
    raised_offsets: Mapping[str, str] | None = None,
) -> AssembleResult:
    """Write the new checkpoint into ``out`` (a new directory) for a valid ``plan``.

    The checkpoint holds batch ``batch_id`` as committed (default: the newest snapshot's
    batch); another id renumbers every snapshot's batches by the same shift that merging
    snapshots of different batches uses. Nothing is written when the plan resumes nothing:
    the job then starts like a new one.
    """
    if not plan.ok:
        raise ValidationError("the resume point has problems: " + "; ".join(plan.problems))
    used = used_snapshots(plan)
    if not used:
        return AssembleResult(None, None)
    newest = max(snapshots[name].manifest.batch_id for name in used)
    primary = next(snapshots[name] for name in used
                   if snapshots[name].manifest.batch_id == newest)
    batch = newest if batch_id is None else batch_id
    if batch < newest:
        raise ValidationError(f"the new checkpoint's batch {batch} would come before the "
                              f"snapshots' batch {newest}; a batch id only goes forward")
    out.mkdir(parents=True)
    placed = _write(out, batch, primary, plan, snapshots, new_operators, empty_state, used,
                    positions or {}, state_format, raised_offsets or {})
    return AssembleResult(batch, primary.manifest.shuffle_partitions,
                          {path.relative_to(out).as_posix(): url
                           for path, url in placed.items()})


def _write(
    out: Path,
    batch: int,
    primary: UsedSnapshot,
    plan: UpgradePlan,
    snapshots: Mapping[str, UsedSnapshot],
    new_operators: Mapping[str, NewOperatorLayout],
    empty_state: EmptyStateWriter,
    used: list[str],
    positions: Mapping[str, ResolvedPosition],
    state_format: int | None,
    raised_offsets: Mapping[str, str],
) -> dict[Path, str]:
    """Returns the state files left in the snapshot store: new path -> URL."""
    watermark = min(snapshots[name].manifest.watermark_ms for name in used)
    placed: dict[Path, str] = {}

    # Offsets N-1 and N: Spark rebuilds the committed offsets from both on restart.
    for offset_batch, back in ((batch - 1, 1), (batch, 0)):
        if offset_batch < 0:
            continue
        base_ckpt = primary.checkpoint
        base_batch = primary.manifest.batch_id - back
        if base_batch < 0:
            continue
        base = base_ckpt.offsets(base_batch)
        metadata = base.metadata
        if back == 0:
            # With several snapshots the slowest event time wins, as Spark's default
            # multipleWatermarkPolicy (min) would have it: no row becomes late by the merge.
            metadata["batchWatermarkMs"] = min(
                snapshots[n].checkpoint.offsets(snapshots[n].manifest.batch_id)
                .batch_watermark_ms for n in used
            )
        # Whatever the snapshot's entry says (a plain checkpoint's says "false"), the new
        # entries key sources by name and Spark must read them so.
        metadata = named_sources_metadata(metadata)
        lines = []
        for row in plan.sources:
            if row.action != "resume" or row.origin is None:
                continue
            snap = snapshots[row.origin["snapshot"]]
            snap_batch = snap.manifest.batch_id - back
            if snap_batch < 0:
                continue
            offsets = snap.checkpoint.offsets(snap_batch).source_offsets()
            # Only the last batch's: Spark starts the next batch at its offsets.
            raised = raised_offsets.get(row.name) if back == 0 else None
            lines.append(SourceOffset(row.name, raised or offsets.get(row.origin["source"])))
        # New sources that start past their beginning hold that position as if committed.
        lines.extend(SourceOffset(name, pos.offset_json) for name, pos in positions.items())
        entry = OffsetLogEntry(2, compact_json(metadata), tuple(lines))
        write_atomic(out / "offsets" / str(offset_batch), entry.to_bytes())
    write_atomic(out / "metadata", QueryMetadata.for_id(str(uuid.uuid4())).to_bytes())

    for row in plan.sources:
        if row.action != "resume" or row.origin is None:
            continue
        snap = snapshots[row.origin["snapshot"]]
        log = snap.checkpoint.local_root / "sources" / row.origin["source"]
        if log.is_dir():
            for path in sorted(log.iterdir()):
                if path.is_file():
                    link_or_copy(path, out / "sources" / row.name / path.name)

    for name, pos in positions.items():
        for file_name, data in pos.log_files.items():
            write_atomic(out / "sources" / name / file_name, data)

    partitions = primary.manifest.shuffle_partitions or 0
    for op_row in plan.operators:
        if op_row.action == "resume" and op_row.origin is not None:
            snap = snapshots[op_row.origin["snapshot"]]
            old = snap.manifest.operator(op_row.origin["operator"])
            assert old is not None and op_row.operator_id is not None
            shift = batch - snap.manifest.batch_id
            src = snap.checkpoint.local_root / "state" / str(old.operator_id)
            dst = out / "state" / str(op_row.operator_id)
            _copy_operator(src, dst, op_row.operator_id, shift, snap.state_in_store(src),
                           placed)
            if shift > 0:
                for store_dir in _state_dirs(dst, placed):
                    _base_for_changelogs(store_dir, empty_state, placed)
        elif op_row.action == "initialize":
            layout = new_operators[op_row.name]
            op_dir = out / "state" / str(layout.operator_id)
            if layout.v2_files:
                for rel, data in layout.v2_files:
                    if rel.startswith("_metadata/v2/"):
                        # Metadata v2 is read as of the batch the job continues from.
                        rel = f"_metadata/v2/{batch}"
                    write_atomic(op_dir / rel, data)
            else:
                write_atomic(op_dir / "_metadata" / "metadata",
                             _operator_metadata(layout, partitions))
            for store, _prefix in layout.stores:
                for partition in range(partitions):
                    pdir = op_dir / str(partition)
                    if len(layout.stores) > 1 or store != "default":
                        pdir = pdir / store
                    empty_state(pdir, batch + 1)

    body: dict[str, object] = {"nextBatchWatermarkMs": watermark}
    formats = {bool(snapshots[name].checkpoint.commit(snapshots[name].manifest.batch_id)
                    .state_unique_ids) for name in used}
    moved_v2 = any(snap_batch != batch
                   for _ids, snap_batch in _resumed_ids(plan, snapshots).values())
    if placed and (state_format is not None or len(formats) > 1 or moved_v2):
        # A move between formats, or of format v2 state to another batch, renames and
        # rewrites the state files here: fetch them.
        fetch_into_place(placed)
    unique_ids = _state_format(out, batch, plan, snapshots, state_format, empty_state)
    if unique_ids is not None:
        # Checkpoint format v2: Spark loads each partition's state by the id its latest
        # commit names, and restarts in the format the commit has.
        body["stateUniqueIds"] = {str(op): ids for op, ids in sorted(unique_ids.items())}
    commit = CommitLogEntry(1 if unique_ids is None else 2, compact_json(body))
    write_atomic(out / "commits" / str(batch), commit.to_bytes())
    return placed


def to_format_v2(out: Path, batch: int) -> None:
    """Give the state version ``batch + 1`` of every store of the checkpoint built in
    ``out`` (format v1 names) format v2 names and record their ids in commit ``batch``, as
    a start in format v2 leaves it: a migration rewrites state under plain names first."""
    ids: dict[str, list[list[str]]] = {}
    state = out / "state"
    for op_dir in sorted((p for p in state.iterdir() if p.name.isdigit()),
                         key=lambda p: int(p.name)) if state.is_dir() else []:
        ids[op_dir.name] = [[to_unique_ids(store, batch + 1) for store in stores]
                            for stores in _store_dirs(op_dir)]
    path = out / "commits" / str(batch)
    body = CommitLogEntry.parse(path.read_bytes(), str(path)).metadata
    body["stateUniqueIds"] = ids
    write_atomic(path, CommitLogEntry(2, compact_json(body)).to_bytes())
