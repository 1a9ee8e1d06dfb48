"""Which job an output directory belongs to, and the refusal of a new job that would write
into another's.

Spark's file sink skips every batch id its log already holds (``FileStreamSink.addBatch``): a
job with no checkpoint runs batches 0, 1, ... and, into an output that holds batches, writes
nothing while it consumes its input. A job that is new to the home is most often a mistyped
name of the job that wrote the output, so the refusal names that job and the nearest name.
"""

from __future__ import annotations

import difflib
from pathlib import Path

from sparkpoint.checkpoint.sink_log import latest_batch
from sparkpoint.errors import OutputHasHistoryError, UsageError
from sparkpoint.runtime.registry import JobRecord, JobRegistry
from sparkpoint.storage.local import to_path


def _same_dir(a: Path, b: Path) -> bool:
    return a.absolute().resolve() == b.absolute().resolve()


def _writes_to(record: JobRecord, output: Path) -> bool:
    """The record names ``output`` as its sink; records written before sinks were recorded
    are matched by a parameter naming that directory."""
    if record.output is not None:
        return _same_dir(Path(record.output), output)
    for value in record.params.values():
        if value and ("://" not in value or value.startswith("file:")):
            try:
                if _same_dir(to_path(value), output):
                    return True
            except (OSError, ValueError, UsageError):
                continue
    return False


def writers_of(registry: JobRegistry, output: Path) -> list[str]:
    """Names of the jobs of this home whose file sink is ``output``."""
    writers = []
    for name in registry.names():
        try:
            record = registry.get(name)
        except Exception:
            continue
        if _writes_to(record, output):
            writers.append(name)
    return writers


def nearest_name(name: str, names: list[str]) -> str | None:
    close = difflib.get_close_matches(name, names, n=1, cutoff=0.6)
    return close[0] if close else None


def refuse_output_with_history(registry: JobRegistry, job: str, output: Path) -> None:
    """Refuse to start the new job ``job`` into ``output`` when its sink log holds batches."""
    latest = latest_batch(output)
    if latest is None:
        return
    writers = writers_of(registry, output)
    suggestion = nearest_name(job, [n for n in registry.names() if n != job])
    if suggestion is None and writers:
        suggestion = writers[0]
    written_by = (f"written by job {', '.join(repr(w) for w in writers)}" if writers
                  else "written by no job this home knows")
    did_you_mean = f"did you mean '{suggestion}'? " if suggestion is not None else ""
    raise OutputHasHistoryError(
        f"job '{job}' is new (no record in this home) and its output {output} already holds "
        f"batches up to {latest} in its sink log (_spark_metadata), {written_by}: Spark's file "
        f"sink would skip the new job's batches up to {latest} and write nothing; nothing was "
        f"changed. {did_you_mean}To continue a job run it under its own name; to upgrade it, "
        "start the new job with --from-snapshot of it; otherwise give this job a new, empty "
        "output directory")
