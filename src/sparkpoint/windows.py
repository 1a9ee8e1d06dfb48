"""The event-time window of a stateful operator: what its state's keys mean.

A windowed aggregation keeps one row per (window, key); resuming it with another window
length, slide or start makes the job emit windows of both shapes side by side (00:30-00:40
from old state next to 00:30-00:45 from new input). Session windows depend on their gap the
same way. Recorded per operator when a job runs (from Spark's plan), carried into snapshot
manifests, and compared when a job resumes.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

MICROS_PER_UNIT = (("day", 86_400_000_000), ("hour", 3_600_000_000), ("minute", 60_000_000),
                   ("second", 1_000_000), ("millisecond", 1_000), ("microsecond", 1))


def human_duration(micros: int) -> str:
    """``10 minutes``, ``1 hour``, ``90 seconds``: the largest unit that divides it."""
    for unit, size in MICROS_PER_UNIT:
        if micros % size == 0:
            count = micros // size
            return f"{count} {unit}{'' if count == 1 else 's'}"
    return f"{micros} microseconds"


class WindowSpec(BaseModel):
    """``time``: window()/tumbling or sliding; ``session``: session_window() with a fixed
    gap; ``none``: the operator's keys hold no window."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    kind: Literal["time", "session", "none"]
    duration_us: int | None = None
    slide_us: int | None = None
    start_us: int | None = None
    gap_us: int | None = None

    def describe(self) -> str:
        if self.kind == "time" and self.duration_us is not None:
            text = f"windows of {human_duration(self.duration_us)}"
            if self.slide_us is not None and self.slide_us != self.duration_us:
                text += f" sliding every {human_duration(self.slide_us)}"
            if self.start_us:
                text += f" starting {human_duration(self.start_us)} later"
            return text
        if self.kind == "session" and self.gap_us is not None:
            return f"session windows with a gap of {human_duration(self.gap_us)}"
        return "no window"


NO_WINDOW = WindowSpec(kind="none")
