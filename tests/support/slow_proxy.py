"""A slow and faulty network in front of a server on loopback: an HTTP proxy for tests that
need a store slower than the job using it, requests that fail, or a process stopped in the
middle of a step.

Put it between sparkpoint and moto's S3 server by pointing ``AWS_ENDPOINT_URL`` at
``proxy.endpoint`` (s3fs and botocore read it, and sparkpoint hands the same endpoint to
Spark's s3a). It runs in threads of the test's process, so the test controls it while
sparkpoint runs in a process of its own.

Every connection is relayed by two threads, one per direction. Each request from the client
waits ``latency`` seconds before it is forwarded, and every chunk in either direction is
paced to ``bytes_per_second``. Requests whose request line matches ``hold`` wait, after
their latency, until ``release()``.

Rules (``proxy.delay``, ``fail``, ``drop``, ``pause``) act on the requests whose method and
target match them; the target is the request's path and query as sent, so ``key`` is a
regular expression searched in e.g. ``/bucket/home/jobs/j/lease.json?versionId=...``. The
first rule that matches a request and has uses left acts on it:

- ``delay(ms)``: the request is forwarded that much later;
- ``fail(status)``: the proxy answers 500 (InternalError) or 503 (SlowDown) itself, as S3
  does, and closes the connection; the store never sees the request (botocore retries
  such answers, so ``times`` must exceed its attempts for a caller to see the failure);
- ``drop()``: the connection is cut without an answer; the store never sees the request;
- ``lose_answer()``: the request reaches the store and is done there, but its answer is
  thrown away and the connection cut: the caller cannot tell whether it happened (a
  retried conditional create then finds its own object);
- ``pause()``: the request is held before it is forwarded until the test calls
  ``rule.release()``; ``rule.reached`` is set when the first one is held, so a test can
  stop a process exactly inside a step (between a check and its write), do something, and
  let it go on.
"""

from __future__ import annotations

import re
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from typing import Literal
from urllib.parse import unquote

_REQUEST_LINE = re.compile(rb"^([A-Z]+) (\S+) HTTP/1\.[01]\r\n")
_CHUNK = 64 * 1024
_MAX_HEAD = 64 * 1024
_REASONS = {500: ("Internal Server Error", "InternalError"), 503: ("Slow Down", "SlowDown")}

Action = Literal["delay", "fail", "drop", "lose_answer", "pause"]


@dataclass(eq=False)
class Rule:
    """What the proxy does to the requests that match ``method`` (None: any) and ``key``."""

    action: Action
    method: str | None
    key: re.Pattern[str]
    times: int | None  # how many matching requests it acts on; None: all of them
    delay_ms: int = 0
    status: int = 503
    matched: list[str] = field(default_factory=list)  # "METHOD target" of each one acted on
    lost: list[int] = field(default_factory=list)  # lose_answer: the statuses thrown away
    reached: threading.Event = field(default_factory=threading.Event)
    _released: threading.Event = field(default_factory=threading.Event)

    def matches(self, method: str, target: str) -> bool:
        return (self.method is None or self.method == method) and \
            self.key.search(target) is not None

    def release(self) -> None:
        """Let the requests this rule holds go on, and those it would hold later."""
        self._released.set()

    def wait_reached(self, timeout: float) -> None:
        """Until a request is held (or acted on); AssertionError after ``timeout``."""
        if not self.reached.wait(timeout):
            raise AssertionError(f"no {self.method or 'request'} matching "
                                 f"{self.key.pattern!r} came through the proxy in {timeout} s")


@dataclass
class _Request:
    method: str
    target: str  # path and query, percent-decoded
    head: bytes
    headers: dict[str, str]

    @property
    def line(self) -> str:
        return f"{self.method} {self.target}"


