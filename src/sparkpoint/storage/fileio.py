"""One narrow interface to every store sparkpoint reads and writes, chosen by URL scheme.

A location is a URL (``s3://bucket/key``, ``hdfs://namenode:8020/path``, ``file:///path``) or a
plain local path. Each scheme gets one ``FileIO`` built on fsspec; what a store can do
(atomic rename, hard links, server-side copy, atomic create-if-absent) is recorded in its
``Capabilities`` so that callers choose a strategy once instead of branching on schemes.

sparkpoint's own I/O never starts a JVM: S3 goes through s3fs, HDFS through WebHDFS. Spark
reaches the same locations through its Hadoop filesystems (``s3a://``, ``hdfs://``);
``spark_url`` gives the URL Spark must be handed for a location.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import email.utils
import errno
import os
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import fsspec
from fsspec.callbacks import Callback, NoOpCallback, TqdmCallback

from sparkpoint import progress
from sparkpoint.errors import StoreUnreachableError, UsageError
from sparkpoint.storage.fencing import check_write, fence_for
from sparkpoint.storage.local import write_atomic, write_new

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


def _local_path(location: str) -> str:
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
        return int(info.get("size") or 0), _modified(info)

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
                                          _modified(info),
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


def _modified(info: dict[str, Any]) -> float | None:
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


def _date_header(answer: dict[str, Any]) -> float | None:
    """The HTTP Date of an S3 answer (the server's clock, to the second), if it sent one."""
    text = answer.get("ResponseMetadata", {}).get("HTTPHeaders", {}).get("date")
    if not text:
        return None
    try:
        return email.utils.parsedate_to_datetime(str(text)).timestamp()
    except (TypeError, ValueError):
        return None


def _stored_time(value: Any) -> dt.datetime:
    """A time in an S3 answer, as botocore's own parser gives it (aware, UTC): ISO 8601 in
    listings and XML bodies by Python's parser, anything else (HTTP dates in headers) by
    botocore's."""
    if isinstance(value, str):
        try:
            parsed = dt.datetime.fromisoformat(value)
        except ValueError:
            parsed = None
        if parsed is not None:
            return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=dt.UTC)
    from botocore.utils import parse_timestamp

    result: dt.datetime = parse_timestamp(value)
    return result


class LocalFileIO(FileIO):
    def __init__(self) -> None:
        super().__init__(
            fsspec.filesystem("file"),
            Capabilities(atomic_rename=True, hard_links=True, server_side_copy=False,
                         conditional_create=True),
        )

    def path(self, location: str) -> str:
        return _local_path(location)

    def _write_bytes(self, location: str, data: bytes) -> None:
        write_atomic(Path(self.path(location)), data)

    def _remove_empty_dir(self, location: str) -> None:
        with contextlib.suppress(OSError):  # absent, or not empty
            os.rmdir(self.path(location))

    def _create_exclusive(self, location: str, data: bytes) -> bool:
        return write_new(Path(self.path(location)), data)

    def _put_files(self, pairs: Sequence[tuple[Path, str]], show_progress: bool,
                   description: str, fence: Callable[[], None]) -> None:
        for _, location in pairs:
            Path(self.path(location)).parent.mkdir(parents=True, exist_ok=True)
        super()._put_files(pairs, show_progress, description, fence)


