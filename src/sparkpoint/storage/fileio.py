"""One narrow interface to every store sparkpoint reads and writes.

A location is a URL (``s3://bucket/key``, ``hdfs://namenode:8020/path``, ``file:///path``) or a
plain local path. Each store is a ``FileIO`` built on fsspec, in a module of its own
(local_io.py, s3_io.py, webhdfs.py); storage/stores.py maps a URL's scheme to it
(``file_io``). What a store can do (atomic rename, hard links, server-side copy, atomic
create-if-absent) is recorded in its ``Capabilities`` so that callers choose a strategy once
instead of branching on schemes. Every change is fenced here (storage/fencing.py), whatever
the store.

sparkpoint's own I/O never starts a JVM: S3 goes through s3fs, HDFS through WebHDFS. Spark
reaches the same locations through its Hadoop filesystems (``s3a://``, ``hdfs://``);
``spark_url`` gives the URL Spark must be handed for a location.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import errno
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import fsspec
from fsspec.callbacks import Callback, NoOpCallback, TqdmCallback

from sparkpoint import progress
from sparkpoint.errors import StoreUnreachableError
from sparkpoint.storage.fencing import check_write, fence_for

# Files moved at once by put_files/get_files; S3 and WebHDFS are latency-bound per request,
# so several requests in flight keep the link busy.
TRANSFER_CONCURRENCY = 16


@dataclass(frozen=True)
class Capabilities:
    # A directory rename is atomic and refuses an existing non-empty target.
    atomic_rename: bool
    # Files can be hard-linked (sharing them costs no I/O and no space).
    hard_links: bool
    # The store copies an object to another key without the bytes passing through us.
    server_side_copy: bool
    # "Create this file unless it exists" is one atomic request (conditional put).
    conditional_create: bool


def local_path(location: str) -> str:
    if location.startswith("file:"):
        return urlparse(location).path
    return str(Path(location).expanduser().absolute())


def scheme_of(location: str) -> str:
    """'file' for local paths and file: URIs, else the URL's scheme (s3a counted as s3)."""
    if "://" not in location and not location.startswith("file:"):
        return "file"
    scheme = urlparse(location).scheme.lower()
    return "s3" if scheme in ("s3", "s3a") else scheme


def join(base: str, *parts: str) -> str:
    """``base/part/...`` for URLs and local paths alike."""
    text = base.rstrip("/")
    for part in parts:
        text = f"{text}/{part.strip('/')}"
    return text


def progress_bars() -> bool:
    """Progress bars for long transfers: on a terminal, unless made quiet."""
    return progress.shown()


def progress_callback(show: bool, total: int, description: str) -> Callback:
    """A progress bar on a terminal; nothing when output is not a tty or when asked quiet."""
    if not show:
        return NoOpCallback()
    callback = TqdmCallback(tqdm_kwargs={"desc": description, "unit": "file", "leave": False,
                                         "delay": progress.show_after()})
    callback.set_size(total)
    return callback


