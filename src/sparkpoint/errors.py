"""One root exception with stable codes and CLI exit codes.

Messages name the path or entry, what was expected, what was found, and what to do.
Only the CLI catches broadly; everything else raises one of these.
"""

from __future__ import annotations

from typing import Any

EXIT_OK = 0
EXIT_UNEXPECTED = 1
EXIT_USAGE = 2
EXIT_VALIDATION = 3
EXIT_PRECONDITION = 4


class SparkpointError(Exception):
    """Root of every error sparkpoint raises on purpose; never raised itself.

    Fix: see the error's own code."""

    code: str = "SPARKPOINT_ERROR"
    exit_code: int = EXIT_UNEXPECTED

    def __init__(self, message: str, **details: Any) -> None:
        super().__init__(message)
        self.message = message
        # Machine-readable extras for --json (problems, log_file...).
        self.details = details

    def to_dict(self) -> dict[str, Any]:
        """The error under --json: ``{"code", "message", "exit_code", ...details}``."""
        return {"code": self.code, "message": self.message, "exit_code": self.exit_code,
                **self.details}

    def __str__(self) -> str:
        return f"[{self.code}] {self.message}"


class UsageError(SparkpointError):
    """The command line, an option's value or a ``SPARKPOINT_*`` variable is wrong (a
    missing or conflicting option, a bad number); nothing was read or changed.

    Fix: correct the option or variable the line names (``sparkpoint COMMAND --help``)."""

    code = "USAGE"
    exit_code = EXIT_USAGE


class InvalidNameError(UsageError):
    """A job, snapshot or source name that cannot become a file name under the
    home (1-200 letters, digits, ``_``, ``-``, ``.``, starting with a letter, digit or ``_``,
    no ``..``), or a stateful operator name with ``/``, ``\\``, ``..``, control characters
    or a leading ``.``.

    Fix: choose a name of those characters."""

    code = "INVALID_NAME"


class InvalidLocationError(UsageError):
    """A home, snapshot store or output whose path Spark and sparkpoint would
    read at different places (storage/paths.py): it holds ``#``, ``?``, a ``%`` escape or a
    ``.``/``..`` URL segment.

    Fix: choose a path without them."""

    code = "INVALID_LOCATION"


class JobFileError(SparkpointError):
    """The job file cannot be loaded (a syntax error, no ``build``) or its
    ``build`` misbehaves (raises, returns no unstarted ``DataStreamWriter``, uses another
    session, fails Spark's analysis).

    Fix: correct the job file at the place the line names."""

    code = "JOB_FILE"
    exit_code = EXIT_VALIDATION


class ValidationError(SparkpointError):
    """A check failed before anything changed: a resume point's problems (all
    listed at once), a job that does not match the snapshot, state sparkpoint does not
    decode, a checkpoint to import that does not match its job file.

    Fix: correct what each problem names (``plan`` lists them without changing anything)."""

    code = "VALIDATION_FAILED"
    exit_code = EXIT_VALIDATION


class UnknownJobError(SparkpointError):
    """No job of that name in the home.

    Fix: check the name and ``--home`` (``sparkpoint jobs list``)."""

    code = "UNKNOWN_JOB"
    exit_code = EXIT_PRECONDITION


class UnknownSnapshotError(SparkpointError):
    """No snapshot of that name in the snapshot store.

    Fix: check the name and ``--home``/``--snapshots`` (``sparkpoint snapshot list``)."""

    code = "UNKNOWN_SNAPSHOT"
    exit_code = EXIT_PRECONDITION


class UnknownSourceError(SparkpointError):
    """The job has no source of that name.

    Fix: use one of the source names the line lists (the names given with
    ``readStream.name(...)``)."""

    code = "UNKNOWN_SOURCE"
    exit_code = EXIT_PRECONDITION


class UnknownOperatorError(SparkpointError):
    """A stateful operator name that the snapshot or job does not have.

    Fix: use one of the operator names the line lists (``sparkpoint snapshot show``)."""

    code = "UNKNOWN_OPERATOR"
    exit_code = EXIT_PRECONDITION


