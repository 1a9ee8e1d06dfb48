"""Export the latest committed batch of a checkpoint as a snapshot, without a JVM.

1. Pick batch N = the newest ``commits/N``; everything Spark wrote for N is immutable from
   then on, so a running job can keep going while we copy.
2. Link (copy where linking is impossible) ``metadata``, ``offsets/N-1``, ``offsets/N``,
   ``commits/N`` and the source logs up to the committed offsets.
3. Per operator link its metadata and schema files and one self-contained state version
   N+1 per partition: RocksDB's zip and the SSTs it lists; for the HDFS provider the newest
   ``<s>.snapshot`` with ``s <= N+1`` (if any) and the deltas ``s+1 .. N+1``, exactly the
   files Spark reads to load N+1, linked unchanged (no compaction: that would decode every
   row in Python).
4. Write the manifest (checksums of every file) last, in the staging directory the caller
   publishes by renaming.
"""

from __future__ import annotations

import datetime as dt
import json
import shutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeGuard

from sparkpoint.aggregates import AggregateState
from sparkpoint.checkpoint import hdfs_state
from sparkpoint.checkpoint.layout import SHUFFLE_PARTITIONS_CONF, Checkpoint, OperatorDir
from sparkpoint.checkpoint.logs import (
    MAX_WATERMARK_MS,
    CommitLogEntry,
    OffsetLogEntry,
    SourceOffset,
    compact_json,
    named_sources_metadata,
)
from sparkpoint.checkpoint.providers import HDFS_BACKED, ROCKSDB, StateProvider
from sparkpoint.checkpoint.retained import describe_range, snapshottable_batches
from sparkpoint.checkpoint.rocksdb_state import RocksDBVersion, locate_version
from sparkpoint.checkpoint.source_log import file_source_log_offset
from sparkpoint.checkpoint.state_files import listed_partition, readable_partition
from sparkpoint.crash_points import crash_point, steps
from sparkpoint.errors import BatchNotHeldError, CheckpointFormatError, StateRetentionError
from sparkpoint.losses import AcceptedLoss
from sparkpoint.progress import track
from sparkpoint.snapshot.manifest import (
    CHECKPOINT_SUBDIR,
    MANIFEST_FILE,
    FileEntry,
    Manifest,
    OperatorEntry,
    SourceEntry,
    StoreEntry,
    operator_kind,
)
from sparkpoint.storage.fileio import FileIO, StoredFile
from sparkpoint.storage.local import checksum_of, is_hidden_or_temp, write_atomic
from sparkpoint.storage.location import Location, StorePath, copy_into
from sparkpoint.windows import WindowSpec

# Listings of a state store directory before giving up on files deleted under our feet.
_RELIST_ATTEMPTS = 3
# Times an export starts over from a newer batch when a running job's cleanup deleted a file
# before it was linked (see export_checkpoint).
EXPORT_ATTEMPTS = 3


@dataclass
class _Plan:
    """Files to copy (source -> path relative to the snapshot's checkpoint dir)."""

    copies: list[tuple[Location, str]] = field(default_factory=list)
    written: list[str] = field(default_factory=list)


@dataclass
class InStoreCopies:
    """State files a snapshot store copies inside the store the checkpoint is in (S3's
    CopyObject) rather than through this process: filled by the export with each such file
    (path relative to the snapshot's checkpoint dir -> the file as the store lists it).

    Only the files that make up state versions (SSTs, zips, deltas, snapshot files) go this
    way: written once under a name of their own, their ETag and size identify their
    content. Logs, metadata and the files the export reads (zips for their SST list and
    key count) still pass through the process, as do the deltas of an HDFS-provider
    operator whose rows no progress of the batch records (they are counted)."""

    io: FileIO
    files: dict[str, StoredFile] = field(default_factory=dict)
    # Files too large for one copy request (S3's CopyObject takes up to 5 GiB), fetched as
    # before: path relative to the snapshot's checkpoint dir -> source.
    fetched: dict[str, StorePath] = field(default_factory=dict)

    def takes(self, location: Location) -> TypeGuard[StorePath]:
        return isinstance(location, StorePath) and location.io is self.io

    def take(self, pdir: StorePath, prel: str, names: list[str],
             listed: dict[str, StoredFile]) -> int:
        """Note a partition's files for copying; return their bytes. A file the listing
        lacks was deleted by a running job's cleanup: FileNotFoundError, which makes the
        export start over from a newer batch."""
        total = 0
        for name in names:
            found = listed.get(name)
            if found is None or found.etag is None:
                raise FileNotFoundError(2, "gone from the store", str(pdir / name))
            if found.bytes > COPY_REQUEST_LIMIT:
                self.fetched[f"{prel}/{name}"] = pdir / name
            else:
                self.files[f"{prel}/{name}"] = found
            total += found.bytes
        return total


