"""Named crash points: where a multi-step command can be cut off, for fault-injection tests.

Every command that changes things in more than one step calls ``crash_point(name)`` between
its steps. With ``SPARKPOINT_CRASH_AT=<name>`` in the environment the process ends at that
point at once (``os._exit(137)``: no ``finally``, no cleanup, as ``kill -9`` would), so a test
can check that the next ordinary command completes or rolls back the interrupted work. With
``SPARKPOINT_FREEZE_AT=<name>`` the process instead stops itself there (SIGSTOP, as a long
pause of a machine would stop it) until a test continues it (SIGCONT), so that two
processes' steps can be interleaved in a chosen order.

Every name is declared here, in one place, so that ``sparkpoint debug crash-points`` can list
them and a misspelt name in the code fails at once instead of never firing.
"""

from __future__ import annotations

import logging
import os
import signal
import sys

from sparkpoint import settings
from sparkpoint.errors import UsageError

CRASH_ENV = settings.CRASH_AT.name
FREEZE_ENV = settings.FREEZE_AT.name
# Internal steps of multi-step commands, for who watches one closely (``sparkpoint --verbose``,
# the kill tests): not a command's output, silent by default.
STEPS_LOGGER = "sparkpoint.steps"
steps = logging.getLogger(STEPS_LOGGER)
CRASH_EXIT_CODE = 137