class S3FileIO(FileIO):
    """S3 and S3-compatible stores. Endpoint, credentials and region come from the standard
    AWS environment (AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_REGION),
    the same variables ``spark_s3a_conf`` hands to Spark."""

    def __init__(self) -> None:
        import s3fs
        from aiobotocore.session import AioSession

        # botocore parses every LastModified of a listing with dateutil's general parser:
        # about 0.7 ms each, most of the client's time in a listing of a job's commits (100
        # files by Spark's default retention); S3 gives ISO 8601, which Python parses itself.
        session = AioSession()
        session.get_component("response_parser_factory").set_parser_defaults(
            timestamp_parser=_stored_time)
        client_kwargs: dict[str, Any] = {}
        endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
        if endpoint:
            client_kwargs["endpoint_url"] = endpoint
        region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
        if region:
            client_kwargs["region_name"] = region
        # skip_instance_cache: credentials and endpoint are read from the environment now,
        # not from an instance built for other settings earlier in the process (file_io
        # keeps one S3FileIO per set of AWS variables instead). No listings cache: other
        # processes and homes change the store, so a listing is only good when just made.
        fs = s3fs.S3FileSystem(session=session, client_kwargs=client_kwargs,
                               skip_instance_cache=True, use_listings_cache=False)
        super().__init__(
            fs,
            Capabilities(atomic_rename=False, hard_links=False, server_side_copy=True,
                         conditional_create=True),
        )

    def path(self, location: str) -> str:
        parsed = urlparse(location)
        return f"{parsed.netloc}{parsed.path}".rstrip("/") if parsed.path.strip("/") \
            else parsed.netloc

    def is_file(self, location: str) -> bool:
        # One HEAD: fsspec's exists/isfile follow a missing key with a listing that looks for
        # a directory of that name, a second round trip on every check.
        bucket, key, _ = self.fs.split_path(self.path(location))
        try:
            self.fs.call_s3("head_object", Bucket=bucket, Key=key)
        except FileNotFoundError:
            return False
        return True

    def read_bytes(self, location: str) -> bytes:
        # One GET: fsspec's cat_file asks for the object's details first, and for a missing
        # key also lists a directory of that name (three round trips where one tells).
        bucket, key, _ = self.fs.split_path(self.path(location))
        if not key:
            raise IsADirectoryError(location)

        async def get() -> bytes:
            response = await self.fs._call_s3("get_object", Bucket=bucket, Key=key)
            async with response["Body"] as body:
                return bytes(await body.read())

        from fsspec.asyn import sync

        return bytes(sync(self.fs.loop, get))

    def _copy_within(self, pairs: Sequence[tuple[str, str]]) -> list[str]:
        # CopyObject, TRANSFER_CONCURRENCY at once on s3fs's event loop. S3 computes the
        # copy's SHA-256 from the bytes it copies and returns it (x-amz-checksum-algorithm).
        # One CopyObject takes objects up to 5 GiB, far above any state file Spark writes.
        import asyncio

        from fsspec.asyn import sync

        async def copy_all() -> list[str]:
            gate = asyncio.Semaphore(TRANSFER_CONCURRENCY)

            async def copy(source: str, target: str) -> str:
                src_bucket, src_key, _ = self.fs.split_path(self.path(source))
                bucket, key, _ = self.fs.split_path(self.path(target))
                async with gate:
                    result = await self.fs._call_s3(
                        "copy_object", Bucket=bucket, Key=key, ChecksumAlgorithm="SHA256",
                        CopySource={"Bucket": src_bucket, "Key": src_key})
                return str(result["CopyObjectResult"]["ChecksumSHA256"])

            return list(await asyncio.gather(*(copy(s, t) for s, t in pairs)))

        return sync(self.fs.loop, copy_all) if pairs else []

    def _move(self, source: str, target: str) -> bool:
        # S3 has no rename: a copy inside the store, then the source deleted. Cut off
        # between the two, both exist with the same bytes, and moving again completes it.
        try:
            self._copy_within([(source, target)])
        except FileNotFoundError:
            return False
        self._delete(source)
        return True

    def stamped_listing(self, location: str) -> StampedListing:
        # One LIST per thousand keys: each entry's LastModified and the answer's Date header
        # are both S3's clock.
        bucket, key, _ = self.fs.split_path(self.path(location))
        prefix = f"{key.rstrip('/')}/" if key else ""

        async def listing() -> StampedListing:
            files: dict[str, StoredFile] = {}
            now: float | None = None
            token: str | None = None
            while True:
                ask: dict[str, Any] = {"Bucket": bucket, "Prefix": prefix, "Delimiter": "/"}
                if token:
                    ask["ContinuationToken"] = token
                answer = await self.fs._call_s3("list_objects_v2", **ask)
                now = now if now is not None else _date_header(answer)
                for item in answer.get("Contents", []):
                    name = str(item["Key"])[len(prefix):]
                    if name and "/" not in name:
                        etag = item.get("ETag")
                        files[name] = StoredFile(join(location, name), int(item["Size"]),
                                                 _modified(item),
                                                 str(etag).strip('"') if etag else None)
                if not answer.get("IsTruncated"):
                    break
                token = answer.get("NextContinuationToken")
            if files and now is None:
                now = await self._probe_now(bucket, prefix)
            return StampedListing(files, now if files else None)

        from fsspec.asyn import sync

        result: StampedListing = sync(self.fs.loop, listing)
        return result

    def clock_of(self, location: str) -> float:
        """The store's clock now, from the Date of one request about ``location``'s bucket."""
        bucket, key, _ = self.fs.split_path(self.path(location))

        async def ask() -> float:
            answer = await self.fs._call_s3("head_bucket", Bucket=bucket)
            now = _date_header(answer)
            return now if now is not None else await self._probe_now(bucket, key)

        from fsspec.asyn import sync

        result: float = sync(self.fs.loop, ask)
        return result

    async def _probe_now(self, bucket: str, prefix: str) -> float:
        """The store's clock from an object written now, for a server that sends no Date."""
        probe = f"{prefix}.clock-{uuid.uuid4().hex}"
        await self.fs._call_s3("put_object", Bucket=bucket, Key=probe, Body=b"")
        try:
            head = await self.fs._call_s3("head_object", Bucket=bucket, Key=probe)
            return _stored_time(head["LastModified"]).timestamp()
        finally:
            await self.fs._call_s3("delete_object", Bucket=bucket, Key=probe)

    def stored_sha256(self, location: str) -> str | None:
        bucket, key, _ = self.fs.split_path(self.path(location))
        head = self.fs.call_s3("head_object", Bucket=bucket, Key=key, ChecksumMode="ENABLED")
        value = head.get("ChecksumSHA256")
        return str(value) if value and head.get("ChecksumType", "FULL_OBJECT") == "FULL_OBJECT" \
            else None

    def _create_exclusive(self, location: str, data: bytes) -> bool:
        # S3's conditional put (If-None-Match: *): the second of two creators gets 412.
        try:
            self.fs.pipe_file(self.path(location), data, mode="create")
        except FileExistsError:
            return False
        return True


def _webhdfs(location: str) -> FileIO:
    # Imported here: storage.webhdfs builds on this module.
    from sparkpoint.storage.webhdfs import WebHdfsFileIO

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


def is_local(location: str) -> bool:
    return scheme_of(location) == "file"


def spark_url(location: str) -> str:
    """The URL Spark's Hadoop filesystems understand for a location (s3 -> s3a)."""
    if scheme_of(location) == "s3" and location.startswith("s3://"):
        return "s3a://" + location[len("s3://"):]
    return location
