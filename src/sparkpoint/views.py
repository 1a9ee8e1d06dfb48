"""What ``jobs list`` and ``jobs show`` report of a job: its record, status, last batch,
progress, how far behind its sources it is, and (shown alone) the batches a snapshot can
still take and the state checks. Read-only; no JVM. In a home on S3 or HDFS each job costs a
few requests: ``jobs_list`` looks at several jobs at once.

Lag is one figure per source, named by the source and measured when asked: the input files a
local file source has not read; the records a Kafka broker holds past the last committed
batch, and how old the oldest of them is (now minus its timestamp, read from the broker);
unknown for other sources (the latest offset Spark's progress reports is that of the last
batch, stale as soon as the job stops). A stopped or failed job still has a lag (the input
waiting for it); a drained job, and one superseded by a newer job (started after its last
run from its snapshot, or writing its output), reads nothing more: no lag.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping, Sequence
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
from sparkpoint.runtime import deletion
from sparkpoint.runtime.progress import PROGRESS_FILE, ProgressSummary, read_progress
from sparkpoint.runtime.registry import (
    DIED,
    JOBS_LOOKED_AT_ONCE,
    TOMBSTONE,
    JobRecord,
    JobRegistry,
    Status,
    ended_dead,
)
from sparkpoint.snapshot.inspect import operator_checks
from sparkpoint.sources.file_input import input_files, local_directory
from sparkpoint.sources.kafka import KAFKA_KINDS
from sparkpoint.sources.kafka_groups import KafkaLag, kafka_lag
from sparkpoint.storage.home import Home
from sparkpoint.storage.location import Location
from sparkpoint.upgrade.output_ownership import same_output

Echo = Callable[[str], None]

@dataclass(frozen=True)
class SourceLag:
    """How far behind one source the job is, measured now: ``unit`` records (Kafka) or files
    (a local file source), None for a source whose lag cannot be measured; ``behind`` None
    when it could not be told this time (a broker that did not answer)."""

    unit: str | None
    behind: int | None
    # Kafka: per partition ("topic-partition"); None for other sources, or when unknown.
    partitions: dict[str, int] | None = None
    # Kafka: now minus the timestamp of the oldest record not read yet (0.0: none behind);
    # None for other sources, or when unknown.
    seconds: float | None = None

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"unit": self.unit, "behind": self.behind}
        if self.unit == "records":
            data["partitions"] = self.partitions
            data["seconds_behind"] = self.seconds
        return data


@dataclass(frozen=True)
class JobView:
    record: JobRecord
    status: str
    batch: int | None
    # The last batch the latest run processed, as Spark reported it (None before any).
    progress: ProgressSummary | None = None
    # Input files of each file source the job has not read yet (None: not a local file source).
    files_behind: Mapping[str, int | None] = field(default_factory=dict)
    # Per Kafka source: records per partition ("topic-partition") the broker holds past the
    # last committed batch and the age of the oldest (None: the broker did not answer, or no
    # subscription is known).
    records_behind: Mapping[str, KafkaLag | None] = field(default_factory=dict)
    # Committed batches 'snapshot create --batch' can still take (None: not asked for, as
    # in 'jobs list', or the checkpoint could not be read).
    snapshottable: list[RetainedBatch] | None = None
    # Per stateful operator: can its state grow without bound (see checkpoint/boundedness).
    state_checks: list[dict[str, Any]] | None = None
    # The newer job that took over from this one (see _superseded_by).
    superseded_by: str | None = None

    @property
    def lag_absent(self) -> str | None:
        """Why the job has no lag (it reads nothing more), else None."""
        if self.status == "drained":
            return "drained"
        if self.superseded_by is not None:
            return f"superseded by job '{self.superseded_by}'"
        return None

    @property
    def lag(self) -> dict[str, SourceLag] | None:
        """Per source, in the job's plan order; None when the job has no lag."""
        if self.lag_absent is not None:
            return None
        lags = {}
        for source in self.record.sources:
            if source.name in self.files_behind:
                lags[source.name] = SourceLag("files", self.files_behind[source.name])
            elif source.name in self.records_behind:
                measured = self.records_behind[source.name]
                if measured is None:
                    lags[source.name] = SourceLag("records", None)
                else:
                    lags[source.name] = SourceLag("records", sum(measured.records.values()),
                                                  measured.records, measured.seconds)
            else:
                lags[source.name] = SourceLag(None, None)
        return lags

    def to_dict(self) -> dict[str, Any]:
        data = self.record.model_dump(mode="json")
        data["status"] = self.status
        data["batch"] = self.batch
        data["progress"] = None if self.progress is None else asdict(self.progress)
        lag = self.lag
        data["lag"] = None if lag is None else {name: value.to_dict()
                                                for name, value in lag.items()}
        data["superseded_by"] = self.superseded_by
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


def _kafka_behind(home: Home, record: JobRecord) -> dict[str, KafkaLag | None]:
    """Per Kafka source: records per partition the broker holds past the committed batch, and
    how old the oldest of them is."""
    sources = [source for source in record.sources if source.kind in KAFKA_KINDS]
    if not sources:
        return {}
    checkpoint = Checkpoint(home.checkpoint_dir(record.name))
    try:
        committed = checkpoint.latest_committed_batch()
        ends = checkpoint.offsets(committed).source_offsets() if committed is not None else {}
    except (SparkpointError, OSError):
        return {source.name: None for source in sources}  # a reading command reports what it can
    return {source.name: kafka_lag(source, ends.get(source.name)) for source in sources}


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
    status = record.effective_status()
    superseded_by = None
    if status != "running":
        superseded_by = _superseded_by(record, _other_records(registry, job))
    return _view(home, record, status, superseded_by, details, listed)