class FileIO:
    """Read, write, list and move files in one store. Locations passed in are URLs or paths
    of this store; errors for a missing file are FileNotFoundError, as for local files."""

    def __init__(self, fs: fsspec.AbstractFileSystem, capabilities: Capabilities) -> None:
        self.fs = fs
        self.capabilities = capabilities

    def path(self, location: str) -> str:
        """The filesystem path fsspec expects for ``location``."""
        return str(self.fs._strip_protocol(location))

    def read_bytes(self, location: str) -> bytes:
        return bytes(self.fs.cat_file(self.path(location)))

    # --- changes: each public call is fenced (storage/fencing.py), then the store's own ----

    def write_bytes(self, location: str, data: bytes) -> None:
        """Replace the whole file; a reader sees the old or the new content, never a part."""
        check_write(location)
        self._write_bytes(location, data)

    def create_exclusive(self, location: str, data: bytes) -> bool:
        """Create the file with ``data`` unless it exists; False when it already existed
        with other content. Atomic where ``capabilities.conditional_create`` says so.

        A file found with exactly ``data`` counts as created: the create's first attempt
        landed and its answer was lost (a client retrying a conditional put then finds its
        own object), or another writer created the very same bytes; either way the file
        holds what was asked. (Every conditional create of sparkpoint's own writes bytes no
        other writer would: a token, a time, an id.)"""
        check_write(location)
        if self._create_exclusive(location, data):
            return True
        try:
            return self.read_bytes(location) == data
        except FileNotFoundError:
            return False

    def move(self, source: str, target: str) -> bool:
        """Move one file to another location of this store (its parent made as needed);
        False when ``source`` does not exist (moved already, when a cut-off move is done
        again). An existing target is replaced."""
        check_write(source, target)
        return self._move(source, target)

    def copy_within(self, pairs: Sequence[tuple[str, str]]) -> list[str]:
        """Copy files to other locations of this store without their bytes passing through
        this process; return the SHA-256 the store computed of each copy (base64). Only
        where ``capabilities.server_side_copy`` says so."""
        check_write(*(target for _, target in pairs))
        return self._copy_within(pairs)

    def delete(self, location: str) -> None:
        """Remove one file; nothing when it does not exist."""
        check_write(location)
        self._delete(location)

    def delete_tree(self, location: str) -> None:
        check_write(location)
        self._delete_tree(location)

    def remove_empty_dir(self, location: str) -> None:
        """Remove a directory only when it is empty (nothing where directories are only
        key prefixes, as on S3): a file written into it meanwhile stays, with it."""
        check_write(location)
        self._remove_empty_dir(location)

    def put_files(self, pairs: Sequence[tuple[Path, str]], show_progress: bool = False,
                  description: str = "upload") -> None:
        """Upload local files to locations of this store, several at once (each upload
        fenced: a lease lost midway stops the rest)."""
        if not pairs:
            return
        fence = fence_for([location for _, location in pairs])
        fence()
        self._put_files(pairs, show_progress, description, fence)

    # --- the store's own implementations ----------------------------------------------------

    def _write_bytes(self, location: str, data: bytes) -> None:
        self.fs.pipe_file(self.path(location), data)

    def _create_exclusive(self, location: str, data: bytes) -> bool:
        if self.exists(location):
            return False
        self._write_bytes(location, data)
        return True

    def _move(self, source: str, target: str) -> bool:
        if not self.is_file(source):
            return False
        self.makedirs(target.rstrip("/").rsplit("/", 1)[0])
        self.fs.mv(self.path(source), self.path(target))
        return True

    def _copy_within(self, pairs: Sequence[tuple[str, str]]) -> list[str]:
        if not pairs:
            return []
        raise NotImplementedError(f"{type(self).__name__} copies no file inside its store")

    def _delete(self, location: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.fs.rm_file(self.path(location))

    def _delete_tree(self, location: str) -> None:
        if self.exists(location):
            self.fs.rm(self.path(location), recursive=True)

    def _remove_empty_dir(self, location: str) -> None:
        pass  # a key prefix: gone with its last file

    def _put_files(self, pairs: Sequence[tuple[Path, str]], show_progress: bool,
                   description: str, fence: Callable[[], None]) -> None:
        callback = progress_callback(show_progress, len(pairs), description)
        # In rounds, the fence asked before each: an upload of thousands of files stops
        # soon after a lease is lost, not at its end.
        step = TRANSFER_CONCURRENCY * 8
        for start in range(0, len(pairs), step):
            if start:
                fence()
            chunk = pairs[start:start + step]
            self.fs.put([str(local) for local, _ in chunk], [self.path(loc) for _, loc in chunk],
                        callback=callback, batch_size=TRANSFER_CONCURRENCY)

    # --- reading ---------------------------------------------------------------------------

    def exists(self, location: str) -> bool:
        return bool(self.fs.exists(self.path(location)))

    def is_file(self, location: str) -> bool:
        """A file (not a directory) exists at ``location``."""
        return bool(self.fs.isfile(self.path(location)))

    def size(self, location: str) -> int:
        return int(self.fs.size(self.path(location)))

    def stat(self, location: str) -> tuple[int, float | None]:
        """(bytes, the store's own modification time) of one file."""
        info = self.fs.info(self.path(location))
        return int(info.get("size") or 0), listed_modified(info)

    def makedirs(self, location: str) -> None:
        """A directory and its parents (nothing to do on stores without directories)."""
        self.fs.makedirs(self.path(location), exist_ok=True)

    def list_names(self, location: str) -> list[str]:
        """Names directly under a directory (files and directories; on local disk a directory
        emptied by ``delete`` stays listed); [] when absent."""
        try:
            entries = self.fs.ls(self.path(location), detail=False, refresh=True)
        except FileNotFoundError:
            return []
        base = self.path(location).rstrip("/")
        names = []
        for entry in entries:
            name = str(entry).rstrip("/").rsplit("/", 1)[-1]
            if str(entry).rstrip("/") != base and name:
                names.append(name)
        return sorted(set(names))

    def walk_sizes(self, location: str) -> dict[str, int]:
        """Every file under a directory: path relative to it -> bytes; {} when absent."""
        return {rel: size for rel, (size, _) in self.walk_stats(location).items()}

    def walk_stats(self, location: str) -> dict[str, tuple[int, float | None]]:
        """Every file under a directory: path relative to it -> (bytes, the store's own
        modification time in seconds since the epoch, None when it gives none)."""
        return {rel: (found.bytes, found.modified)
                for rel, found in self.walk_objects(location).items()}

    def walk_objects(self, location: str) -> dict[str, StoredFile]:
        """Every file under a directory with what one listing says of it: path relative to
        it -> StoredFile; {} when absent."""
        base = self.path(location).rstrip("/")
        try:
            found = self.fs.find(base, detail=True, withdirs=False)
        except FileNotFoundError:
            return {}
        objects = {}
        for full, info in found.items():
            rel = str(full)[len(base):].lstrip("/")
            # S3A writes empty "<dir>/" objects as directory markers: not files.
            if rel and not rel.endswith("/") and info.get("type") != "directory":
                etag = info.get("ETag")
                objects[rel] = StoredFile(join(location, rel), int(info.get("size") or 0),
                                          listed_modified(info),
                                          str(etag).strip('"') if etag else None)
        return objects

    def stamped_listing(self, location: str) -> StampedListing:
        """The files directly under a directory, each with the store's own modification
        time, and the store's clock at the listing: ages on one clock (the store's), never
        comparing two machines' clocks. Empty when the directory does not exist."""
        files = {rel: found for rel, found in self.walk_objects(location).items()
                 if "/" not in rel}
        return StampedListing(files, self.clock_of(location) if files else None)

    def clock_of(self, location: str) -> float:
        """The clock of the store holding ``location``, now (seconds since the epoch). A
        local store's clock is this machine's."""
        return time.time()

    def stored_sha256(self, location: str) -> str | None:
        """The SHA-256 the store keeps of a file (base64), None when it keeps none."""
        return None

    def get_files(self, pairs: Sequence[tuple[str, Path]], show_progress: bool = False,
                  description: str = "download") -> None:
        """Download files of this store to local paths, several at once."""
        if not pairs:
            return
        for _, local in pairs:
            local.parent.mkdir(parents=True, exist_ok=True)
        callback = progress_callback(show_progress, len(pairs), description)
        self.fs.get([self.path(loc) for loc, _ in pairs], [str(local) for _, local in pairs],
                    callback=callback, batch_size=TRANSFER_CONCURRENCY)


@dataclass(frozen=True)
class StampedListing:
    """A directory's files as one listing gave them, and the store's clock at that moment
    (None when the directory holds no file: no age is asked of it)."""

    files: dict[str, StoredFile]
    now: float | None

    def age(self, name: str) -> float | None:
        """Seconds since the file was written, on the store's clock (truncated to what the
        store records: S3 and its Date header to the second)."""
        found = self.files.get(name)
        if found is None or found.modified is None or self.now is None:
            return None
        return self.now - found.modified


@dataclass(frozen=True)
class StoredFile:
    """A file as a store's listing describes it."""

    url: str
    bytes: int
    modified: float | None
    # S3's ETag (quotes removed): the object's identity there. Written once, an object keeps
    # it; equal ETags and sizes mean equal content (an MD5 of the bytes, or of the parts'
    # MD5s for a multipart upload, or a value unique to the upload for SSE-KMS objects).
    etag: str | None


def listed_modified(info: dict[str, Any]) -> float | None:
    """The modification time in a listing entry: S3's LastModified, WebHDFS's
    modificationTime (milliseconds), a local file's mtime."""
    when = info.get("LastModified")
    if isinstance(when, dt.datetime):
        return when.timestamp()
    if info.get("modificationTime") is not None:
        return int(info["modificationTime"]) / 1000
    mtime = info.get("mtime")
    return float(mtime) if isinstance(mtime, int | float) else None


# What a store client raises when the store does not answer, or keeps refusing, after its own
# retries: s3fs turns S3's 503 SlowDown into EBUSY; a cut connection is botocore's or
# requests' error.
_UNREACHABLE_ERRNOS = {errno.EBUSY, errno.ETIMEDOUT, errno.ECONNRESET, errno.ECONNREFUSED,
                       errno.EHOSTUNREACH, errno.ENETUNREACH, errno.ECONNABORTED}


def store_unreachable(exc: BaseException) -> StoreUnreachableError | None:
    """The typed error for a store that did not answer (None for any other failure)."""
    if isinstance(exc, StoreUnreachableError):
        return exc
    names = {cls.__name__ for cls in type(exc).__mro__}
    transport = names & {"HTTPClientError", "EndpointConnectionError", "ConnectionError",
                         "ConnectTimeoutError", "ReadTimeoutError", "ClientConnectorError"}
    if not transport and not (isinstance(exc, OSError) and exc.errno in _UNREACHABLE_ERRNOS):
        return None
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return StoreUnreachableError(
        f"the store did not answer, or kept refusing, after its client's retries "
        f"({type(exc).__name__}: {first}); nothing more was done: check that the store is "
        "up and reachable from this machine (AWS_ENDPOINT_URL, the NameNode), then run the "
        "command again: every command completes or rolls back what a cut-off one left")


def is_local(location: str) -> bool:
    return scheme_of(location) == "file"


def spark_url(location: str) -> str:
    """The URL Spark's Hadoop filesystems understand for a location (s3 -> s3a)."""
    if scheme_of(location) == "s3" and location.startswith("s3://"):
        return "s3a://" + location[len("s3://"):]
    return location
