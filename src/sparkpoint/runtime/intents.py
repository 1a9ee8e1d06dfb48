"""Intent records: what a multi-step change of a job's checkpoint is about to do, written to
the home before the checkpoint changes and removed once the change is complete.

A process cut off in between leaves its intent behind; the next command that takes the job's
lock reads it and finishes or undoes the work (``runtime/recovery.py``). Each intent carries
everything needed to redo its steps without asking a source or Spark again, so finishing it
gives exactly what the interrupted command would have given.
"""

from __future__ import annotations

import base64
import json
from typing import Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field
from pydantic import ValidationError as PydanticValidationError

from sparkpoint.drain.synthetic import DrainBatch
from sparkpoint.errors import CorruptRecordError
from sparkpoint.runtime.lock import fence
from sparkpoint.startpoints.resolve import Resolved
from sparkpoint.startpoints.store import Startpoint
from sparkpoint.storage.home import Home
from sparkpoint.storage.location import Location, write_atomic

DRAIN_INTENT = "drain-intent.json"
STARTPOINT_INTENT = "startpoint-intent.json"


class DrainIntent(BaseModel):
    """A drain under way: its synthetic batch and the snapshot it was asked to take."""

    model_config = ConfigDict(extra="forbid")
    format_version: Literal[1] = 1
    drain: DrainBatch
    snapshot: str | None = None
    started_at: str


class ResolvedSource(BaseModel):
    """One source's resolved startpoints, as applied (log entries kept base64-encoded)."""

    model_config = ConfigDict(extra="forbid")
    source: str
    offset_before: str | None
    offset_after: str | None
    log_files: list[tuple[str, str]] = Field(default_factory=list)
    lines: list[str] = Field(default_factory=list)

    @classmethod
    def of(cls, resolved: Resolved) -> ResolvedSource:
        return cls(source=resolved.source, offset_before=resolved.offset_before,
                   offset_after=resolved.offset_after, lines=list(resolved.lines),
                   log_files=[(name, base64.b64encode(data).decode("ascii"))
                              for name, data in resolved.log_files])

    def to_resolved(self) -> Resolved:
        return Resolved(self.source, self.offset_before, self.offset_after,
                        [(name, base64.b64decode(data)) for name, data in self.log_files],
                        list(self.lines))


class StartpointIntent(BaseModel):
    """Startpoints being applied to committed batch ``batch`` of the job's checkpoint."""

    model_config = ConfigDict(extra="forbid")
    format_version: Literal[1] = 1
    intent_id: str
    batch: int
    recorded_at: str
    pending: dict[str, list[Startpoint]]
    resolved: list[ResolvedSource]
    # The sets (startpoint files) folded into ``pending``, per source: exactly what is
    # removed once applied (none recorded by an earlier version: compared instead).
    consumed: dict[str, list[str]] | None = None


Intent = TypeVar("Intent", DrainIntent, StartpointIntent)


def _path(home: Home, job: str, name: str) -> Location:
    return home.job_dir(job) / name


def save(home: Home, job: str, intent: DrainIntent | StartpointIntent) -> None:
    name = DRAIN_INTENT if isinstance(intent, DrainIntent) else STARTPOINT_INTENT
    text = json.dumps(intent.model_dump(mode="json"), indent=2) + "\n"
    fence(home, job)  # every step of a protocol starts from its intent: none when fenced out
    write_atomic(_path(home, job, name), text.encode("utf-8"))


def load(home: Home, job: str, kind: type[Intent]) -> Intent | None:
    """The job's pending intent of that kind, if a command left one."""
    path = _path(home, job, DRAIN_INTENT if kind is DrainIntent else STARTPOINT_INTENT)
    try:
        text = path.read_text("utf-8")
    except FileNotFoundError:
        return None
    try:
        return kind.model_validate(json.loads(text))
    except (json.JSONDecodeError, UnicodeDecodeError, PydanticValidationError) as exc:
        first = str(exc).strip().splitlines()[0]
        what = "drain" if kind is DrainIntent else "startpoint application"
        raise CorruptRecordError(
            f"{path}: expected the record of an interrupted {what}, found unreadable content "
            f"({first}); nothing was changed: inspect the job's checkpoint, then remove the "
            "file to go on"
        ) from exc


def remove(home: Home, job: str, kind: type[DrainIntent] | type[StartpointIntent]) -> None:
    name = DRAIN_INTENT if kind is DrainIntent else STARTPOINT_INTENT
    _path(home, job, name).unlink(missing_ok=True)