COPY_REQUEST_LIMIT = 5 * 2**30


@dataclass(frozen=True)
class JobInfo:
    """What the job registry knows that the checkpoint does not."""

    job: str
    operator_names: Mapping[int, str]
    job_file: str | None
    params: Mapping[str, str]
    spark_version: str
    # Per Spark operator id, the window its keys hold (see sparkpoint.windows).
    operator_windows: Mapping[int, WindowSpec | None] = field(default_factory=dict)
    # Per Spark operator id, an aggregation's functions (see sparkpoint.aggregates).
    operator_aggregates: Mapping[int, tuple[AggregateState, ...] | None] = \
        field(default_factory=dict)
    # Names for the checkpoint's sources ('0', '1' ... in a checkpoint written without
    # source names): the snapshot holds them named (offsets v2, sources/<name>), as a
    # sparkpoint job writes them. Empty: the names the checkpoint has.
    source_names: Mapping[str, str] = field(default_factory=dict)
    # Per batch, the state rows of each operator from Spark's progress (in Spark's order),
    # as the running job recorded them (runtime/progress.py). Empty: rows are counted.
    state_rows: Mapping[int, list[tuple[str, int]]] = field(default_factory=dict)
    # An import's input its sources no longer held, accepted (--accept-data-loss).
    accepted_loss: tuple[AcceptedLoss, ...] = ()
    # Per Spark operator id, the rows Spark's state reader counted in its tasks (an import
    # of a checkpoint whose state files are copied inside its store, never read here:
    # spark/state_rows.py). They spare counting the rows from the files, as progress does.
    counted_rows: Mapping[int, int] = field(default_factory=dict)

    @classmethod
    def of_snapshot(cls, manifest: Manifest) -> JobInfo:
        """What a snapshot written from another one (a prune) keeps of it."""
        return cls(
            job=manifest.job,
            operator_names={entry.operator_id: entry.name for entry in manifest.operators},
            operator_windows={entry.operator_id: entry.window for entry in manifest.operators},
            operator_aggregates={entry.operator_id: entry.aggregates
                                 for entry in manifest.operators},
            job_file=manifest.job_file,
            params=dict(manifest.params),
            spark_version=manifest.spark_version,
        )


# Operators whose one store holds one row per state key: Spark's numRowsTotal is then the
# count of what the snapshot holds. Others (joins' four stores, sessions, transformWithState's
# column families) are counted from their files as before.
ROWS_FROM_PROGRESS_KINDS = ("aggregation", "dedupe", "dedupe_within_watermark",
                            "flat_map_groups_with_state")


def rows_from_progress(recorded: list[tuple[str, int]] | None,
                       operators: list[OperatorDir]) -> dict[int, int]:
    """Operator id -> rows, from the batch's progress when it lists exactly the checkpoint's
    operators (Spark reports them in operator id order); empty otherwise."""
    ordered = sorted(operators, key=lambda operator: operator.operator_id)
    if recorded is None or [name for name, _ in recorded] != [
            operator.operator_name for operator in ordered]:
        return {}
    known = {}
    for operator, (_name, rows) in zip(ordered, recorded, strict=True):
        if operator_kind(operator.operator_name) in ROWS_FROM_PROGRESS_KINDS:
            steps.info("operator %s: %s rows, from the batch's progress", operator.operator_id,
                       rows)
            known[operator.operator_id] = rows
    return known


def _trimmed_source_log(source_dir: Location, offset: str | None) -> list[Location]:
    """Source log files up to the committed offset (later ones belong to uncommitted batches)."""
    limit = file_source_log_offset(offset)
    keep = []
    entries: list[Location] = list(source_dir.iterdir())
    for entry in sorted(entries, key=lambda p: p.name):
        # Spark's source log directories hold files only: no look at each (a request each
        # in a store).
        if is_hidden_or_temp(entry.name):
            continue
        stem = entry.name.removesuffix(".compact")
        # A compact file folds earlier entries in; it must stay even past the limit.
        if limit is not None and stem.isdigit() and int(stem) > limit and stem == entry.name:
            continue
        keep.append(entry)
    return keep


