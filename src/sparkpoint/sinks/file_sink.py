"""Spark's file sink (parquet, json, csv, orc, text, avro) behind the Sink interface: its
batches are the entries of its log, ``<output>/_spark_metadata`` (checkpoint/sink_log.py),
its history filled and seeded entry by entry (sinks/gaps.py, sinks/history.py), its rewinds
moves of entries and files aside (sinks/rewind.py)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from sparkpoint.checkpoint.sink_log import latest_batch, seed_empty_history
from sparkpoint.sinks import rewind as rewinds
from sparkpoint.sinks.base import Echo, Sink
from sparkpoint.sinks.gaps import Gap, fill_gap, find_gap
from sparkpoint.sinks.rewind import RewindPlan


@dataclass(frozen=True)
class FileSink(Sink):
    format: str
    location: str

    def last_batch(self) -> int | None:
        return latest_batch(self.location)

    def gap(self, through: int, default_interval: int) -> Gap:
        return find_gap(self.location, through, default_interval)

    def fill(self, gap: Gap, after_each: Callable[[], None] | None = None) -> list[str]:
        return fill_gap(gap, after_each)

    def seed_empty_history(self, through: int, default_interval: int) -> list[str]:
        return seed_empty_history(self.location, through, default_interval)

    def pending_rewinds(self) -> list[RewindPlan]:
        return rewinds.pending(self.location)

    def finish_rewinds(self, echo: Echo) -> list[RewindPlan]:
        return rewinds.finish_pending(self.location, echo)

    def plan_rewind(self, to_batch: int, reason: str) -> RewindPlan | None:
        return rewinds.plan_rewind(self.location, to_batch, reason)

    def rewind(self, plan: RewindPlan) -> None:
        rewinds.rewind(plan)
