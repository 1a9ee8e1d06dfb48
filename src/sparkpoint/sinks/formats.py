"""Which Sink a job's format is: the table of the sinks sparkpoint reads (``sinks/base.py``).
A format not in it (Kafka, foreachBatch, console, memory, ...) has no sink sparkpoint can
read: a start from a snapshot then checks no batch ids against it (upgrade/batches.py)."""

from __future__ import annotations

from collections.abc import Callable

from sparkpoint.sinks.base import Sink
from sparkpoint.sinks.file_sink import FileSink
from sparkpoint.spark.sink import FILE_FORMATS

# format (as the job gives it to Spark, lower case) -> how its output becomes a Sink
SINK_FORMATS: dict[str, Callable[[str, str], Sink]] = {
    **{name: FileSink for name in FILE_FORMATS},
}


def sink_for(format_name: str, location: str | None) -> Sink | None:
    """The Sink of a job writing ``format_name`` at ``location`` (None: none it reads)."""
    make = SINK_FORMATS.get(format_name.lower())
    if make is None or location is None:
        return None
    return make(format_name.lower(), location)