def _plan_metadata_files(operator: OperatorDir, rel: str, plan: _Plan) -> None:
    for sub in ("_metadata", "_stateSchema"):
        base = operator.path / sub
        if not base.is_dir():
            continue
        files: list[Location] = list(base.rglob("*"))
        for path in sorted(files, key=str):
            if not path.name.startswith(".") and (isinstance(path, StorePath) or path.is_file()):
                plan.copies.append((path, f"{rel}/{str(path)[len(str(operator.path)) + 1:]}"))


def _link_hdfs_version(pdir: Location, out_dir: Path, version: int) -> hdfs_state.VersionFiles:
    """Link the files Spark reads to load ``version`` (a snapshot file and the deltas after
    it, or the whole delta chain), unchanged, into ``out_dir``.

    A running job's maintenance may write a newer snapshot file and delete the files it
    replaces between the listing and the links: the listing is then taken again.
    """
    for _attempt in range(_RELIST_ATTEMPTS):
        files = hdfs_state.files_for_version(pdir, version)
        try:
            copy_into([(pdir / name, out_dir / name) for name in files.names()])
        except FileNotFoundError:
            for name in files.names():
                (out_dir / name).unlink(missing_ok=True)
            continue
        return files
    raise CheckpointFormatError(
        f"{pdir}: the state files of version {version} kept disappearing while they were "
        f"linked ({_RELIST_ATTEMPTS} listings); Spark's maintenance deletes them once newer "
        "versions exist. Snapshot a stopped job, or raise "
        "spark.sql.streaming.minBatchesToRetain"
    )


def _link_rocksdb_version(pdir: Location, out_checkpoint: Path, prel: str, version: int,
                          unique_id: str | None, plan: _Plan) -> tuple[RocksDBVersion, int]:
    """Link (fetch, from a store) a RocksDB partition's files of ``version`` into the
    snapshot; return the version and their bytes."""
    located = locate_version(readable_partition(pdir, version), version, unique_id)
    names = located.relative_files()
    if unique_id is not None:
        # Format v2 files carry Spark's own checksum sidecar (<name>.crc), which it verifies
        # on reading.
        names += [f"{name}.crc" for name in names if (pdir / f"{name}.crc").is_file()]
    # Linked at once, not with the other copies: from now on Spark's cleanup cannot take the
    # files from us.
    copy_into([(pdir / name, out_checkpoint / prel / name) for name in names])
    total = 0
    for name in names:
        plan.written.append(f"{prel}/{name}")
        total += (out_checkpoint / prel / name).stat().st_size
    return located, total


def _plan_in_store(pdir: StorePath, prel: str, version: int, unique_id: str | None,
                   in_store: InStoreCopies) -> tuple[RocksDBVersion, int]:
    """A RocksDB partition's files of ``version`` for copying inside the store: only its
    zip and changelogs are fetched (to find the SSTs and the key count); return the version
    and the files' bytes. A file gone meanwhile (a running job's cleanup) is a
    FileNotFoundError, which makes the export start over from a newer batch."""
    listed = listed_partition(pdir, version)
    located = locate_version(listed.local, version, unique_id,
                             sst_present=lambda sst: f"SSTs/{sst}" in listed.files)
    names = located.relative_files()
    if unique_id is not None:
        names += [f"{name}.crc" for name in names if f"{name}.crc" in listed.files]
    return located, in_store.take(pdir, prel, names, listed.files)


def _plan_hdfs_in_store(pdir: StorePath, prel: str, version: int,
                        in_store: InStoreCopies) -> int:
    """An HDFS-provider partition's files of ``version`` (whose rows are known) for copying
    inside the store; return their bytes."""
    listed = pdir.io.walk_objects(pdir.url)
    names = hdfs_state.files_for_version(pdir, version,
                                         [rel for rel in listed if "/" not in rel]).names()
    return in_store.take(pdir, prel, list(names), listed)


def _export_rocksdb_partition(pdir: Location, prel: str, version: int, unique_id: str | None,
                              out_checkpoint: Path, plan: _Plan, in_store: InStoreCopies | None,
                              known_rows: int | None) -> tuple[int | None, int]:
    """A RocksDB partition's version: its files copied inside the store or linked here;
    (its keys as its metadata records them, bytes)."""
    if in_store is not None and in_store.takes(pdir):
        located, size = _plan_in_store(pdir, prel, version, unique_id, in_store)
    else:
        located, size = _link_rocksdb_version(pdir, out_checkpoint, prel, version, unique_id,
                                              plan)
    return located.num_keys, size