class PreconditionError(SparkpointError):
    """Refused because of the state of things (a file sink output another run
    wrote, a job already drained, a snapshot in the way...); nothing changed.

    Fix: do what the line says first, then run the command again."""

    code = "PRECONDITION"
    exit_code = EXIT_PRECONDITION


class NameTakenError(PreconditionError):
    """A job or snapshot of that name exists already (or another home's create of
    the same snapshot name won).

    Fix: choose another name, or delete the old one first."""

    code = "NAME_TAKEN"


class JobRunningError(PreconditionError):
    """The job is running (its lock or lease is held, the line names the holder's
    pid and machine), or a job writing the output runs.

    Fix: stop it first (``sparkpoint jobs stop NAME --wait``), or wait for its lease to
    expire when its process died on another machine."""

    code = "JOB_RUNNING"


class LeaseLostError(PreconditionError):
    """This process no longer holds the job's lease: another may run it; nothing
    more is written (exit 4).

    Fix: check who holds the job now (``sparkpoint jobs show``) and run it again if nobody
    does; a longer ``SPARKPOINT_LEASE_SECONDS`` rides out longer pauses."""

    code = "LEASE_LOST"


class NoCommittedBatchError(PreconditionError):
    """The job has not committed a batch yet: there is nothing to snapshot,
    drain or set a startpoint against.

    Fix: run the job until it commits a batch (``run --max-batches 1``)."""

    code = "NO_COMMITTED_BATCH"


class StateRetentionError(PreconditionError):
    """A running job's cleanup deleted the files of its newest batches faster
    than a snapshot could take hold of them (three times).

    Fix: raise ``spark.sql.streaming.minBatchesToRetain``, or snapshot with ``--cancel``."""

    code = "STATE_RETENTION"


class BatchNotHeldError(PreconditionError):
    """A snapshot of an earlier batch was asked for that the checkpoint no
    longer holds (or that is not committed yet); the line lists the batches it holds.

    Fix: take one of the batches listed (``jobs show`` lists them with their times)."""

    code = "BATCH_NOT_HELD"


class SinkAheadError(PreconditionError):
    """The output's sink log already holds batch ids a job started from a snapshot
    would run: Spark's file sink would skip them and the new rows would be lost.

    Fix: write to a new output directory, or pass ``--rewind-output`` (take the output back
    to the snapshot's batch) or ``--renumber-batches`` (keep the old rows, number past
    them)."""

    code = "SINK_AHEAD"


class OutputHasHistoryError(PreconditionError):
    """A new job (no record, not started from a snapshot) was given an output
    whose file sink log already holds batches: Spark's sink would skip the new job's batches.
    Or a job started from a snapshot outside the lineage of the job that wrote the output.

    Fix: run the job under the name that wrote the output (the line suggests the nearest),
    start the new version ``--from-snapshot`` of that job, or give it a new, empty
    output."""

    code = "OUTPUT_HAS_HISTORY"


class SinkRewindError(PreconditionError):
    """A file sink's output cannot be taken back to the batch asked for (its log
    no longer tells which files that batch ended with, or names files outside the output).

    Fix: start into a new output directory, or with ``--renumber-batches``."""

    code = "SINK_REWIND"


class TopicNotRewindableError(UsageError):
    """``--rewind-output`` asked of a job that writes a Kafka topic: records cannot be taken
    out of a topic (Kafka deletes only by retention or below an offset).

    Fix: start without it; the batches after the snapshot's are written again and the
    abandoned records' offsets are named."""

    code = "TOPIC_NOT_REWINDABLE"


class CheckpointFormatError(SparkpointError):
    """A file of a Spark checkpoint is not in a format this version
    understands (another Spark version's, or damaged).

    Fix: check the file the line names; use the pyspark version sparkpoint supports."""

    code = "CHECKPOINT_FORMAT"
    exit_code = EXIT_VALIDATION


class CorruptRecordError(SparkpointError):
    """A file sparkpoint wrote in its home (job record, startpoint, intent)
    cannot be read back.

    Fix: restore the file named, or remove it as the line says (``startpoint clear``
    removes a damaged startpoint file without reading it)."""

    code = "CORRUPT_RECORD"
    exit_code = EXIT_VALIDATION