# name -> where it is (the step just done, the next not started)
CRASH_POINTS: dict[str, str] = {
    # snapshot create: staging written, published by one rename
    "snapshot.staging_created": "staging directory made, nothing copied yet",
    "snapshot.files_copied": "state and logs copied into staging, manifest not written",
    "snapshot.manifest_written": "manifest written in staging, not published",
    "snapshot.published": "snapshot renamed into place, staging not synced",
    # snapshot delete: renamed aside, then removed
    "snapshot.delete_renamed": "snapshot renamed out of the listing, files not removed",
    # snapshot create/delete on a remote store (S3, HDFS): manifest last, by conditional put
    "remote_snapshot.lease_written": "exported locally, lease written, nothing uploaded",
    "remote_snapshot.files_uploaded": "new files uploaded, manifest not written (not listed)",
    "remote_snapshot.published": "manifest written (listed), lease not removed",
    "remote_snapshot.delete_unlisted": "manifest removed (not listed), files not collected",
    "remote_snapshot.collection_planned": "a collection listed the creates and chose what to "
                                          "delete, not announced it",
    "remote_snapshot.collection_announced": "a collection announced the files it will delete, "
                                             "none deleted",
    "remote_snapshot.collection_deleting": "a collection checked it may still delete, the "
                                           "next file not deleted",
    # run --from-snapshot / --resume-point: staging beside the target, published by one
    # rename after an intent file; the next start of the same job rolls back the debris
    "restore.job_locked": "new job's lock taken, nothing assembled",
    "restore.assembled": "new checkpoint assembled in staging, not checked by Spark",
    "restore.hdfs_partition_moved": "one HDFS state store rewritten in staging, others not (a "
                                    "home in a store, HDFS or RocksDB state: every store's "
                                    "new files written into the new checkpoint there by "
                                    "Spark tasks, after the intent and its metadata)",
    "restore.repartitioned": "state repartitioned in staging (a home in a store: in the new "
                             "checkpoint there), not checked by Spark",
    "restore.provider_moved": "state moved to the state store provider the job asks for, in "
                              "staging (a home in a store: in the new checkpoint there, "
                              "written by Spark tasks), not checked by Spark",
    "restore.old_state_placed": "a migration in a store: the intent, the new checkpoint's "
                                "metadata and the state as assembled (inside it) in the "
                                "store, nothing migrated",
    "restore.state_migrated": "state of operators whose schema changed rewritten (or seeded "
                              "from a query) in staging, not checked by Spark",
    "restore.files_uploaded": "a home in a store: the new checkpoint's logs and metadata "
                              "uploaded, the snapshot's state files not yet copied into it",
    "restore.published": "new checkpoint renamed into place, job record not written",
    "restore.sink_seeded": "output's missing sink log entries written, job record not written",
    # the output's sink log brought up to a new checkpoint's batch (sinks/gaps.py): entries
    # named in the start's intent, then written in batch order
    "sink_gap.recorded": "missing sink log entries named in the intent, none written",
    "sink_gap.entry_written": "one missing sink log entry written, later ones not",
    # run of a job of the home into a new, empty output: its empty sink history is recorded
    # under the output, then written in batch order (sinks/history.py); the job's next
    # start writes what is missing
    "sink_seed.recorded": "new output's empty sink history recorded, no entry written",
    "sink_seed.entry_written": "one entry of a new output's empty sink history written, "
                               "later ones not",
    # run --from-snapshot --rewind-output: after the new checkpoint is published, the
    # output's abandoned batches are moved aside under an intent in the output; the next run
    # into that output finishes the renames
    "rewind.intent_recorded": "rewind intent written under the output, nothing moved",
    "rewind.log_entry_moved": "newest abandoned sink log entry moved aside, older ones not",
    "rewind.log_rewound": "every abandoned sink log entry moved aside, no data file moved",
    "rewind.file_moved": "one abandoned data file moved aside, the others not",
    "rewind.files_moved": "every abandoned data file moved aside, intent not closed",
    # drain
    "drain.intent_recorded": "drain intent recorded, drain offsets not written",
    "drain.offsets_written": "drain batch's offsets written, the batch not run",
    "drain.batch_committed": "drain batch committed, watermark not put back",
    "drain.watermark_restored": "watermark put back, job record not marked drained",
    "drain.recorded": "job record marked drained, the asked-for snapshot not taken",
    # startpoints applied at a job's start
    "startpoint.intent_recorded": "apply intent recorded, checkpoint unchanged",
    "startpoint.source_log_written": "file-source log entries written, offsets not moved",
    "startpoint.offsets_moved": "committed offsets moved, pending startpoints not cleared",
    "startpoint.cleared": "pending startpoints cleared, job record not updated",
    # rehearse: everything in a scratch directory, removed at the end or by the next one
    "rehearse.batch_replayed": "one old batch replayed in scratch, the next not started",
    # snapshot prune: a scratch copy of SNAP is rewritten, then published as NEW_SNAP by the
    # snapshot store (snapshot.* / remote_snapshot.* points follow)
    "prune.scratch_linked": "scratch copy of the snapshot's checkpoint made, state not rewritten",
    "prune.partition_rewritten": "one state partition rewritten in scratch, others not",
    "prune.state_rewritten": "pruned state written in scratch, new snapshot not created",
    # a job's lease in a home on S3 or HDFS (storage/lease.py): the next generation created,
    # then the older ones removed
    "lease.taken": "a job's lease taken (its next generation created), older generations "
                   "not removed",
    "lease.renewing": "a renewal of a job's lease decided (the holder's deadline checked), "
                      "its next generation not created",
    # jobs delete: renamed aside, then removed
    "jobs.delete_renamed": "job directory renamed out of the listing, files not removed",
    "jobs.delete_tombstoned": "a home on S3 or HDFS: the job's tombstone written, its files "
                              "not removed",
    "jobs.delete_files_removed": "a home on S3 or HDFS: the job's files removed but its lease's, "
                                 "the tombstone not removed",
}


def check_environment() -> None:
    """Refuse a crash or freeze point that is not declared: it would never fire, and a test
    cutting a command off there would pass without cutting anything."""
    for setting in (settings.CRASH_AT, settings.FREEZE_AT):
        name = setting.get()
        if name is not None and name not in CRASH_POINTS:
            raise UsageError(setting.refusal(name))


def crash_point(name: str) -> None:
    """End the process here, at once, when the environment asks for this point (or stop it
    until it is continued, for a freeze)."""
    if name not in CRASH_POINTS:
        raise KeyError(f"undeclared crash point {name!r}; declare it in CRASH_POINTS")
    if settings.CRASH_AT.get() == name:
        sys.stderr.write(f"crash point {name}: exiting with {CRASH_EXIT_CODE}\n")
        sys.stderr.flush()
        os._exit(CRASH_EXIT_CODE)
    if settings.FREEZE_AT.get() == name:
        sys.stderr.write(f"freeze point {name}: stopped\n")
        sys.stderr.flush()
        os.kill(os.getpid(), signal.SIGSTOP)