def _export_hdfs_partition(pdir: Location, prel: str, version: int, unique_id: str | None,
                           out_checkpoint: Path, plan: _Plan, in_store: InStoreCopies | None,
                           known_rows: int | None) -> tuple[int | None, int]:
    """An HDFS-provider partition's version: copied inside the store when its rows are
    known, else linked here and its keys counted from the links (which no maintenance can
    delete); (keys, bytes)."""
    if known_rows is not None and in_store is not None and in_store.takes(pdir):
        return None, _plan_hdfs_in_store(pdir, prel, version, in_store)
    out_dir = out_checkpoint / prel
    files = _link_hdfs_version(pdir, out_dir, version)
    size = 0
    for name in files.names():
        plan.written.append(f"{prel}/{name}")
        size += (out_dir / name).stat().st_size
    return (hdfs_state.count_rows(out_dir, files) if known_rows is None else None), size


# How each provider's partition is exported (checkpoint/providers.py: the providers).
_EXPORTS = {ROCKSDB.class_name: _export_rocksdb_partition,
            HDFS_BACKED.class_name: _export_hdfs_partition}


def _export_operator(
    operator: OperatorDir,
    version: int,
    provider: StateProvider,
    out_checkpoint: Path,
    plan: _Plan,
    commit: CommitLogEntry,
    known_rows: int | None = None,
    in_store: InStoreCopies | None = None,
) -> tuple[int | None, int]:
    """Plan copies (RocksDB) or link the version's files (HDFS); return (rows, state bytes).
    ``commit``: the batch's commit, which names each partition's state files in checkpoint
    format v2. ``known_rows``: the operator's rows from Spark's progress of the batch, which
    spare counting them."""
    rel = f"state/{operator.operator_id}"
    export = _EXPORTS[provider.class_name]
    _plan_metadata_files(operator, rel, plan)
    rows: int | None = 0
    state_bytes = 0
    stores = operator.stores()
    # In format v2 a stream-stream join's commit names one id per partition and store, in
    # the order of the operator's metadata (left-keyToNumValues, left-keyWithIndexToValue,
    # right-..., as Spark 4.3 writes them; pinned by test_checkpoint_format_v2.py).
    for store_index, store in enumerate(stores):
        for partition in track(range(operator.partitions),
                               f"snapshot: {operator.operator_name} {store.name}",
                               unit="partition"):
            pdir = store.partition_dir(operator.path, partition)
            prel = store.partition_dir(Path(rel), partition).as_posix()
            schema = pdir / "_metadata" / "schema"
            if schema.is_file():
                plan.copies.append((schema, f"{prel}/_metadata/schema"))
            unique_id = operator.unique_id(commit, partition, store_index) \
                if provider.has_unique_ids else None
            counted, size = export(pdir, prel, version, unique_id, out_checkpoint, plan,
                                   in_store, known_rows)
            state_bytes += size
            rows = None if rows is None or counted is None else rows + counted
    return (rows if known_rows is None else known_rows), state_bytes


def export_checkpoint(
    checkpoint: Checkpoint,
    staging: Path,
    snapshot_name: str,
    info: JobInfo,
    progress: Callable[[str], None] | None = None,
    batch: int | None = None,
    in_store: InStoreCopies | None = None,
) -> Manifest:
    """Write a complete snapshot of the latest committed batch (or of the earlier committed
    ``batch``) into ``staging`` (manifest last) and return its manifest.

    A running job keeps committing while we copy, and Spark's cleanup deletes state versions
    and log entries older than ``minBatchesToRetain`` batches. Once linked, a file is ours
    (the rest of the create can take as long as it likes); a file deleted before we linked
    it means the job moved on: the export starts over from the then newest batch, and after
    EXPORT_ATTEMPTS such losses it fails naming the cause, with nothing published.

    ``in_store``: state files the caller copies inside the checkpoint's store itself are
    not copied here but listed there (see InStoreCopies); their manifest entries carry the
    store's ETag instead of a checksum.
    """
    say = progress or (lambda _msg: None)
    if batch is not None:
        return _export_past_batch(checkpoint, batch, staging, snapshot_name, info, say,
                                  in_store)
    lost = ""
    for _attempt in range(EXPORT_ATTEMPTS):
        batch = _latest_exportable(checkpoint)
        try:
            return _export_batch(checkpoint, batch, staging, snapshot_name, info, say,
                                 in_store)
        except (FileNotFoundError, CheckpointFormatError) as exc:
            lost = str(exc.filename) if isinstance(exc, FileNotFoundError) else exc.message
            newest = checkpoint.require_latest_committed_batch()
            if newest == batch:
                raise  # the checkpoint did not move on: the file is missing for another reason
            say(f"the job committed batch {newest} and Spark deleted files of batch {batch} "
                "while they were being copied; starting over from the newest batch")
            _empty(staging)
    raise StateRetentionError(
        f"{checkpoint.root}: expected the files of the latest committed batch to stay until "
        f"they were linked, found them deleted by Spark's cleanup {EXPORT_ATTEMPTS} times in a "
        "row (the job commits batches faster than the copy, and keeps only "
        "spark.sql.streaming.minBatchesToRetain of them); nothing was published: run the job "
        "with a larger spark.sql.streaming.minBatchesToRetain, or snapshot it with --cancel "
        f"(last lost: {lost})"
    )


