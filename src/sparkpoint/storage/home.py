"""Layout of sparkpoint's home directory: jobs, their checkpoints, snapshots."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from sparkpoint.errors import InvalidNameError
from sparkpoint.storage.local import to_path

DEFAULT_HOME = ".sparkpoint"
HOME_ENV = "SPARKPOINT_HOME"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")


def validate_name(name: str, what: str) -> str:
    """Job and snapshot names become directory names: no separators, no '..', no dot-files."""
    if not _NAME.match(name) or ".." in name:
        raise InvalidNameError(
            f"{what} name {name!r} is not valid: expected 1-128 characters from letters, digits, "
            "'_', '-', '.', starting with a letter or digit, without '..' or '/'; choose another"
        )
    return name


@dataclass(frozen=True)
class Home:
    root: Path

    @classmethod
    def resolve(cls, home: str | None) -> Home:
        chosen = home or os.environ.get(HOME_ENV) or DEFAULT_HOME
        return cls(to_path(chosen))

    @property
    def jobs_dir(self) -> Path:
        return self.root / "jobs"

    @property
    def snapshots_dir(self) -> Path:
        return self.root / "snapshots"

    @property
    def logs_dir(self) -> Path:
        """Spark's log and stack traces of each command that started a JVM."""
        return self.root / "logs"

    @property
    def staging_dir(self) -> Path:
        # Inside snapshots/ so that publishing is a rename within one filesystem.
        return self.snapshots_dir / ".staging"

    def job_dir(self, job: str) -> Path:
        return self.jobs_dir / validate_name(job, "job")

    def checkpoint_dir(self, job: str) -> Path:
        return self.job_dir(job) / "checkpoint"

    def snapshot_dir(self, snapshot: str) -> Path:
        return self.snapshots_dir / validate_name(snapshot, "snapshot")
