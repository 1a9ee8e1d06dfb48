"""HDFS without a JVM: the NameNode's WebHDFS REST interface, through fsspec's ``webhdfs``
filesystem and a few REST calls of our own where fsspec's would lose atomicity.

An ``hdfs://host:port/path`` URL names the NameNode's RPC port, which is what Spark's Hadoop
client is handed; WebHDFS answers on the NameNode's HTTP port instead. ``webhdfs_address``
finds it: ``$SPARKPOINT_WEBHDFS_URL`` when set, else ``dfs.namenode.http-address`` in
``$HADOOP_CONF_DIR/hdfs-site.xml``, else Hadoop 3's default port 9870 on the URL's host.
``webhdfs://host:port/path`` URLs name the HTTP port themselves.
"""

from __future__ import annotations

import contextlib
import email.utils
import getpass
import os
import time
import uuid
import weakref
import xml.etree.ElementTree as ET
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any
from urllib.parse import quote, urlparse

import fsspec
import requests
from requests.adapters import HTTPAdapter

from sparkpoint import settings
from sparkpoint.errors import StoreUnreachableError, UsageError
from sparkpoint.storage.fileio import (
    TRANSFER_CONCURRENCY,
    Capabilities,
    FileIO,
    StampedListing,
    StoredFile,
    join,
    progress_callback,
)

WEBHDFS_URL_ENV = settings.WEBHDFS_URL.name
# Hadoop 3's dfs.namenode.http-address port (Hadoop 2 used 50070).
DEFAULT_HTTP_PORT = 9870
_WILDCARD_HOSTS = ("0.0.0.0", "::", "[::]", "")
_CHUNK = 1 << 20


@dataclass(frozen=True)
class WebHdfsAddress:
    https: bool
    host: str
    port: int
    user: str
    # Where the address came from, for messages when it does not answer.
    found_by: str = field(default="", compare=False)

    @property
    def url(self) -> str:
        return f"{'https' if self.https else 'http'}://{self.host}:{self.port}"


def _hadoop_setting(conf_dir: str, file_name: str, key: str) -> str | None:
    """One property of a Hadoop XML configuration file; None when absent or unreadable."""
    path = Path(conf_dir) / file_name
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError):
        return None
    for prop in root.iter("property"):
        if (prop.findtext("name") or "").strip() == key:
            return (prop.findtext("value") or "").strip()
    return None


