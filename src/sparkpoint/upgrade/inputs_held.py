"""Where a start from snapshots and an import resume each source, for the check that the
sources still hold it (``sources/input_gaps.py``).

Kafka: the offsets the new checkpoint's last batch holds (the snapshot's, or an
initialized source's resolved position). Spark's file source: a snapshot holds its log up to
the committed position only (``snapshot/export.py`` trims the rest), so the files the next
batch reads again are those the lineage's own checkpoint names after that position: the
snapshot's job's checkpoint in the home (batches planned but not committed when it was
snapshotted, or read after it), or the checkpoint an imported snapshot came from, when it
is still there and is the same query.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence

from sparkpoint.checkpoint.layout import Checkpoint
from sparkpoint.checkpoint.source_log import file_source_log_offset, read_source_log
from sparkpoint.errors import SparkpointError
from sparkpoint.runtime.registry import JobRegistry
from sparkpoint.snapshot.manifest import Manifest
from sparkpoint.sources.input_gaps import SourceToCheck
from sparkpoint.spark.inspect import PlannedSource
from sparkpoint.storage.location import Location, location_at
from sparkpoint.upgrade.adopt import IMPORTED_JOB_PREFIX
from sparkpoint.upgrade.restore import Resolution

log = logging.getLogger(__name__)


def start_sources(resolution: Resolution, registry: JobRegistry) -> list[SourceToCheck]:
    """Every source of a start from snapshots as the new checkpoint will resume it."""
    described = {s.name: s for s in resolution.shape.sources}
    found = []
    for row in resolution.plan.sources:
        source = described.get(row.name)
        if source is None:
            continue
        planned: tuple[str, ...] = ()
        if row.action == "resume" and row.origin is not None:
            offset = None if row.offset is None else json.dumps(row.offset,
                                                                separators=(",", ":"))
            used = resolution.snapshots.get(row.origin["snapshot"])
            if source.kind == "file" and used is not None:
                planned = _lineage_planned(registry, used.manifest, row.origin["source"],
                                           offset)
        elif row.name in resolution.positions:
            offset = resolution.positions[row.name].offset_json
        else:
            continue  # starts at its beginning: nothing before it to lose
        found.append(SourceToCheck(row.name, source.kind, dict(source.options), offset,
                                   planned))
    return found


def import_sources(checkpoint: Checkpoint, batch: int, names: Mapping[str, str],
                   planned: Sequence[PlannedSource]) -> list[SourceToCheck]:
    """Every source of a plain checkpoint as a snapshot of its committed ``batch`` resumes
    it (``names``: the checkpoint's source names -> the job's)."""
    described = {s.name: s for s in planned}
    found = []
    for key, offset in checkpoint.offsets(batch).source_offsets().items():
        source = described.get(names.get(key, key))
        if source is None:
            continue
        files = _planned_after(checkpoint.root / "sources" / key, offset) \
            if source.kind == "file" else ()
        found.append(SourceToCheck(source.name, source.kind, dict(source.options), offset,
                                   files))
    return found


def _lineage_planned(registry: JobRegistry, manifest: Manifest, source: str,
                     offset: str | None) -> tuple[str, ...]:
    """The files the snapshot's lineage named after the snapshot's position of ``source``
    (none when its checkpoint is gone or is another query's)."""
    try:
        if manifest.job.startswith(IMPORTED_JOB_PREFIX):
            checkpoint = Checkpoint(location_at(manifest.job.removeprefix(IMPORTED_JOB_PREFIX)))
            # A plain checkpoint names its sources by position, in the order the
            # snapshot lists them.
            names = [s.name for s in manifest.sources]
            keys = [source] + ([str(names.index(source))] if source in names else [])
        elif registry.exists(manifest.job):
            checkpoint, keys = registry.checkpoint(manifest.job), [source]
        else:
            return ()
        if not checkpoint.exists() or checkpoint.metadata().query_id != manifest.query_id:
            return ()
        for key in keys:
            log_dir = checkpoint.root / "sources" / key
            if log_dir.is_dir():
                return _planned_after(log_dir, offset)
    except (SparkpointError, OSError, ValueError):
        # The lineage's checkpoint is read for what it can add; the start's own files are
        # checked elsewhere.
        log.debug("reading the lineage's file source log of %s failed", source, exc_info=True)
    return ()


def _planned_after(log_dir: Location, offset: str | None) -> tuple[str, ...]:
    """The files of the log's entries after the position ``offset`` names, in log order."""
    after = file_source_log_offset(offset)
    after = -1 if after is None else after
    entries = read_source_log(log_dir)
    return tuple(str(record["path"]) for log_id in sorted(entries) if log_id > after
                 for record in entries[log_id])
