"""What the window bounds stored in a stateful operator's keys tell about its window (no JVM).

A windowed aggregation keys its state by (window, group key), the window a struct of start
and end; a session window aggregation keys it by (group key, session start) and keeps the
session's bounds (the ``session_window`` struct) in the value. From those bounds:

- time windows (window()): the length is exact (end - start, one value for every key); the
  slide is exact once two stored windows overlap (the smallest step between starts is then
  the slide: every event lies in length/slide consecutive windows, one slide apart); with no
  overlap left in the state (tumbling windows, or sliding ones whose earlier windows were all
  emitted) the state only says that every start lies on a grid of that step. The start
  offset is the starts' remainder modulo the slide.
- session windows (session_window()): a session spans from its first event to its last
  event plus the gap, so the gap is at most the shortest stored session; a longer gap is
  refuted by the state, a shorter one cannot be told apart from sessions of several events.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Any

from sparkpoint.checkpoint.layout import OperatorDir
from sparkpoint.checkpoint.logs import CommitLogEntry
from sparkpoint.checkpoint.providers import StateProvider
from sparkpoint.checkpoint.state_files import readable_partition
from sparkpoint.checkpoint.unsafe_row import read_field
from sparkpoint.windows import WindowSpec, human_duration


def _kind_of(spark_type: Any) -> str:
    return spark_type if isinstance(spark_type, str) else str(spark_type.get("type"))


def window_column(key_schema: dict[str, Any] | None) -> int | None:
    """Index of the key column that is a window struct (start, end timestamps), or None."""
    for index, column in enumerate((key_schema or {}).get("fields", [])):
        spark_type = column["type"]
        if _kind_of(spark_type) != "struct":
            continue
        kinds = {f["name"]: _kind_of(f["type"]) for f in spark_type["fields"]}
        if kinds.get("start") in ("timestamp", "timestamp_ntz") and \
                kinds.get("end") in ("timestamp", "timestamp_ntz"):
            return index
    return None


@dataclass(frozen=True)
class StoredWindows:
    """The window bounds of every key of an operator's state, summarised (microseconds)."""

    rows: int
    lengths: frozenset[int]
    # Greatest common divisor of the differences between distinct starts (None: one start).
    step: int | None
    # The smallest start, to place the grid.
    first_start: int | None

    @property
    def length(self) -> int | None:
        return next(iter(self.lengths)) if len(self.lengths) == 1 else None

    @property
    def overlapping(self) -> bool:
        """Two stored windows overlap: the step is then the slide."""
        return self.length is not None and self.step is not None and self.step < self.length

    def as_time_window(self) -> WindowSpec | None:
        """The time window the keys show: the slide where windows overlap, else tumbling."""
        length = self.length
        if length is None:
            return None
        slide = self.step if self.overlapping and self.step is not None else length
        start = self.first_start % slide if self.first_start is not None else 0
        return WindowSpec(kind="time", duration_us=length, slide_us=slide, start_us=start)

    def describe(self) -> str:
        if not self.lengths:
            return "no window"
        if len(self.lengths) > 1:
            return "windows of several lengths (" + ", ".join(
                human_duration(n) for n in sorted(self.lengths)) + ")"
        window = self.as_time_window()
        assert window is not None
        text = window.describe()
        if not self.overlapping:
            text += " (no two stored windows overlap: tumbling, as far as the state shows)"
        return text


def stored_windows(operator: OperatorDir, version: int, provider: StateProvider,
                   commit: CommitLogEntry) -> StoredWindows | None:
    """The window bounds of the operator's rows at ``version`` (made by ``commit``, which
    names its files in checkpoint format v2); None when no store's key or value holds a
    window struct."""
    rows = 0
    lengths: set[int] = set()
    starts: set[int] = set()
    found = False
    for store_index, store in enumerate(operator.stores()):
        schema = operator.schema(store)
        if schema is None:
            continue
        # The bounds are in the key (window()), else in the value (session_window()).
        in_value = window_column(schema.key_schema) is None
        row_schema = schema.value_schema if in_value else schema.key_schema
        column = window_column(row_schema)
        if column is None or row_schema is None:
            continue
        found = True
        fields = row_schema["fields"]
        for partition in range(operator.partitions):
            pdir = readable_partition(store.partition_dir(operator.path, partition), version)
            unique_id = operator.unique_id(commit, partition, store_index) \
                if provider.has_unique_ids else None
            for key, value in provider.read_pairs(pdir, version, operator.key_encoding(store),
                                                  unique_id):
                bounds = read_field(value if in_value else key, fields, column, str(pdir))
                if not bounds or bounds[0] is None or bounds[1] is None:
                    continue
                rows += 1
                starts.add(int(bounds[0]))
                lengths.add(int(bounds[1]) - int(bounds[0]))
    if not found:
        return None
    return summarised(rows, lengths, starts)


def summarised(rows: int, lengths: set[int], starts: set[int]) -> StoredWindows:
    """The summary of ``rows`` stored windows of the given lengths and distinct starts."""
    ordered = sorted(starts)
    step = 0
    for low, high in itertools.pairwise(ordered):
        step = math.gcd(step, high - low)
    return StoredWindows(rows, frozenset(lengths), step or None,
                         ordered[0] if ordered else None)


def time_window_mismatch(found: StoredWindows, job: WindowSpec) -> str | None:
    """Why windows stored as ``found`` cannot come from the job's time window, or None."""
    assert job.kind == "time" and job.duration_us is not None
    duration = job.duration_us
    slide = job.slide_us or duration
    offset = job.start_us or 0
    if found.rows == 0:
        return None
    if found.lengths != {duration}:
        return f"windows of {' and '.join(human_duration(n) for n in sorted(found.lengths))}"
    if found.overlapping and found.step != slide:
        return f"windows sliding every {human_duration(found.step or 0)}"
    assert found.first_start is not None
    if (found.first_start - offset) % slide or (found.step and found.step % slide):
        return "window starts off the job's grid"
    return None


def session_gap_mismatch(found: StoredWindows, job: WindowSpec) -> str | None:
    """Why sessions stored as ``found`` cannot come from the job's gap, or None."""
    assert job.kind == "session" and job.gap_us is not None
    if found.rows == 0 or not found.lengths:
        return None
    shortest = min(found.lengths)
    if shortest < job.gap_us:
        return (f"a session of {human_duration(shortest)}, shorter than the job's gap of "
                f"{human_duration(job.gap_us)} (a session lasts at least its gap)")
    return None
