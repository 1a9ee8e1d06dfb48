"""The checks of a job's file sink output before its query starts: an output that is
another job's, or whose sink log does not match the job's checkpoint, is refused; a new,
empty output gets the empty history of the batches the job already ran (``sinks/history.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from sparkpoint.checkpoint.sink_log import (
    COMPACT_INTERVAL_CONF,
    DEFAULT_COMPACT_INTERVAL,
    latest_batch,
)
from sparkpoint.errors import (
    PreconditionError,
)
from sparkpoint.runtime.registry import (
    JobRecord,
    JobRegistry,
)
from sparkpoint.sinks.gaps import fill_gap, find_gap, is_repartition_batch
from sparkpoint.sinks.history import finish_seeding, seed_history
from sparkpoint.sinks.rewind import finished as finished_rewinds
from sparkpoint.upgrade.output_ownership import (
    refuse_output_with_history,
)

Echo = Callable[[str], None]


def check_output_of_existing_job(registry: JobRegistry, job: str, conf: Mapping[str, str],
                                 output: str, echo: Echo) -> None:
    """Check, before the query starts, that a file sink's log matches the job's checkpoint.

    Spark's file sink skips every batch its log already has and compacts from the entries of
    earlier batches. An output directory without a log (the job was given a new, empty
    output) gets an empty history up to the job's last batch, as a job started from a
    snapshot does (``sinks/history.py``: a start cut off while writing it is finished here).
    A log that ends before the job's last batch, or more than one batch after it, is another
    job's output (or an older one of this job): the run is refused, since Spark would fail
    at its next compaction or silently skip batches. The output may be local, on S3 or HDFS.
    """
    last = registry.checkpoint(job).latest_committed_batch()
    ours = -1 if last is None else last
    _refuse_rewound_history(registry.get(job), output, ours)
    finished = finish_seeding(output, job)
    if finished is not None:
        echo(f"finished giving the new output {output} an empty sink history "
             f"up to batch {finished.through} (an earlier start was cut off doing it)")
    sink_last = latest_batch(output)
    if sink_last is None:
        interval = int(conf.get(COMPACT_INTERVAL_CONF, DEFAULT_COMPACT_INTERVAL))
        if last is not None and seed_history(output, job, last, interval):
            echo(f"gave the new output {output} an empty sink history up to "
                 f"batch {last}")
        return
    # Batches Spark's offline repartition committed write nothing to the sink: their
    # entries are owed, not another run's.
    if sink_last < ours and all(is_repartition_batch(registry.checkpoint(job), b)
                                for b in range(sink_last + 1, ours + 1)):
        interval = int(conf.get(COMPACT_INTERVAL_CONF, DEFAULT_COMPACT_INTERVAL))
        gap = find_gap(output, ours, interval)
        fill_gap(gap)
        echo(f"gave the output {output} empty sink log entries for Spark's "
             f"repartition batches {gap.batches[0]}..{gap.batches[-1]}")
        return
    # The sink writes its log entry just before the batch commits: one batch ahead is a
    # run stopped in between, whose offsets entry for that batch is there. Without it the
    # entry is another job's (a start into this output cut off after filling its log).
    in_between = sink_last == ours + 1 and \
        registry.checkpoint(job).uncommitted_batch() == sink_last
    if not (sink_last == ours or in_between):
        raise PreconditionError(
            f"job '{job}': output {output} holds batches up to {sink_last} of "
            f"another run, but the job's last committed batch is "
            f"{'none' if last is None else last}; each job needs an output directory of "
            "its own: pass a new, empty directory (or the job's previous output)")


def _refuse_rewound_history(record: JobRecord, output: str, ours: int) -> None:
    """A rewind that moved this job's batches out of the output, after its last run, gave
    the table to the job that rewound it: this job running on would write into that job's
    history (and Spark's sink would skip whichever batch ids they share)."""
    last_run = record.runs[-1].started_at if record.runs else ""
    for done in finished_rewinds(output):
        if done.to_batch < ours <= done.latest_batch and done.recorded_at > last_run:
            raise PreconditionError(
                f"job '{record.name}': its batches after {done.to_batch} in the output {output} "
                f"were moved aside to {done.directory} ({done.reason}); the table now "
                f"continues from batch {done.to_batch} without them: run this job into a new, "
                "empty output directory (--param of its output), or delete it ('sparkpoint "
                f"jobs delete {record.name}'); nothing was changed")


def check_output_of_new_job(registry: JobRegistry, job: str, output: str) -> None:
    """A job new to the home runs batches from 0: an output whose sink log holds batches
    would skip them all, so it is refused (most often the name is a typo)."""
    refuse_output_with_history(registry, job, output)


