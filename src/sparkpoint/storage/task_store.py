"""A store client for code that runs in Spark tasks, on executors whose environment is not
the driver's.

sparkpoint's store clients read their settings from the process environment (the AWS
variables for S3, ``SPARKPOINT_WEBHDFS_URL`` and ``HADOOP_USER_NAME`` for WebHDFS). An
executor on another host has its own environment, usually without them; Spark's s3a gets
its settings from the application's configuration instead. A :class:`TaskStore` carries the
settings the driver resolved, in the task's closure as Spark ships the s3a settings, and
opens the client with them in the task.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass

from sparkpoint.storage.fileio import FileIO, scheme_of
from sparkpoint.storage.stores import file_io
from sparkpoint.storage.webhdfs import WEBHDFS_URL_ENV, webhdfs_address


@dataclass(frozen=True)
class TaskStore:
    """A store location and the environment its client is made with."""

    location: str
    environment: tuple[tuple[str, str], ...]

    @contextmanager
    def opened(self) -> Iterator[FileIO]:
        """The client, with the driver's settings whatever this process's are; use it
        inside the block only (S3's client reads its credentials at its first request)."""
        with _environment(dict(self.environment)):
            yield file_io(self.location)


def task_store(location: str, s3_environment: Mapping[str, str]) -> TaskStore:
    """On the driver: what a task needs to reach ``location``. ``s3_environment``: the
    AWS variables the session's s3a settings give (spark/s3a.py), for an S3 location."""
    scheme = scheme_of(location)
    if scheme == "s3":
        return TaskStore(location, tuple(sorted(s3_environment.items())))
    if scheme in ("hdfs", "webhdfs", "swebhdfs"):
        # Resolved here, where HADOOP_CONF_DIR or SPARKPOINT_WEBHDFS_URL may say where the
        # NameNode answers; an executor may have neither.
        address = webhdfs_address(location)
        return TaskStore(location, ((WEBHDFS_URL_ENV, address.url),
                                    ("HADOOP_USER_NAME", address.user)))
    return TaskStore(location, ())


@contextmanager
def _environment(values: Mapping[str, str]) -> Iterator[None]:
    """``values`` set in this process's environment while the client is used, then the
    environment as it was: a reused Python worker runs other tasks after this one."""
    before = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