class _Reader:
    """Buffered reads from the client's socket."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock, self.buffer = sock, b""

    def _fill(self) -> bool:
        chunk = self.sock.recv(_CHUNK)
        self.buffer += chunk
        return bool(chunk)

    def head(self) -> bytes | None:
        """The request line and headers, up to the blank line; None at the end."""
        while b"\r\n\r\n" not in self.buffer:
            if len(self.buffer) > _MAX_HEAD or not self._fill():
                if self.buffer:
                    raise OSError("the client closed inside a request's head")
                return None
        head, _, self.buffer = self.buffer.partition(b"\r\n\r\n")
        return head + b"\r\n\r\n"

    def line(self) -> bytes:
        while b"\r\n" not in self.buffer:
            if not self._fill():
                raise OSError("the client closed inside a chunked body")
        line, _, self.buffer = self.buffer.partition(b"\r\n")
        return line + b"\r\n"

    def exactly(self, size: int) -> Iterator[bytes]:
        while size > 0:
            if not self.buffer and not self._fill():
                raise OSError("the client closed inside a request's body")
            piece, self.buffer = self.buffer[:size], self.buffer[size:]
            size -= len(piece)
            yield piece

    def body(self, headers: dict[str, str]) -> Iterator[bytes]:
        """The request's body as it came (chunked encoding kept)."""
        if "chunked" in headers.get("transfer-encoding", "").lower():
            while True:
                size_line = self.line()
                yield size_line
                size = int(size_line.split(b";")[0].strip(), 16)
                if size == 0:
                    while (trailer := self.line()) != b"\r\n":
                        yield trailer
                    yield b"\r\n"
                    return
                yield from self.exactly(size + 2)  # the data and its CRLF
        else:
            yield from self.exactly(int(headers.get("content-length", "0") or 0))


def _parse(head: bytes) -> _Request | None:
    match = _REQUEST_LINE.match(head)
    if match is None:
        return None
    headers = {}
    for raw in head.split(b"\r\n")[1:]:
        name, sep, value = raw.decode("latin-1").partition(":")
        if sep:
            headers[name.strip().lower()] = value.strip()
    return _Request(match.group(1).decode(), unquote(match.group(2).decode()), head, headers)