class UnsupportedSparkError(PreconditionError):
    """The installed pyspark is not the version this sparkpoint is tested with;
    refused before Spark starts and before anything changes.

    Fix: ``pip install pyspark==4.3.0``, or set ``SPARKPOINT_ALLOW_UNTESTED_PYSPARK=1`` to go
    on at your own risk."""

    code = "UNSUPPORTED_PYSPARK"


class SnapshotDamagedError(SparkpointError):
    """A snapshot's manifest cannot be read, or a file of it is missing, of
    another size or checksum than the manifest says; a start from it is refused and leaves
    nothing in the home.

    Fix: ``sparkpoint snapshot verify`` names every damaged file; start from another
    snapshot."""

    code = "SNAPSHOT_DAMAGED"
    exit_code = EXIT_VALIDATION


class SparkQueryError(SparkpointError):
    """The streaming query failed inside Spark; the message is Spark's first line
    in your terms, and Spark's log and stack traces are in the file it names.

    Fix: read the named log file (``<home>/logs/``), correct the job and run it again."""

    code = "QUERY_FAILED"
    exit_code = EXIT_UNEXPECTED


class DriverDiskUnreachableError(PreconditionError):
    """The application's executors cannot read the directory on this
    machine's disk where a command keeps the copy its Spark tasks rewrite (executors on other
    hosts).

    Fix: set ``TMPDIR`` (a start) or ``SPARKPOINT_SCRATCH`` (prune, rehearse) to a directory
    every executor reads at the same path, or run the command with ``--master local[N]``."""

    code = "DRIVER_DISK_UNREACHABLE"


class KafkaOffsetsDeletedError(PreconditionError):
    """A Kafka source must read offsets the broker no longer holds
    (retention, a deleted topic) and the connector fails on data loss: a startpoint decides
    where to go on.

    Fix: ``sparkpoint startpoint set JOB SOURCE --earliest`` (with ``--partition TOPIC:P``
    for each partition that lost records, as the line lists), then run the job again."""

    code = "KAFKA_OFFSETS_DELETED"


class SourceDataLostError(PreconditionError):
    """A start (from a snapshot, an import of a plain checkpoint, a start with
    startpoints) would resume a source at input it no longer holds: Kafka offsets below a
    partition's earliest offset on the broker, or input files its log names for the next
    batch that were removed. Checked before Spark starts; nothing was changed.

    Fix: start from a newer snapshot, or accept the loss with ``--accept-data-loss`` (Kafka
    partitions go on from the earliest record held; the loss is recorded in the job's
    lineage, or in the imported snapshot)."""

    code = "SOURCE_DATA_LOST"


class StoreUnreachableError(PreconditionError):
    """A store's server (a NameNode, a DataNode, an S3 endpoint) does not
    answer, or keeps refusing after the client's retries.

    Fix: check that the server is up and the address the line names (and where it was
    found) is right, e.g. ``SPARKPOINT_WEBHDFS_URL`` or ``AWS_ENDPOINT_URL``."""

    code = "STORE_UNREACHABLE"


class NothingToRehearseError(PreconditionError):
    """The old job has no committed batch after the snapshot's: no input to
    replay.

    Fix: rehearse from an older snapshot, or once the old job has run past it."""

    code = "NOTHING_TO_REHEARSE"


# snapshot prune
class PruneUnsupportedError(PreconditionError):
    """The operator's state cannot be pruned key by key (several stores, a
    prefix-keyed store, or a state store provider sparkpoint cannot rewrite).

    Fix: drop the operator's whole state with a resume point (``mode: initialize``)."""

    code = "PRUNE_UNSUPPORTED"


class InvalidPredicateError(ValidationError):
    """A ``--where`` predicate Spark cannot evaluate on the operator's key
    columns (a value column, a syntax error, not a boolean, or one failing on some key).

    Fix: write the condition on the key columns the line lists."""

    code = "INVALID_PREDICATE"
