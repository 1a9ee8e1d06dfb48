"""Input a start went on without, accepted explicitly (``--accept-data-loss``): what a job's
lineage and an imported snapshot's manifest record of it.

Kept apart from the checks (``sources/input_gaps.py``), which talk to brokers: records are
read by commands that start nothing.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

ACCEPT_OPTION = "--accept-data-loss"


class AcceptedLoss(BaseModel):
    """One source's lost input as it was when the loss was accepted: a Kafka partition's
    deleted offsets ``[resume_offset, earliest_offset)`` (``records`` of them), or the
    input files a file source's log named that were gone."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    source: str
    topic: str | None = None
    partition: int | None = None
    resume_offset: int | None = None
    earliest_offset: int | None = None
    records: int | None = None
    missing_files: tuple[str, ...] = ()
    accepted_at: str
    # The command that went on without it ("run --from-snapshot s1", "snapshot import").
    by: str = ""

    def describe(self) -> str:
        if self.topic is not None:
            return (f"source '{self.source}': {self.records} record(s) of {self.topic}-"
                    f"{self.partition} (offsets {self.resume_offset}.."
                    f"{(self.earliest_offset or 0) - 1}) accepted as lost by {self.by} at "
                    f"{self.accepted_at}")
        return (f"source '{self.source}': {len(self.missing_files)} input file(s) accepted as "
                f"lost by {self.by} at {self.accepted_at}")