def _error_response(status: int, method: str) -> bytes:
    reason, code = _REASONS.get(status, ("Error", "InternalError"))
    body = (f'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>{code}</Code>'
            f"<Message>answered by the test's fault proxy</Message></Error>").encode()
    head = (f"HTTP/1.1 {status} {reason}\r\nContent-Type: application/xml\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode()
    return head if method == "HEAD" else head + body


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
        self.rules: list[Rule] = []
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
        """Let every request held by ``hold`` through, and those that come later."""
        self._released.set()

    # Rules -----------------------------------------------------------------------------

    def _add(self, rule: Rule) -> Rule:
        with self._lock:
            self.rules.append(rule)
        return rule

    def delay(self, method: str | None, key: str, ms: int, times: int | None = None) -> Rule:
        """Forward the matching requests ``ms`` milliseconds late."""
        return self._add(Rule("delay", method, re.compile(key), times, delay_ms=ms))

    def fail(self, method: str | None, key: str, status: int = 503,
             times: int | None = 1) -> Rule:
        """Answer the matching requests with ``status`` (500 or 503) instead of the store."""
        if status not in _REASONS:
            raise ValueError(f"status {status}: expected one of {sorted(_REASONS)}")
        return self._add(Rule("fail", method, re.compile(key), times, status=status))

    def drop(self, method: str | None, key: str, times: int | None = 1) -> Rule:
        """Cut the connection of the matching requests, unanswered."""
        return self._add(Rule("drop", method, re.compile(key), times))

    def lose_answer(self, method: str | None, key: str, times: int | None = 1) -> Rule:
        """Let the matching requests reach the store, then cut the connection unanswered."""
        return self._add(Rule("lose_answer", method, re.compile(key), times))

    def pause(self, method: str | None, key: str, times: int | None = 1) -> Rule:
        """Hold the matching requests until ``rule.release()``."""
        return self._add(Rule("pause", method, re.compile(key), times))

    def remove(self, rule: Rule) -> None:
        """Stop applying ``rule`` (requests it holds are let go)."""
        rule.release()
        with self._lock:
            if rule in self.rules:
                self.rules.remove(rule)

    def _rule_for(self, request: _Request) -> Rule | None:
        with self._lock:
            for rule in self.rules:
                if (rule.times is None or len(rule.matched) < rule.times) and \
                        rule.matches(request.method, request.target):
                    rule.matched.append(request.line)
                    return rule
        return None

    # Relaying --------------------------------------------------------------------------

    def start(self) -> None:
        threading.Thread(target=self._accept, name="slow-proxy", daemon=True).start()

    def close(self) -> None:
        self._closing = True
        self._released.set()
        with self._lock:
            rules, sockets = list(self.rules), list(self._sockets)
        for rule in rules:
            rule.release()
        with suppress(OSError):
            self._listener.close()
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
            threading.Thread(target=self._relay_requests, args=(client, upstream),
                             daemon=True).start()
            threading.Thread(target=self._relay_raw, args=(upstream, client),
                             daemon=True).start()

    def _pace(self, size: int) -> None:
        if self.bytes_per_second > 0:
            time.sleep(size / self.bytes_per_second)

    def _send(self, target: socket.socket, data: bytes) -> None:
        self._pace(len(data))
        target.sendall(data)

    @staticmethod
    def _close(*socks: socket.socket, reset: bool = False) -> None:
        for sock in socks:
            if reset:  # an RST, as a dropped connection gives, not an orderly end
                with suppress(OSError):
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                    b"\x01\x00\x00\x00\x00\x00\x00\x00")
            with suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            with suppress(OSError):
                sock.close()

    def _relay_raw(self, source: socket.socket, target: socket.socket) -> None:
        """The server's answers, as they come."""
        try:
            while chunk := source.recv(_CHUNK):
                self._send(target, chunk)
        except OSError:
            pass
        finally:
            # One side closed: close both so that the other relay thread ends too.
            self._close(source, target)

    def _relay_requests(self, client: socket.socket, upstream: socket.socket) -> None:
        """The client's requests, one at a time, each through the rules."""
        reader = _Reader(client)
        reset = False
        try:
            while (head := reader.head()) is not None:
                request = _parse(head)
                if request is None:  # not HTTP/1.x: relay whatever comes, untouched
                    self._send(upstream, head + reader.buffer)
                    while chunk := client.recv(_CHUNK):
                        self._send(upstream, chunk)
                    return
                rule = self._before_request(request)
                if rule is not None and rule.action == "drop":
                    reset = True
                    return
                if rule is not None and rule.action == "fail":
                    if request.headers.get("expect", "").lower() != "100-continue":
                        for _ in reader.body(request.headers):
                            pass  # read, so that the client sees the answer, not a reset
                    client.sendall(_error_response(rule.status, request.method))
                    return
                if rule is not None and rule.action == "lose_answer":
                    rule.lost.append(self._answer_of_its_own(request, reader))
                    reset = True
                    return
                self._send(upstream, head)
                for piece in reader.body(request.headers):
                    self._send(upstream, piece)
        except (OSError, ValueError):
            pass
        finally:
            self._close(client, upstream, reset=reset)

    def _answer_of_its_own(self, request: _Request, reader: _Reader) -> int:
        """Send the request to the store on a connection of its own, asking it to close after
        answering; read the whole answer; return its status."""
        head = re.sub(rb"(?im)^(connection|expect):[^\r]*\r\n", b"", request.head)
        head = head[:-2] + b"Connection: close\r\n\r\n"
        if request.headers.get("expect", "").lower() == "100-continue":
            reader.sock.sendall(b"HTTP/1.1 100 Continue\r\n\r\n")  # as the store would
        with socket.create_connection(("127.0.0.1", self.upstream_port)) as side:
            side.sendall(head)
            for piece in reader.body(request.headers):
                side.sendall(piece)
            answer = b""
            while chunk := side.recv(_CHUNK):
                answer += chunk
        return int(answer.split(b" ", 2)[1]) if answer.startswith(b"HTTP/") else 0

    def _before_request(self, request: _Request) -> Rule | None:
        with self._lock:
            self.requests.append(request.line)
        time.sleep(self.latency)  # the simulated network, not synchronisation
        if self.hold is not None and self.hold.search(request.line) and \
                not self._released.is_set():
            with self._lock:
                self.held.append(request.line)
            self._released.wait()
        rule = self._rule_for(request)
        if rule is None:
            return None
        if rule.action == "delay":
            time.sleep(rule.delay_ms / 1000)  # the injected fault, not synchronisation
        elif rule.action == "pause":
            rule.reached.set()
            rule._released.wait()
        rule.reached.set()
        return rule


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


@contextmanager
def fault_proxy(upstream_endpoint: str) -> Iterator[SlowProxy]:
    """A proxy that changes nothing until the test adds rules: no latency, no throttle."""
    with slow_proxy(upstream_endpoint, latency=0, bytes_per_second=0) as proxy:
        yield proxy