def _latest_exportable(checkpoint: Checkpoint) -> int:
    """The latest committed batch, or the one before it while it is a drain batch whose
    watermark is not put back yet (a drain running in another process, or one cut off):
    with the drain's maximal watermark, a job started from the snapshot would drop all its
    input as late. A drain puts the watermark back in place (offsets, then commit) and never
    raises it again, so a batch found put back here is copied put back."""
    batch = checkpoint.require_latest_committed_batch()
    draining = MAX_WATERMARK_MS in (checkpoint.offsets(batch).batch_watermark_ms,
                                    checkpoint.commit(batch).next_batch_watermark_ms)
    return batch - 1 if draining and batch > 0 else batch


def _export_past_batch(
    checkpoint: Checkpoint,
    batch: int,
    staging: Path,
    snapshot_name: str,
    info: JobInfo,
    say: Callable[[str], None],
    in_store: InStoreCopies | None,
) -> Manifest:
    """Export one earlier batch. A running job's cleanup may delete its files before they
    are linked; no other batch can stand in for the one asked for, so that fails naming
    the batches still held."""
    try:
        return _export_batch(checkpoint, batch, staging, snapshot_name, info, say, in_store)
    except (FileNotFoundError, CheckpointFormatError) as exc:
        held = snapshottable_batches(checkpoint)
        if any(entry.batch == batch for entry in held):
            raise  # still held: the file is missing for another reason
        raise BatchNotHeldError(
            f"{checkpoint.root}: Spark's cleanup deleted files of batch {batch} while they "
            f"were being copied; the checkpoint now holds {describe_range(held)}; nothing was "
            "published: snapshot a newer batch, or run the job with a larger "
            "spark.sql.streaming.minBatchesToRetain",
            held=[entry.to_dict() for entry in held],
        ) from exc


def _empty(staging: Path) -> None:
    for entry in staging.iterdir():
        if entry.is_dir():
            shutil.rmtree(entry)
        else:
            entry.unlink()