def _view(home: Home, record: JobRecord, status: Status, superseded_by: str | None,
          details: bool, listed: frozenset[str] | None) -> JobView:
    job = record.name
    checkpoint = Checkpoint(home.checkpoint_dir(job))
    batch = checkpoint.latest_committed_batch()
    progress = read_progress(home.job_dir(job)) \
        if listed is None or PROGRESS_FILE in listed else None
    summary = None if progress is None else _named_sources(ProgressSummary.of(progress), record)
    if summary is not None and status == "drained":
        summary = _watermark_now(summary, checkpoint, batch)
    view = JobView(_runs_ended(record, status, batch), status, batch, summary,
                   snapshottable=_snapshottable(checkpoint) if details else None,
                   state_checks=_state_checks(checkpoint, record) if details else None,
                   superseded_by=superseded_by)
    if view.lag_absent is not None:
        return view  # nothing is read any more: no broker asked, no directory listed
    return replace(view, files_behind=_files_behind(home, record),
                   records_behind=_kafka_behind(home, record))


def _named_sources(summary: ProgressSummary, record: JobRecord) -> ProgressSummary:
    """Spark's progress lists a query's sources in plan order, as the record does."""
    if len(summary.sources) != len(record.sources):
        return summary
    return replace(summary, sources=[replace(reported, name=source.name) for reported, source
                                     in zip(summary.sources, record.sources, strict=True)])


def _runs_ended(record: JobRecord, status: Status, batch: int | None) -> JobRecord:
    """The record as it is: a run whose process died without recording its end still says
    'running' in the file; it is shown failed, with the batch it got to (a later run's
    first batch, or the checkpoint's latest for the last run)."""
    dead_last = record.status == "running" and status != "running"
    if not dead_last and all(run.status != "running" for run in record.runs[:-1]):
        return record
    runs = list(record.runs)
    for index, run in enumerate(runs):
        last = index == len(runs) - 1
        if run.status != "running" or (last and not dead_last):
            continue
        got_to = batch if last else runs[index + 1].first_batch
        runs[index] = ended_dead(run, got_to)
    update: dict[str, Any] = {"runs": runs}
    if dead_last:
        update.update(status=status, error=record.error or DIED)
    return record.model_copy(update=update)


def _other_records(registry: JobRegistry, job: str) -> list[JobRecord]:
    """The home's other jobs' records (several at once: in a store each is a request)."""
    def read(name: str) -> JobRecord | None:
        try:
            return registry.get(name)
        except SparkpointError:
            return None  # a damaged record or a job deleted meanwhile supersedes nothing

    names = [name for name in registry.names() if name != job]
    with ThreadPoolExecutor(max_workers=JOBS_LOOKED_AT_ONCE) as pool:
        return [r for r in pool.map(read, names) if r is not None]


def _superseded_by(record: JobRecord, others: Sequence[JobRecord]) -> str | None:
    """The newest job created after ``record``'s last run that took over from it: started
    from its snapshot, or writing its file sink's output (an upgrade, a rollback into the
    same table). A job run again after that is not superseded: its last run is newer."""
    last_run = record.runs[-1] if record.runs else None
    since = record.created_at if last_run is None else (last_run.ended_at or
                                                        last_run.started_at)
    newer = [other for other in others
             if other.name != record.name and _after(other.created_at, since) and (
                 other.lineage.snapshot_job == record.name or (
                     record.output is not None and other.output is not None
                     and same_output(record.output, other.output)))]
    return max(newer, key=lambda other: _moment(other.created_at)).name if newer else None


def _moment(stamp: str) -> dt.datetime:
    moment = dt.datetime.fromisoformat(stamp)
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=dt.UTC)


def _after(stamp: str, since: str) -> bool:
    try:
        return _moment(stamp) > _moment(since)
    except ValueError:
        return False


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
    deletion.remove_renamed_aside(home)
    # Each job is a few reads, each a round trip in a store: several jobs at once. Each
    # record is read once, with its directory's listing (present, not deleted); which jobs
    # superseded which is then told from the records alone.
    def read(entry: Location) -> tuple[JobRecord, frozenset[str] | None] | None:
        present, listed = registry.listing(entry)
        if not present:
            if listed is not None and TOMBSTONE in listed:
                # A deletion cut off after its tombstone: every listing finishes it, when
                # it can take the job's lease at once.
                deletion.finish_if_free(home, entry.name)
            return None
        try:
            return registry.get(entry.name), listed
        except SparkpointError:
            # Listed, then deleted meanwhile: gone. A damaged record is reported by name.
            if registry.exists(entry.name):
                raise
            return None

    with ThreadPoolExecutor(max_workers=JOBS_LOOKED_AT_ONCE) as pool:
        found = [item for item in pool.map(read, registry.candidates()) if item is not None]
    records = [record for record, _ in found]

    def view(item: tuple[JobRecord, frozenset[str] | None]) -> JobView:
        record, listed = item
        status = record.effective_status()
        superseded_by = _superseded_by(record, records) if status != "running" else None
        return _view(home, record, status, superseded_by, False, listed)

    with ThreadPoolExecutor(max_workers=JOBS_LOOKED_AT_ONCE) as pool:
        views = list(pool.map(view, found))
    return sorted(views, key=lambda v: v.record.name)
