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
    """Root of every error sparkpoint raises on purpose."""

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
    code = "USAGE"
    exit_code = EXIT_USAGE


class InvalidNameError(UsageError):
    code = "INVALID_NAME"


class InvalidLocationError(UsageError):
    """A home, snapshot store or output whose path Spark and sparkpoint would read at
    different places (storage/paths.py)."""

    code = "INVALID_LOCATION"


class JobFileError(SparkpointError):
    """The job file cannot be loaded or its `build` misbehaves."""

    code = "JOB_FILE"
    exit_code = EXIT_VALIDATION


class ValidationError(SparkpointError):
    code = "VALIDATION_FAILED"
    exit_code = EXIT_VALIDATION


class UnknownJobError(SparkpointError):
    code = "UNKNOWN_JOB"
    exit_code = EXIT_PRECONDITION


class UnknownSnapshotError(SparkpointError):
    code = "UNKNOWN_SNAPSHOT"
    exit_code = EXIT_PRECONDITION


class UnknownSourceError(SparkpointError):
    code = "UNKNOWN_SOURCE"
    exit_code = EXIT_PRECONDITION


class UnknownOperatorError(SparkpointError):
    """A stateful operator name that the snapshot or job does not have."""

    code = "UNKNOWN_OPERATOR"
    exit_code = EXIT_PRECONDITION


class PreconditionError(SparkpointError):
    """Refused because of the state of things (job running, name taken...)."""

    code = "PRECONDITION"
    exit_code = EXIT_PRECONDITION


class NameTakenError(PreconditionError):
    code = "NAME_TAKEN"


class JobRunningError(PreconditionError):
    code = "JOB_RUNNING"


class LeaseLostError(PreconditionError):
    """This process no longer holds the job's lease: another may run it; nothing more is
    written (exit 4)."""

    code = "LEASE_LOST"


class NoCommittedBatchError(PreconditionError):
    code = "NO_COMMITTED_BATCH"


class StateRetentionError(PreconditionError):
    """A running job's cleanup deleted the files of its newest batches faster than a
    snapshot could take hold of them."""

    code = "STATE_RETENTION"


class BatchNotHeldError(PreconditionError):
    """A snapshot of an earlier batch was asked for that the checkpoint no longer holds (or
    that is not committed yet)."""

    code = "BATCH_NOT_HELD"


class SinkAheadError(PreconditionError):
    """The output's sink log already holds batch ids a job started from a snapshot would run."""

    code = "SINK_AHEAD"


class OutputHasHistoryError(PreconditionError):
    """A new job (no record, not started from a snapshot) was given an output whose file
    sink log already holds batches: Spark's sink would skip the new job's batches. Or a job
    started from a snapshot outside the lineage of the job that wrote the output."""

    code = "OUTPUT_HAS_HISTORY"


class SinkRewindError(PreconditionError):
    """A file sink's output cannot be taken back to the batch asked for (its log no longer
    tells which files that batch ended with, or names files outside the output)."""

    code = "SINK_REWIND"


class CheckpointFormatError(SparkpointError):
    """A file of a Spark checkpoint is not in a format this version understands."""

    code = "CHECKPOINT_FORMAT"
    exit_code = EXIT_VALIDATION


class CorruptRecordError(SparkpointError):
    """A file sparkpoint wrote in its home (job record, startpoint, intent) cannot be read."""

    code = "CORRUPT_RECORD"
    exit_code = EXIT_VALIDATION


class UnsupportedSparkError(PreconditionError):
    """The installed pyspark is not the version this sparkpoint is tested with."""

    code = "UNSUPPORTED_PYSPARK"


class SnapshotDamagedError(SparkpointError):
    code = "SNAPSHOT_DAMAGED"
    exit_code = EXIT_VALIDATION


class SparkQueryError(SparkpointError):
    """The streaming query failed inside Spark; the message is Spark's first line."""

    code = "QUERY_FAILED"
    exit_code = EXIT_UNEXPECTED


class DriverDiskUnreachableError(PreconditionError):
    """The application's executors cannot read the directory on this machine's disk where a
    command keeps the copy its Spark tasks rewrite (executors on other hosts)."""

    code = "DRIVER_DISK_UNREACHABLE"


class KafkaOffsetsDeletedError(PreconditionError):
    """A Kafka source must read offsets the broker no longer holds (retention, a deleted
    topic) and the connector fails on data loss: a startpoint decides where to go on."""

    code = "KAFKA_OFFSETS_DELETED"


class StoreUnreachableError(PreconditionError):
    """A store's server (a NameNode, a DataNode, an S3 endpoint) does not answer."""

    code = "STORE_UNREACHABLE"


class NothingToRehearseError(PreconditionError):
    """The old job has no committed batch after the snapshot's: no input to replay."""

    code = "NOTHING_TO_REHEARSE"


# snapshot prune
class PruneUnsupportedError(PreconditionError):
    """The operator's state cannot be pruned key by key (several stores, a prefix-keyed
    store, or a state store provider sparkpoint cannot rewrite)."""

    code = "PRUNE_UNSUPPORTED"


class InvalidPredicateError(ValidationError):
    """A ``--where`` predicate Spark cannot evaluate on the operator's key columns."""

    code = "INVALID_PREDICATE"