def _export_batch(
    checkpoint: Checkpoint,
    batch: int,
    staging: Path,
    snapshot_name: str,
    info: JobInfo,
    say: Callable[[str], None],
    in_store: InStoreCopies | None,
) -> Manifest:
    offsets = checkpoint.offsets(batch)
    if in_store is not None:
        in_store.files.clear()  # an earlier attempt's
        in_store.fetched.clear()
    provider = checkpoint.state_provider(batch)
    out = staging / CHECKPOINT_SUBDIR
    out.mkdir(parents=True, exist_ok=True)
    plan = _Plan()
    plan.copies.append((checkpoint.root / "metadata", "metadata"))
    renamed = dict(info.source_names)
    for log_batch in (batch - 1, batch):
        if log_batch >= 0 and (checkpoint.root / "offsets" / str(log_batch)).is_file():
            source = checkpoint.root / "offsets" / str(log_batch)
            if renamed:
                entry = named_offsets(checkpoint.offsets(log_batch), renamed)
                write_atomic(out / "offsets" / str(log_batch), entry.to_bytes())
                plan.written.append(f"offsets/{log_batch}")
            else:
                plan.copies.append((source, f"offsets/{log_batch}"))
    plan.copies.append((checkpoint.root / "commits" / str(batch), f"commits/{batch}"))

    source_offsets = offsets.source_offsets()
    sources_root = checkpoint.root / "sources"
    if sources_root.is_dir():
        source_dirs: list[Location] = [p for p in sources_root.iterdir()
                                       if not p.name.startswith(".")]
        for source_dir in sorted(source_dirs, key=lambda p: p.name):
            name = renamed.get(source_dir.name, source_dir.name)
            for path in _trimmed_source_log(source_dir, source_offsets.get(source_dir.name)):
                plan.copies.append((path, f"sources/{name}/{path.name}"))

    operator_entries = []
    commit = checkpoint.commit(batch)
    operators = checkpoint.operators(batch)
    known = {**rows_from_progress(info.state_rows.get(batch), operators), **info.counted_rows}
    for operator in operators:
        steps.info("operator %s (%s)", operator.operator_id, operator.operator_name)
        rows, state_bytes = _export_operator(operator, batch + 1, provider, out, plan, commit,
                                             known.get(operator.operator_id), in_store)
        stores = []
        for store in operator.stores():
            schema = operator.schema(store)
            stores.append(
                StoreEntry(
                    name=store.name,
                    key_schema=schema.key_schema if schema else None,
                    value_schema=schema.value_schema if schema else None,
                )
            )
        operator_entries.append(
            OperatorEntry(
                name=info.operator_names.get(
                    operator.operator_id, f"{operator.operator_name}_{operator.operator_id}"
                ),
                operator_id=operator.operator_id,
                kind=operator_kind(operator.operator_name),
                spark_operator_name=operator.operator_name,
                stores=stores,
                partitions=operator.partitions,
                rows=rows,
                bytes=state_bytes,
                window=info.operator_windows.get(operator.operator_id),
                aggregates=info.operator_aggregates.get(operator.operator_id),
            )
        )

    if in_store is not None:
        plan.copies.extend((source, rel) for rel, source in in_store.fetched.items())
    steps.info("copying %s files", len(plan.copies))
    copy_into([(source, out / rel) for source, rel in plan.copies])
    crash_point("snapshot.files_copied")
    files = []
    for rel in track([rel for _source, rel in plan.copies] + plan.written,
                     "snapshot: checksums", unit="file"):
        # Checksums are taken of what the snapshot holds, not of what it was copied from.
        size, digest = checksum_of(out / rel)
        files.append(FileEntry(path=f"{CHECKPOINT_SUBDIR}/{rel}", bytes=size, xxh3_128=digest))
    for rel, found in (in_store.files.items() if in_store is not None else ()):
        files.append(FileEntry(path=f"{CHECKPOINT_SUBDIR}/{rel}", bytes=found.bytes,
                               etag=found.etag))
    files.sort(key=lambda entry: entry.path)

    conf = offsets.conf
    shuffle = conf.get(SHUFFLE_PARTITIONS_CONF)
    manifest = Manifest(
        name=snapshot_name,
        job=info.job,
        created_at=dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds"),
        batch_id=batch,
        spark_version=info.spark_version,
        state_store_provider=checkpoint.provider(batch),
        shuffle_partitions=int(shuffle) if shuffle is not None else None,
        query_id=checkpoint.metadata().query_id,
        watermark_ms=checkpoint.commit(batch).next_batch_watermark_ms,
        job_file=info.job_file,
        params=dict(info.params),
        sources=[
            SourceEntry(name=renamed.get(name, name),
                        offset=None if value is None else json.loads(value))
            for name, value in source_offsets.items()
        ],
        operators=operator_entries,
        files=files,
        total_bytes=sum(entry.bytes for entry in files),
        accepted_loss=info.accepted_loss,
    )
    write_atomic(staging / MANIFEST_FILE, manifest.to_json().encode("utf-8"))
    return manifest


def named_offsets(entry: OffsetLogEntry, names: Mapping[str, str]) -> OffsetLogEntry:
    """An offsets entry with its sources under the given names, in format v2 (the format
    Spark writes for named sources) and with the conf that makes Spark read them by name;
    offsets and the rest of the metadata unchanged."""
    keys = list(entry.source_offsets())
    return OffsetLogEntry(
        version=2,
        metadata_text=compact_json(named_sources_metadata(entry.metadata)),
        sources=tuple(SourceOffset(names.get(key, key), source.offset)
                      for key, source in zip(keys, entry.sources, strict=True)),
    )


def discard(staging: Path) -> None:
    shutil.rmtree(staging, ignore_errors=True)
