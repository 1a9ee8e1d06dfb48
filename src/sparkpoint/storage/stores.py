"""Which FileIO serves a location: the table of URL schemes, one store module each
(local_io.py, s3_io.py, webhdfs.py), and the FileIOs kept for reuse."""

from __future__ import annotations

import os
from collections.abc import Callable

from sparkpoint.errors import UsageError
from sparkpoint.storage.fileio import FileIO, scheme_of
from sparkpoint.storage.local_io import LocalFileIO
from sparkpoint.storage.s3_io import S3FileIO
from sparkpoint.storage.webhdfs import WebHdfsFileIO


def _webhdfs(location: str) -> FileIO:
    return WebHdfsFileIO(location)


# A factory is given the location: an HDFS store is one NameNode, named in the URL.
_FACTORIES: dict[str, Callable[[str], FileIO]] = {
    "file": lambda _location: LocalFileIO(),
    "s3": lambda _location: S3FileIO(),
    "hdfs": _webhdfs,
    "webhdfs": _webhdfs,
    "swebhdfs": _webhdfs,
}


def register_scheme(scheme: str, factory: Callable[[str], FileIO]) -> None:
    _FACTORIES[scheme] = factory
    for key in [key for key in _reused if key[0] == scheme]:
        del _reused[key]


# The environment variables a store's client is configured from: a FileIO is reused while
# they are unchanged (setting up an S3 client costs about half a second).
_CLIENT_ENV = ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_REGION", "AWS_DEFAULT_REGION",
               "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE")
_reused: dict[tuple[str, tuple[str | None, ...]], FileIO] = {}


def file_io(location: str) -> FileIO:
    """The FileIO for a location's scheme; a clear error for schemes sparkpoint cannot use."""
    scheme = scheme_of(location)
    factory = _FACTORIES.get(scheme)
    if factory is None:
        known = ", ".join(sorted(f"{name}://" for name in _FACTORIES))
        raise UsageError(
            f"{location}: expected a local path or a URL with one of the schemes {known}, "
            f"found scheme '{scheme}'; use one of those"
        )
    if scheme != "s3":
        # Local stores cost nothing to make; an HDFS store depends on the URL's NameNode.
        return factory(location)
    key = (scheme, tuple(os.environ.get(name) for name in _CLIENT_ENV))
    io = _reused.get(key)
    if io is None:
        io = _reused[key] = factory(location)
    return io
