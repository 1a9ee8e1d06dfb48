"""Layout of sparkpoint's home directory: jobs, their checkpoints, snapshots."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path

from sparkpoint import settings
from sparkpoint.errors import InvalidNameError
from sparkpoint.storage.file_cache import SCRATCH_ENV as SCRATCH_ENV
from sparkpoint.storage.file_cache import scratch_base
from sparkpoint.storage.fileio import is_local, join, spark_url
from sparkpoint.storage.local import to_path
from sparkpoint.storage.location import Location, StorePath
from sparkpoint.storage.paths import check_location
from sparkpoint.storage.stores import file_io

DEFAULT_HOME = settings.DEFAULT_HOME
HOME_ENV = settings.HOME.name
SNAPSHOTS_ENV = settings.SNAPSHOTS.name
# Where a home on S3 or HDFS keeps this machine's local space (default ~/.cache/sparkpoint).
# Names that become a file or directory name under the home. Spark's source names
# (DataStreamReader.name: ASCII letters, digits, '_') all fit; the length leaves room for the
# suffixes sparkpoint adds (".json", staging and temp-file decorations) within 255 bytes.
MAX_NAME_LENGTH = 200
_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")
# Stateful operator names never become paths, and derived ones carry Spark's operator name
# and key columns ("stateStoreSave(user,window)"); only what could traverse is refused.
_LABEL_FORBIDDEN = re.compile(r"[/\\\x00-\x1f\x7f]")


def name_problem(name: object, what: str) -> str | None:
    """Why ``name`` cannot name a job, snapshot or source (they become paths), or None."""
    if isinstance(name, str) and 0 < len(name) <= MAX_NAME_LENGTH and _NAME.fullmatch(name) \
            and ".." not in name:
        return None
    return (f"{what} name {name!r} is not valid: expected 1-{MAX_NAME_LENGTH} characters from "
            "letters, digits, '_', '-', '.', starting with a letter, digit or '_', without "
            "'..' or '/'; choose another")


def operator_name_problem(name: object) -> str | None:
    """Why ``name`` cannot name a stateful operator, or None."""
    if isinstance(name, str) and 0 < len(name) <= 1000 and not name.startswith(".") \
            and ".." not in name and not _LABEL_FORBIDDEN.search(name):
        return None
    return (f"operator name {name!r} is not valid: expected 1-1000 characters without '/', "
            "'\\', '..', control characters or a leading '.'; choose another")


def validate_name(name: str, what: str) -> str:
    """Job, snapshot and source names become directory or file names under the home: every
    such path is built from a name that passed here."""
    problem = name_problem(name, what)
    if problem is not None:
        raise InvalidNameError(problem)
    return name


def validate_operator_name(name: str) -> str:
    problem = operator_name_problem(name)
    if problem is not None:
        raise InvalidNameError(problem)
    return name


def local_copy_dir(url: str) -> Path:
    """This machine's local space for a home on S3 or HDFS: one directory per home URL."""
    digest = hashlib.sha256(url.encode("utf-8")).hexdigest()[:16]
    return scratch_base() / digest


@dataclass(frozen=True)
class Home:
    # A local home's directory; for a home on S3 or HDFS, this machine's local space for it
    # (logs, scratch, the kernel locks of its processes): never a copy of the home's files.
    root: Path
    # Where snapshots live when not in the home (--snapshots / $SPARKPOINT_SNAPSHOTS): a
    # path or a URL of any store sparkpoint can use (storage/fileio.py).
    snapshots: str | None = None
    # The home's URL when it is on S3 or HDFS (s3://bucket/prefix, hdfs://host:port/path).
    url: str | None = None

    @classmethod
    def resolve(cls, home: str | None, snapshots: str | None = None) -> Home:
        chosen = check_location(home or settings.HOME.get(), "home")
        snapshots = snapshots or settings.SNAPSHOTS.get()
        if snapshots is not None:
            check_location(snapshots, "snapshot store")
        if is_local(chosen):
            return cls(to_path(chosen), snapshots)
        file_io(chosen)  # an unknown scheme fails here, naming the schemes that work
        url = chosen.rstrip("/")
        return cls(local_copy_dir(url), snapshots, url)

    @property
    def remote(self) -> bool:
        return self.url is not None

    @property
    def location(self) -> str:
        """The home as the user named it: its URL, or its local directory."""
        return self.url if self.url is not None else str(self.root)

    @property
    def snapshots_location(self) -> str:
        if self.snapshots:
            return self.snapshots
        if self.url is not None:
            return join(self.url, "snapshots")
        return str(self.snapshots_dir)

    def job_url(self, job: str) -> str:
        """The job's directory in the home (a URL for a home on S3 or HDFS)."""
        return str(self.job_dir(job))

    def checkpoint_location(self, job: str) -> str:
        """The checkpointLocation Spark is given: in the home itself, s3:// as s3a://."""
        if self.url is None:
            return str(self.checkpoint_dir(job))
        return spark_url(join(self.job_url(job), "checkpoint"))

    @property
    def scratch_dir(self) -> Path:
        """Local working space: snapshots fetched from a remote store, exports on their way
        to one (inside the home, so that hard links from checkpoints work)."""
        return self.root / "scratch"

    @property
    def jobs_dir(self) -> Location:
        """Where the jobs are: read and written there, whatever the store."""
        if self.url is None:
            return self.root / "jobs"
        return StorePath.of(join(self.url, "jobs"))

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

    def job_dir(self, job: str) -> Location:
        return self.jobs_dir / validate_name(job, "job")

    def checkpoint_dir(self, job: str) -> Location:
        return self.job_dir(job) / "checkpoint"

    def local_job_dir(self, job: str) -> Path:
        """This machine's own directory for a job: the job's directory of a local home; for a
        home on S3 or HDFS, where its processes here meet (kernel locks), nothing shared."""
        if self.url is None:
            return self.root / "jobs" / validate_name(job, "job")
        return self.root / "local" / validate_name(job, "job")

    def snapshot_dir(self, snapshot: str) -> Path:
        return self.snapshots_dir / validate_name(snapshot, "snapshot")
