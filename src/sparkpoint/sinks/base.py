"""The sink of a job, as sparkpoint needs to know it: one interface, one class per kind of
sink (``sinks/formats.py`` chooses it from the format the job writes).

Spark's sinks remember which batches they wrote in their own way: a file sink in its log
(``<output>/_spark_metadata``), a Delta table in its transaction log (the query's id and
batch in each commit). Whatever the kind, a start from a snapshot, a run and a rollback ask
the sink the same questions: the newest batch it holds (a sink ahead of the checkpoint skips
the batches it already has), the batches it lacks up to a new checkpoint's (its history),
the rewinds of it a cut-off command left, and how to take it back to an earlier batch
(``--rewind-output``). Which jobs write an output (its ownership and lineage) is told from
the jobs' records by its ``location`` (``upgrade/output_ownership.py``).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable

from sparkpoint.sinks.gaps import Gap
from sparkpoint.sinks.rewind import RewindPlan

Echo = Callable[[str], None]


class Sink(ABC):
    #: The format the job writes (``parquet``, ``json``, ...).
    format: str
    #: Where it writes: a local path or a URL (what records name, fences guard).
    location: str

    @abstractmethod
    def last_batch(self) -> int | None:
        """The newest batch the sink holds (None: none yet)."""

    @abstractmethod
    def gap(self, through: int, default_interval: int) -> Gap:
        """The batches up to ``through`` the sink lacks, which a job started from a snapshot
        at that batch owes it (empty entries: they wrote nothing to it)."""

    @abstractmethod
    def fill(self, gap: Gap, after_each: Callable[[], None] | None = None) -> list[str]:
        """Give the sink what ``gap`` lacks; the entries written."""

    @abstractmethod
    def seed_empty_history(self, through: int, default_interval: int) -> list[str]:
        """A new, empty output: an empty history up to ``through``."""

    @abstractmethod
    def pending_rewinds(self) -> list[RewindPlan]:
        """Rewinds of the sink a cut-off command left."""

    @abstractmethod
    def finish_rewinds(self, echo: Echo) -> list[RewindPlan]:
        """Complete every rewind a cut-off command left; return them."""

    @abstractmethod
    def plan_rewind(self, to_batch: int, reason: str) -> RewindPlan | None:
        """What taking the sink back to ``to_batch`` moves aside (None: nothing to move)."""

    @abstractmethod
    def rewind(self, plan: RewindPlan) -> None:
        """Take the sink back as planned (crash points ``rewind.*``)."""
