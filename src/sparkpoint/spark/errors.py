"""Spark's failures in the user's terms: a short summary for the terminal, the full story
(Python traceback, Spark's message, JVM frames) for a log file.

PySpark's exceptions carry the JVM stack trace separately (shown only when
``spark.sql.pyspark.jvmStacktrace.enabled``), and a failed query's message embeds the
worker's Python traceback, the query's plan and Java frames; none of that belongs on a
terminal line.
"""

from __future__ import annotations

import re
import traceback
from dataclasses import dataclass

SUMMARY_LIMIT = 300

# Where Spark's message stops being about the cause.
_DETAIL_STARTS = ("=== Streaming Query ===", "JVM stacktrace", "Caused by", "Driver stacktrace")
_PYTHON_FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<func>.+)$')
_SQLSTATE = re.compile(r"\s*SQLSTATE: \w+;?")


def jvm_stack_trace(exc: BaseException) -> str | None:
    """The JVM stack trace behind a PySpark exception or any exception it caused."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        trace = getattr(current, "_stackTrace", None)  # pyspark's CapturedException
        if isinstance(trace, str) and trace.strip():
            return trace
        java = getattr(current, "java_exception", None)  # py4j's Py4JJavaError
        if java is not None:
            return str(current)
        current = current.__cause__ or current.__context__
    return None


def _python_failure(text: str) -> str | None:
    """``a Python function raised ValueError: bad user (job.py line 4, in f)`` from a
    worker's traceback embedded in Spark's message. With chained tracebacks ("During
    handling of the above exception...") the last one is the one that ended the worker."""
    start = text.rfind("Traceback (most recent call last):")
    if start < 0:
        return None
    lines = text[start:].splitlines()[1:]
    index = 0
    while index < len(lines) and lines[index].startswith((" ", "\t")) \
            and not lines[index].startswith(("\tat ", " SQLSTATE")):
        index += 1  # frames and their source lines
    frames = [m for m in map(_PYTHON_FRAME.match, lines[:index]) if m is not None]
    message = []
    for line in lines[index:]:
        if not line.strip() or line.startswith(("\t", " ")) \
                or line.strip().startswith(_DETAIL_STARTS):
            break
        message.append(line.strip())
    if not message:
        return None
    where = ""
    if frames:
        frame = frames[-1]
        name = frame["file"].rsplit("/", 1)[-1]
        where = f" ({name} line {frame['line']}, in {frame['func']})"
    return f"a Python function raised {' '.join(message)}{where}"


def failure_summary(exc: BaseException, limit: int = SUMMARY_LIMIT) -> str:
    """One line: the cause as Spark states it, without plans, frames or SQL states."""
    text = str(exc).strip()
    summary = _python_failure(text)
    if summary is None:
        kept = []
        for line in text.splitlines():
            stripped = line.strip()
            if stripped.startswith(_DETAIL_STARTS) or stripped.startswith("at ") \
                    or line.startswith("\t"):
                break
            kept.append(stripped)
            # An analysis error ends its message with ';' and prints the plan below.
            if stripped.endswith(";"):
                break
        summary = " ".join(part for part in kept if part)
    summary = " ".join(_SQLSTATE.sub("", summary).split()).rstrip(";")
    if not summary:
        summary = exc.__class__.__name__
    if len(summary) > limit:
        summary = summary[: limit - 3].rstrip() + "..."
    return summary


# Spark's Kafka connector (KafkaExceptions) when failOnDataLoss is on and offsets it must
# read are gone from the broker; its "Reason" names a range and partition when reading.
KAFKA_DATA_LOSS = "Some data may have been lost because they are not available in Kafka"
_KAFKA_LOST_RANGE = re.compile(
    r"offset \[(?P<start>\d+), (?P<end>\d+)\) for topic partition (?P<partition>\S+)")
# The consumer's exception when its fetch position is below the partition's log start.
_OFFSET_OUT_OF_RANGE = "OffsetOutOfRangeException"


@dataclass(frozen=True)
class KafkaDataLoss:
    """What Spark's connector says of offsets it could not read. In Spark 4.x
    (KafkaDataConsumer.get) a fetch the broker answers with OFFSET_OUT_OF_RANGE is reported
    as ``[position, end of the batch's range)`` for the partition the failing task read:
    the end is not where the broker's records start, only where that task would have
    stopped (``end_exact`` False). A record found past the position is reported as
    ``[position, that record's offset)``, exact."""

    partition: str | None = None  # "topic-0"
    start: int | None = None
    end: int | None = None
    end_exact: bool = False

    def describe(self) -> str:
        if self.partition is None or self.start is None or self.end is None:
            return "offsets"
        if self.end_exact:
            return f"offsets [{self.start}, {self.end}) of {self.partition}"
        return (f"offsets from {self.start} of {self.partition} (the batch was to read "
                f"[{self.start}, {self.end}); where the broker's records now start was not "
                "learnt)")


def kafka_data_loss(exc: BaseException) -> KafkaDataLoss | None:
    """Whether a failure is Spark's Kafka connector finding offsets deleted, and what it
    says of them; None for any other failure."""
    text = failure_details(exc)
    if KAFKA_DATA_LOSS not in text:
        return None
    lost = _KAFKA_LOST_RANGE.search(text)
    if lost is None:
        return KafkaDataLoss()
    return KafkaDataLoss(lost["partition"], int(lost["start"]), int(lost["end"]),
                         end_exact=_OFFSET_OUT_OF_RANGE not in text)


def failure_details(exc: BaseException) -> str:
    """Everything known about a failure, for the log file."""
    parts = ["".join(traceback.format_exception(exc))]
    trace = jvm_stack_trace(exc)
    if trace is not None:
        parts.append("JVM stack trace:\n" + trace)
    return "\n".join(parts)
