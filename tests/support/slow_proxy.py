"""A slow network in front of a server on loopback: a TCP proxy that delays every HTTP request
and throttles the bytes it forwards, for tests that need a store slower than the job using it.

Every connection is relayed by two threads, one per direction. A chunk from the client that
starts an HTTP request (``PUT /key HTTP/1.1``...) waits ``latency`` seconds before it is
forwarded, and every chunk in either direction is paced to ``bytes_per_second``. Requests whose
request line matches ``hold`` wait, after their latency, until ``release()``: a test can keep
an upload in flight until the condition it races against has been observed, instead of
hoping that a delay was long enough.
"""

from __future__ import annotations

import re
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress

_REQUEST_LINE = re.compile(rb"^(GET|PUT|POST|HEAD|DELETE) (\S+) HTTP/1\.[01]\r\n")
_CHUNK = 64 * 1024


class SlowProxy:
    def __init__(self, upstream_port: int, latency: float, bytes_per_second: float,
                 hold: re.Pattern[str] | None = None) -> None:
        self.upstream_port = upstream_port
        self.latency = latency
        self.bytes_per_second = bytes_per_second
        self.hold = hold
        self._released = threading.Event()
        self._lock = threading.Lock()
        self.requests: list[str] = []
        self.held: list[str] = []
        self._listener = socket.socket()
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(64)
        self.port = int(self._listener.getsockname()[1])
        self._closing = False
        self._sockets: list[socket.socket] = []

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def held_count(self) -> int:
        with self._lock:
            return len(self.held)

    def release(self) -> None:
        """Let every held request through, and those that come later."""
        self._released.set()

    def start(self) -> None:
        threading.Thread(target=self._accept, name="slow-proxy", daemon=True).start()

    def close(self) -> None:
        self._closing = True
        self._released.set()
        with suppress(OSError):
            self._listener.close()
        with self._lock:
            sockets = list(self._sockets)
        for sock in sockets:
            with suppress(OSError):
                sock.close()

    def _accept(self) -> None:
        while not self._closing:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(("127.0.0.1", self.upstream_port))
            except OSError:
                client.close()
                continue
            with self._lock:
                self._sockets += [client, upstream]
            threading.Thread(target=self._relay, args=(client, upstream, True),
                             daemon=True).start()
            threading.Thread(target=self._relay, args=(upstream, client, False),
                             daemon=True).start()

    def _pace(self, size: int) -> None:
        if self.bytes_per_second > 0:
            time.sleep(size / self.bytes_per_second)

    def _relay(self, source: socket.socket, target: socket.socket, from_client: bool) -> None:
        try:
            while chunk := source.recv(_CHUNK):
                if from_client:
                    self._before_request(chunk)
                self._pace(len(chunk))
                target.sendall(chunk)
        except OSError:
            pass
        finally:
            # One side closed: close both so that the other relay thread ends too.
            for sock in (source, target):
                with suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
                with suppress(OSError):
                    sock.close()

    def _before_request(self, chunk: bytes) -> None:
        match = _REQUEST_LINE.match(chunk)
        if match is None:
            return  # the body of a request whose first chunk went through already
        line = f"{match.group(1).decode()} {match.group(2).decode()}"
        with self._lock:
            self.requests.append(line)
        time.sleep(self.latency)  # the simulated network, not synchronisation
        if self.hold is not None and self.hold.search(line) and not self._released.is_set():
            with self._lock:
                self.held.append(line)
            self._released.wait()


@contextmanager
def slow_proxy(upstream_endpoint: str, latency: float = 0.1, bytes_per_second: float = 2e6,
               hold: str | None = None) -> Iterator[SlowProxy]:
    """A started proxy in front of ``http://127.0.0.1:<port>``, closed on exit."""
    port = int(upstream_endpoint.rsplit(":", 1)[1].rstrip("/"))
    proxy = SlowProxy(port, latency, bytes_per_second, re.compile(hold) if hold else None)
    proxy.start()
    try:
        yield proxy
    finally:
        proxy.close()