def _split_host_port(text: str, what: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    if not host or not port.isdigit():
        raise UsageError(
            f"{what}: expected host:port, found '{text}'; fix it or set {WEBHDFS_URL_ENV} "
            "to the NameNode's http://host:port"
        )
    return host, int(port)


def webhdfs_address(location: str, environ: Mapping[str, str] | None = None) -> WebHdfsAddress:
    """Where WebHDFS answers for an ``hdfs://``, ``webhdfs://`` or ``swebhdfs://`` location,
    and the user to act as (``$HADOOP_USER_NAME``, else the login name, as Hadoop does)."""
    env = os.environ if environ is None else environ
    user = env.get("HADOOP_USER_NAME") or getpass.getuser()
    parsed = urlparse(location)
    scheme = parsed.scheme.lower()
    if scheme in ("webhdfs", "swebhdfs"):
        if not parsed.hostname:
            raise UsageError(f"{location}: expected {scheme}://namenode:http-port/path, "
                             "found no host; name the NameNode")
        return WebHdfsAddress(scheme == "swebhdfs", parsed.hostname,
                              parsed.port or DEFAULT_HTTP_PORT, user, f"the {scheme}:// URL")

    explicit = settings.WEBHDFS_URL.get(env)
    if explicit:
        given = urlparse(explicit)  # settings refused one without a scheme and a host
        return WebHdfsAddress(given.scheme == "https", given.hostname or "",
                              given.port or DEFAULT_HTTP_PORT, user, WEBHDFS_URL_ENV)

    conf_dir = env.get("HADOOP_CONF_DIR")
    host = parsed.hostname
    if not host and conf_dir:
        # hdfs:///path means "the default filesystem", as for Hadoop's own clients.
        default_fs = _hadoop_setting(conf_dir, "core-site.xml", "fs.defaultFS")
        host = urlparse(default_fs).hostname if default_fs else None
    if not host:
        raise UsageError(
            f"{location}: expected hdfs://namenode:port/path, found no NameNode host "
            "(and no fs.defaultFS in $HADOOP_CONF_DIR/core-site.xml); name the NameNode"
        )
    port, found_by = DEFAULT_HTTP_PORT, f"Hadoop's default WebHDFS port {DEFAULT_HTTP_PORT}"
    configured = _hadoop_setting(conf_dir, "hdfs-site.xml", "dfs.namenode.http-address") \
        if conf_dir else None
    if configured:
        # The port only: the host is the URL's, so a configuration for another cluster
        # cannot send this location's I/O elsewhere (and a wildcard bind host means nothing).
        found_by = f"dfs.namenode.http-address in {conf_dir}/hdfs-site.xml"
        _, port = _split_host_port(configured, found_by)
    return WebHdfsAddress(False, host, port, user, found_by)


# Seconds to wait for a connection, and for the next bytes of an answer.
CONNECT_TIMEOUT, READ_TIMEOUT = 10, 120
# Reads (GET) are tried this often when the connection breaks: a kept-alive connection the
# server has just closed, or an answer cut off mid-body, is a moment's fault, and a read can
# be repeated without effect. Writes are never repeated: a CREATE or RENAME that may have
# taken effect must not run twice.
READ_ATTEMPTS = 3
RETRY_PAUSE_S = 0.2


class _WebHdfsAdapter(HTTPAdapter):
    """Every request of one WebHDFS session (fsspec's and ours): a pool wide enough for
    parallel transfers, timeouts instead of waiting forever, and a server that does not
    answer reported as one clear error rather than a connection traceback."""

    def __init__(self, address: WebHdfsAddress) -> None:
        super().__init__(pool_connections=4, pool_maxsize=TRANSFER_CONCURRENCY)
        self.address = address

    def send(
        self, request: requests.PreparedRequest, stream: bool = False,
        timeout: float | tuple[float, float] | tuple[float, None] | None = None,
        verify: bool | str = True,
        cert: bytes | str | tuple[bytes | str, bytes | str] | None = None,
        proxies: Mapping[str, str] | None = None,
    ) -> requests.Response:
        repeatable = request.method in ("GET", "HEAD") and not stream
        attempts = READ_ATTEMPTS if repeatable else 1
        for attempt in range(1, attempts + 1):
            try:
                response = super().send(request, stream=stream,
                                        timeout=timeout or (CONNECT_TIMEOUT, READ_TIMEOUT),
                                        verify=verify, cert=cert, proxies=proxies)
                if not stream:
                    # Read the body here, so an answer cut off mid-body is repeated (a read)
                    # or reported as one clear error (a write); requests would otherwise read
                    # it later, past both.
                    response.content  # noqa: B018
                return response
            except requests.Timeout as error:
                # Not repeated: a server that let the time run out would only do it again.
                raise self._unreachable(request, error) from error
            except (requests.ConnectionError, requests.exceptions.ChunkedEncodingError) as error:
                if attempt == attempts:
                    raise self._unreachable(request, error) from error
                time.sleep(RETRY_PAUSE_S * attempt)
        raise AssertionError("unreachable: the last attempt returns or raises")

    def _unreachable(self, request: requests.PreparedRequest,
                     error: Exception) -> StoreUnreachableError:
        address = self.address
        server = urlparse(request.url or "")
        reason = type(error).__name__
        if (server.hostname, server.port) == (address.host, address.port):
            return StoreUnreachableError(
                f"WebHDFS at {address.url} (from {address.found_by}) does not answer "
                f"({reason}); expected the NameNode's HTTP address with WebHDFS enabled; "
                f"check that the NameNode is up, or set {WEBHDFS_URL_ENV} to its http://host:port"
            )
        return StoreUnreachableError(
            f"the DataNode {server.hostname}:{server.port} that the NameNode at {address.url} "
            f"sent the data to does not answer ({reason}); expected it reachable from this "
            "machine under the name the NameNode gives; check the DataNode and its address"
        )


# Sessions that already carry our adapter.
_adapted: weakref.WeakSet[requests.Session] = weakref.WeakSet()


class WebHdfsFileIO(FileIO):
    """HDFS through WebHDFS. Whole-file writes and exclusive creates go to a temporary file
    beside the target and are renamed onto it: HDFS renames are atomic, and a rename that
    must not overwrite is refused when the target exists, so readers never see part of a
    file and only one of two creators wins."""

    def __init__(self, location: str) -> None:
        address = webhdfs_address(location)
        fs = fsspec.filesystem("webhdfs", host=address.host, port=address.port,
                               user=address.user, use_https=address.https)
        super().__init__(
            fs,
            Capabilities(atomic_rename=True, hard_links=False, server_side_copy=False,
                         conditional_create=True),
        )
        self.address = address
        session: requests.Session = fs.session
        if session not in _adapted:
            adapter = _WebHdfsAdapter(address)
            session.mount("http://", adapter)
            session.mount("https://", adapter)
            _adapted.add(session)

    def path(self, location: str) -> str:
        path = urlparse(location).path if "://" in location else location
        return path.rstrip("/") or "/"

    # --- REST calls fsspec's WebHDFS does not make the way we need --------------------------

    def _request(self, method: str, op: str, path: str, *, follow: bool = True,
                 stream: bool = False, **params: str) -> requests.Response:
        url = self.fs._apply_proxy(self.fs.url + quote(path, safe="/"))
        response: requests.Response = self.fs.session.request(
            method, url, params={**params, **self.fs.pars, "op": op},
            allow_redirects=follow, stream=stream,
        )
        _raise_for_remote_error(response, op, path)
        return response

    def _upload(self, path: str, data: bytes | IO[bytes], overwrite: bool) -> None:
        """CREATE in WebHDFS's two steps: the NameNode names a DataNode, the bytes go there."""
        named = self._request("PUT", "CREATE", path, follow=False,
                              overwrite="true" if overwrite else "false")
        target = named.headers.get("Location")
        if not target:
            raise OSError(f"WebHDFS CREATE {path}: the NameNode named no DataNode "
                          f"(HTTP {named.status_code})")
        stored = self.fs.session.put(self.fs._apply_proxy(target), data=data,
                                     headers={"content-type": "application/octet-stream"})
        _raise_for_remote_error(stored, "CREATE", path)

    def _rename(self, source: str, target: str, overwrite: bool) -> None:
        """HDFS rename2: atomic; FileExistsError when the target exists and overwrite is off
        (the older rename would move the source into a directory target or return false)."""
        self._request("PUT", "RENAME", source, destination=target,
                      renameoptions="OVERWRITE" if overwrite else "NONE")

    def _publish(self, location: str, write: Callable[[str], None], overwrite: bool) -> None:
        target = self.path(location)
        parent, _, name = target.rpartition("/")
        tmp = f"{parent}/.{name}.{uuid.uuid4().hex}.tmp"
        try:
            write(tmp)
            self._rename(tmp, target, overwrite)
        except BaseException:
            # The original error matters more than a temporary file left behind.
            with contextlib.suppress(Exception):
                self._request("DELETE", "DELETE", tmp, recursive="false")
            raise

    # --- FileIO ------------------------------------------------------------------------------

    def read_bytes(self, location: str) -> bytes:
        return self._request("GET", "OPEN", self.path(location)).content

    def _write_bytes(self, location: str, data: bytes) -> None:
        self._publish(location, lambda tmp: self._upload(tmp, data, overwrite=False),
                      overwrite=True)

    def _create_exclusive(self, location: str, data: bytes) -> bool:
        try:
            self._publish(location, lambda tmp: self._upload(tmp, data, overwrite=False),
                          overwrite=False)
        except FileExistsError:
            return False
        return True

    def _remove_empty_dir(self, location: str) -> None:
        # A non-recursive DELETE: HDFS refuses it for a directory that is not empty.
        with contextlib.suppress(FileNotFoundError, OSError):
            self._request("DELETE", "DELETE", self.path(location), recursive="false")

    def _move(self, source: str, target: str) -> bool:
        # HDFS rename2 is atomic; its target's parent must exist.
        if not self.exists(source):
            return False
        self.makedirs(target.rstrip("/").rsplit("/", 1)[0])
        self._rename(self.path(source), self.path(target), overwrite=True)
        return True

    def stamped_listing(self, location: str) -> StampedListing:
        # One LISTSTATUS: the NameNode's modification times (milliseconds) and the answer's
        # Date (its clock, to the second).
        try:
            answer = self._request("GET", "LISTSTATUS", self.path(location))
        except FileNotFoundError:
            return StampedListing({}, None)
        files = {}
        for status in answer.json().get("FileStatuses", {}).get("FileStatus", []):
            name = str(status.get("pathSuffix", ""))
            if name and status.get("type") == "FILE":
                files[name] = StoredFile(join(location, name), int(status.get("length", 0)),
                                         int(status["modificationTime"]) / 1000, None)
        now = _date(answer) if files else None
        if files and now is None:
            now = self.clock_of(location)
        return StampedListing(files, now)

    def clock_of(self, location: str) -> float:
        # The NameNode's clock: the Date of an answer, else the time it gives a file made now.
        answer = self._request("GET", "GETFILESTATUS", "/")
        now = _date(answer)
        if now is not None:
            return now
        parent = self.path(location).rstrip("/") or "/"
        probe = f"{parent}/.clock-{uuid.uuid4().hex}"
        self._upload(probe, b"", overwrite=False)
        try:
            status = self._request("GET", "GETFILESTATUS", probe).json()["FileStatus"]
            return int(status["modificationTime"]) / 1000
        finally:
            self._request("DELETE", "DELETE", probe, recursive="false")

    def exists(self, location: str) -> bool:
        # Not fsspec's exists, which answers False for any error, an unreachable NameNode too.
        try:
            self._request("GET", "GETFILESTATUS", self.path(location))
        except FileNotFoundError:
            return False
        return True

    def _put_files(self, pairs: Sequence[tuple[Path, str]], show_progress: bool,
                   description: str, fence: Callable[[], None]) -> None:
        """Each file is uploaded beside its target and renamed onto it, so a file under its
        final name is always complete (a content-addressed store may trust its presence)."""

        def upload(pair: tuple[Path, str]) -> None:
            local, location = pair
            fence()
            with open(local, "rb") as handle:
                # An empty file object would be sent chunked; an empty body is plainer.
                body: bytes | IO[bytes] = handle if local.stat().st_size else b""
                self._publish(location, lambda tmp: self._upload(tmp, body, overwrite=False),
                              overwrite=True)

        self._in_parallel(upload, pairs, show_progress, description)

    def get_files(self, pairs: Sequence[tuple[str, Path]], show_progress: bool = False,
                  description: str = "download") -> None:
        def download(pair: tuple[str, Path]) -> None:
            location, local = pair
            local.parent.mkdir(parents=True, exist_ok=True)
            with self._request("GET", "OPEN", self.path(location), stream=True) as response, \
                    open(local, "wb") as handle:
                for chunk in response.iter_content(_CHUNK):
                    handle.write(chunk)

        self._in_parallel(download, pairs, show_progress, description)

    def _in_parallel(self, task: Callable[[Any], None], items: Sequence[Any],
                     show_progress: bool, description: str) -> None:
        if not items:
            return
        callback = progress_callback(show_progress, len(items), description)
        with ThreadPoolExecutor(max_workers=min(TRANSFER_CONCURRENCY, len(items))) as pool:
            for _ in pool.map(task, items):
                callback.relative_update(1)
        callback.close()


def _date(response: requests.Response) -> float | None:
    text = response.headers.get("Date")
    if not text:
        return None
    try:
        return email.utils.parsedate_to_datetime(text).timestamp()
    except (TypeError, ValueError):
        return None


def _raise_for_remote_error(response: requests.Response, op: str, path: str) -> None:
    """WebHDFS's RemoteException as the matching Python error (fsspec's own mapping turns
    FileAlreadyExistsException into a RuntimeError)."""
    if response.status_code < 400:
        return
    try:
        remote = response.json()["RemoteException"]
        exception, message = str(remote["exception"]), str(remote["message"])
    except (ValueError, KeyError, TypeError):
        response.raise_for_status()
        return
    if exception == "FileNotFoundException":
        raise FileNotFoundError(message)
    if exception == "FileAlreadyExistsException":
        raise FileExistsError(message)
    if exception in ("AccessControlException", "SecurityException"):
        raise PermissionError(message)
    raise OSError(f"WebHDFS {op} {path}: {exception}: {message}")
