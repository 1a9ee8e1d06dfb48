"""Pending startpoints, one JSON file per source under ``<home>/jobs/<job>/startpoints/``.

Kept apart from the checkpoint, so they can be written while the job runs; the job's next
start applies them to its checkpoint and removes them (the job record keeps them for audit).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict
from pydantic import ValidationError as PydanticValidationError

from sparkpoint.errors import CorruptRecordError
from sparkpoint.storage.home import Home, name_problem, validate_name
from sparkpoint.storage.local import write_atomic

PositionKind = Literal["earliest", "latest", "timestamp", "offset"]
WHOLE_SOURCE = "*"


class Startpoint(BaseModel):
    """Where one source (or one of its partitions) starts at the job's next start."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    source: str
    partition: str = WHOLE_SOURCE  # "*", "<p>" or "<topic>:<p>"
    kind: PositionKind
    value: str | None = None  # ISO 8601 time, or offset JSON
    set_at: str

    def describe(self) -> str:
        where = "" if self.partition == WHOLE_SOURCE else f" partition {self.partition}"
        what = self.kind if self.value is None else f"{self.kind} {self.value}"
        return f"{self.source}{where}: {what}"


class StartpointStore:
    def __init__(self, home: Home) -> None:
        self.home = home

    def directory(self, job: str) -> Path:
        return self.home.job_dir(job) / "startpoints"

    def _path(self, job: str, source: str) -> Path:
        return self.directory(job) / f"{validate_name(source, 'source')}.json"

    def get(self, job: str, source: str) -> list[Startpoint]:
        path = self._path(job, source)
        if not path.is_file():
            return []
        try:
            items = json.loads(path.read_text("utf-8"))
            if not isinstance(items, list):
                raise ValueError(f"expected a JSON list, found {type(items).__name__}")
            entries = [Startpoint.model_validate(item) for item in items]
        except (OSError, ValueError, RecursionError, PydanticValidationError) as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise CorruptRecordError(
                f"{path}: expected the pending startpoints of source '{source}' (a JSON list), "
                f"found unreadable content ({first}); remove them with 'sparkpoint startpoint "
                f"clear JOB {source}' and set them again") from exc
        if any(entry.source != source for entry in entries):
            raise CorruptRecordError(
                f"{path}: holds startpoints of another source than '{source}'; remove the file "
                "and set them again with 'sparkpoint startpoint set'")
        return entries

    def set(self, job: str, startpoint: Startpoint) -> list[Startpoint]:
        """Store ``startpoint``; a whole-source one replaces the source's others, a partition
        one replaces that partition's."""
        kept = [] if startpoint.partition == WHOLE_SOURCE else [
            s for s in self.get(job, startpoint.source) if s.partition != startpoint.partition]
        entries = [*kept, startpoint]
        data = json.dumps([s.model_dump(mode="json") for s in entries], indent=2) + "\n"
        write_atomic(self._path(job, startpoint.source), data.encode())
        return entries

    def all(self, job: str) -> dict[str, list[Startpoint]]:
        directory = self.directory(job)
        if not directory.is_dir():
            return {}
        # Only files named by a valid source name are startpoints (not temp files, not
        # anything else dropped there).
        return {path.stem: self.get(job, path.stem)
                for path in sorted(directory.glob("*.json"))
                if path.is_file() and name_problem(path.stem, "source") is None}

    def clear_if_unchanged(self, job: str, source: str, applied: list[Startpoint]) -> None:
        """Clear what was applied, but keep startpoints set meanwhile for the next start."""
        if self.get(job, source) == applied:
            self.clear(job, source)

    def clear(self, job: str, source: str) -> bool:
        path = self._path(job, source)
        existed = path.is_file()
        path.unlink(missing_ok=True)
        return existed
