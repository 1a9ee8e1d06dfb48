"""What ``jobs list`` and ``jobs show`` report of a job: its record, status, last batch,
progress, files its sources have not read, and (shown alone) the batches a snapshot can
still take and the state checks. Read-only; no JVM. In a home on S3 or HDFS each job costs a
few requests: ``jobs_list`` looks at several jobs at once."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from sparkpoint.checkpoint.layout import Checkpoint
from sparkpoint.checkpoint.retained import RetainedBatch, iso_utc, snapshottable_batches
from sparkpoint.checkpoint.source_log import (
    file_source_log_offset,
    read_source_log,
)
from sparkpoint.errors import (
    SparkpointError,
)
from sparkpoint.runtime.progress import PROGRESS_FILE, ProgressSummary, read_progress
from sparkpoint.runtime.registry import (
    JOBS_LOOKED_AT_ONCE,
    JobRecord,
    JobRegistry,
)
from sparkpoint.snapshot.inspect import operator_checks
from sparkpoint.sources.file_input import input_files, local_directory
from sparkpoint.sources.kafka import KAFKA_KINDS
from sparkpoint.sources.kafka_groups import records_behind
from sparkpoint.storage.home import Home
from sparkpoint.storage.location import Location

Echo = Callable[[str], None]


@dataclass(frozen=True)
class JobView:
    record: JobRecord
    status: str
    batch: int | None
    # The last batch the latest run processed, as Spark reported it (None before any).
    progress: ProgressSummary | None = None
    # Input files of each file source the job has not read yet (None: not a local file source).
    files_behind: Mapping[str, int | None] = field(default_factory=dict)
    # Per Kafka source, per partition ("topic-partition"): records the broker holds past the
    # last committed batch (None: the broker did not answer, or no subscription is known).
    records_behind: Mapping[str, dict[str, int] | None] = field(default_factory=dict)
    # Committed batches 'snapshot create --batch' can still take (None: not asked for, as
    # in 'jobs list', or the checkpoint could not be read).
    snapshottable: list[RetainedBatch] | None = None
    # Per stateful operator: can its state grow without bound (see checkpoint/boundedness).
    state_checks: list[dict[str, Any]] | None = None

    def to_dict(self) -> dict[str, Any]:
        data = self.record.model_dump(mode="json")
        data["status"] = self.status
        data["batch"] = self.batch
        data["progress"] = None if self.progress is None else asdict(self.progress)
        data["files_behind"] = dict(self.files_behind)
        data["records_behind"] = dict(self.records_behind)
        if self.snapshottable is not None:
            data["snapshottable_batches"] = [entry.to_dict() for entry in self.snapshottable]
        if self.state_checks is not None:
            data["state_checks"] = self.state_checks
        return data


def _files_behind(home: Home, record: JobRecord) -> dict[str, int | None]:
    """Per local file source: files in its directory that no committed batch read (None when
    that cannot be told: a remote path, a glob, a log sparkpoint cannot read)."""
    checkpoint = Checkpoint(home.checkpoint_dir(record.name))
    behind: dict[str, int | None] = {}
    for source in record.sources:
        if source.kind != "file" or source.path is None:
            continue
        try:
            behind[source.name] = _unread_files(checkpoint, source.name, source.path)
        except (SparkpointError, OSError):
            behind[source.name] = None  # a reading command reports what it can
    return behind


def _kafka_behind(home: Home, record: JobRecord) -> dict[str, dict[str, int] | None]:
    """Per Kafka source: records per partition the broker holds past the committed batch."""
    sources = [source for source in record.sources if source.kind in KAFKA_KINDS]
    if not sources:
        return {}
    checkpoint = Checkpoint(home.checkpoint_dir(record.name))
    try:
        committed = checkpoint.latest_committed_batch()
        ends = checkpoint.offsets(committed).source_offsets() if committed is not None else {}
    except (SparkpointError, OSError):
        return {source.name: None for source in sources}  # a reading command reports what it can
    return {source.name: records_behind(source, ends.get(source.name)) for source in sources}


def _unread_files(checkpoint: Checkpoint, source: str, path: str) -> int:
    directory = local_directory(path, source)
    committed = checkpoint.latest_committed_batch()
    offsets = checkpoint.offsets(committed).sources if committed is not None else ()
    # Entries past the committed batch's log offset belong to a batch planned, not done.
    done = next((file_source_log_offset(s.offset) for s in offsets if s.name == source), None)
    read = {str(entry["path"]) for log_id, entries in
            read_source_log(checkpoint.root / "sources" / source).items()
            if done is not None and log_id <= done for entry in entries}
    return sum(1 for f in input_files(directory) if f.uri not in read)


def job_view(home: Home, job: str, details: bool = True,
             listed: frozenset[str] | None = None) -> JobView:
    """What 'jobs show' reports; ``details``: also the batches that can be snapshotted.
    ``listed``: the names in the job's directory in a store, when the caller listed it."""
    registry = JobRegistry(home)
    record = registry.get(job)
    checkpoint = Checkpoint(home.checkpoint_dir(job))
    batch = checkpoint.latest_committed_batch()
    progress = read_progress(home.job_dir(job)) \
        if listed is None or PROGRESS_FILE in listed else None
    summary = None if progress is None else ProgressSummary.of(progress)
    if summary is not None and record.effective_status() == "drained":
        summary = _watermark_now(summary, checkpoint, batch)
    return JobView(record, record.effective_status(), batch, summary,
                   _files_behind(home, record), _kafka_behind(home, record),
                   _snapshottable(checkpoint) if details else None,
                   _state_checks(checkpoint, record) if details else None)


def _watermark_now(summary: ProgressSummary, checkpoint: Checkpoint,
                   batch: int | None) -> ProgressSummary:
    """A drained job's last progress is the drain batch's, whose watermark was the maximal
    one; the drain then put the job's own watermark back into that batch's commit entry,
    which is where the next run takes its watermark from: show that one."""
    if summary.watermark is None or batch is None:
        return summary
    try:
        ms = checkpoint.commit(batch).next_batch_watermark_ms
    except (SparkpointError, OSError):
        return summary  # a reading command reports what it can
    moment = dt.datetime.fromtimestamp(ms / 1000, dt.UTC)
    return replace(summary, watermark=iso_utc(moment))


def _state_checks(checkpoint: Checkpoint, record: JobRecord) -> list[dict[str, Any]]:
    if not checkpoint.exists():
        return []
    try:
        return operator_checks(checkpoint, record.operator_names())
    except (SparkpointError, OSError):
        return []  # a reading command reports what it can; 'snapshot inspect' says why


def _snapshottable(checkpoint: Checkpoint) -> list[RetainedBatch]:
    if not checkpoint.exists():
        return []
    try:
        return snapshottable_batches(checkpoint)
    except (SparkpointError, OSError):
        return []  # a reading command reports what it can; 'snapshot create' says why


def jobs_list(home: Home) -> list[JobView]:
    registry = JobRegistry(home)
    registry.remove_deleted_leftovers()
    # Each job is a few reads, each a round trip in a store: several jobs at once.
    # Each job is looked at whole in one task: its directory's listing (present, not
    # deleted), then its reads, several jobs at once.
    def view(entry: Location) -> JobView | None:
        present, listed = registry.listing(entry)
        return job_view(home, entry.name, False, listed) if present else None

    with ThreadPoolExecutor(max_workers=JOBS_LOOKED_AT_ONCE) as pool:
        views = list(pool.map(view, registry.candidates()))
    return sorted((v for v in views if v is not None), key=lambda v: v.record.name)


