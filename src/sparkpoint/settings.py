"""Every ``SPARKPOINT_*`` environment variable sparkpoint reads, declared once.

Each :class:`Setting` names its variable, the kind of value it takes, its default, one line
for the documentation (``docs/`` builds the reference from :data:`SETTINGS`), and how a bad
value is refused: one ``UsageError`` line naming the variable, what was expected, what was
found and what to do.

A setting is read from the environment each time it is asked for, never frozen at import:
tests and callers of the Python API change the environment between calls in one process.
Unset and empty mean the default.

This module sits below everything else (storage and crash points read it), so it imports
nothing of sparkpoint but ``errors``.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar
from urllib.parse import urlparse

from sparkpoint.errors import UsageError

T = TypeVar("T")


class BadValue(ValueError):
    """A parser's refusal of a value; the setting turns it into its one UsageError line."""


@dataclass(frozen=True)
class Setting(Generic[T]):
    """One environment variable: how to read it, and how it is documented."""

    name: str
    # The kind of value, as the reference shows it ("seconds", "path or URL", ...).
    kind: str
    # The default as the reference shows it; ``default`` is what ``get`` returns when unset.
    shown_default: str
    description: str
    # What a good value looks like and what to do about a bad one (the refusal's words).
    expected: str
    remedy: str
    parse: Callable[[str], T]
    default: T
    # How a bad value is refused where another check than ``parse`` decides (the reference).
    refused_by: str = ""

    def raw(self, environ: Mapping[str, str] | None = None) -> str | None:
        """The variable's text, or None when unset or empty."""
        text = (os.environ if environ is None else environ).get(self.name)
        return text if text else None

    def get(self, environ: Mapping[str, str] | None = None) -> T:
        """The current value (``environ`` defaults to the process's environment)."""
        text = self.raw(environ)
        if text is None:
            return self.default
        try:
            return self.parse(text)
        except BadValue:
            raise UsageError(self.refusal(text)) from None

    def refusal(self, text: str) -> str:
        return f"{self.name}={text!r}: expected {self.expected}, found {text!r}; {self.remedy}"

    @property
    def refused(self) -> str:
        """How a bad value is refused, for the reference."""
        if self.refused_by:
            return self.refused_by
        if self.expected == _ANYTHING:
            return "never: any value is taken as given"
        return f"exit 2, `[USAGE]`: expected {self.expected}; {self.remedy}"


# Variables whose every value is meaningful say so in the reference.
_ANYTHING = "any text"


def _text(text: str) -> str:
    return text


def _local_path(text: str) -> str:
    if "://" in text and not text.startswith("file:"):
        raise BadValue(text)  # this machine's space: never a store
    return text


def _positive_seconds(text: str) -> float:
    if not text.strip():
        return DEFAULT_LEASE_SECONDS  # only spaces: unset, as an empty value is
    try:
        value = float(text)
    except ValueError:
        raise BadValue(text) from None
    if not 0 < value < math.inf:  # NaN fails the comparison too
        raise BadValue(text)
    return value


def _seconds_or_less(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise BadValue(text) from None
    if math.isnan(value):
        raise BadValue(text)
    return max(0.0, value)  # zero or less: at once


def _one_or_zero(text: str) -> bool:
    if text not in ("0", "1"):
        raise BadValue(text)
    return text == "1"


_HOST = re.compile(r"^[^\s\x00-\x1f\x7f]+$")


def _host_name(text: str) -> str:
    if not _HOST.fullmatch(text):
        raise BadValue(text)
    return text


def _http_url(text: str) -> str:
    parsed = urlparse(text)
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        raise BadValue(text)
    return text


_POINT = re.compile(r"^[a-z_]+\.[a-z_]+$")


def _point_name(text: str) -> str:
    if not _POINT.fullmatch(text):
        raise BadValue(text)
    return text


# Homes and snapshot stores are checked as locations (storage/paths.py), wherever named.
_LOCATION_REFUSED = ("exit 2, `[INVALID_LOCATION]`: a path holding `#`, `?`, a `%` escape or "
                     "a `.`/`..` URL segment, or an unknown URL scheme")

DEFAULT_HOME = ".sparkpoint"
DEFAULT_SCRATCH = "~/.cache/sparkpoint"
DEFAULT_LEASE_SECONDS = 60.0
DEFAULT_PROGRESS_AFTER_SECONDS = 1.0

HOME: Setting[str] = Setting(
    "SPARKPOINT_HOME", "path or URL", f"`./{DEFAULT_HOME}`",
    "The home (jobs, their checkpoints and, by default, snapshots) when `--home` is not "
    "given: a directory, `s3://bucket/prefix` or `hdfs://namenode:port/path`.",
    _ANYTHING, "", _text, DEFAULT_HOME, refused_by=_LOCATION_REFUSED)
SNAPSHOTS: Setting[str | None] = Setting(
    "SPARKPOINT_SNAPSHOTS", "path or URL", "`<home>/snapshots`",
    "Where snapshots live when `--snapshots` is not given: a directory, `s3://bucket/prefix` "
    "or `hdfs://namenode:port/path`.",
    _ANYTHING, "", _text, None, refused_by=_LOCATION_REFUSED)
SCRATCH: Setting[str] = Setting(
    "SPARKPOINT_SCRATCH", "path", f"`{DEFAULT_SCRATCH}`",
    "This machine's local space for homes on S3 or HDFS: the cache of immutable state files "
    "(`files/`), and the scratch copies of prune and rehearse.",
    "a local directory (a path or a file: URI)", "fix or unset it", _local_path,
    DEFAULT_SCRATCH)
HOST: Setting[str | None] = Setting(
    "SPARKPOINT_HOST", "host name", "the machine's host name",
    "The host name recorded for this process in locks and leases, for machines (containers "
    "started from one image) that share one.",
    "a host name without spaces or control characters", "fix or unset it", _host_name, None)
LEASE_SECONDS: Setting[float] = Setting(
    "SPARKPOINT_LEASE_SECONDS", "seconds", "`60`",
    "Length of a job's lease in a home on S3 or HDFS; the holder renews it every third of "
    "it, and a collection of snapshot files deletes only within it of announcing.",
    "a positive number of seconds", "set it to e.g. 60 or unset it", _positive_seconds,
    DEFAULT_LEASE_SECONDS)
LEASE_LOG: Setting[str | None] = Setting(
    "SPARKPOINT_LEASE_LOG", "path", "none",
    "A file to which this process appends one JSON line for each lease it takes and lets go "
    "(job, generation, token, host, pid, wall and monotonic times): an audit of who held a "
    "job when.",
    _ANYTHING, "", _text, None)
WEBHDFS_URL: Setting[str | None] = Setting(
    "SPARKPOINT_WEBHDFS_URL", "URL", "found from `$HADOOP_CONF_DIR`, else port 9870",
    "The NameNode's WebHDFS (HTTP) address for `hdfs://` locations, e.g. "
    "`http://namenode:9870`; needed for an HA nameservice, where it names the active "
    "NameNode.",
    "the NameNode's HTTP address such as http://namenode:9870", "fix or unset it", _http_url,
    None)
PROGRESS_AFTER: Setting[float] = Setting(
    "SPARKPOINT_PROGRESS_AFTER", "seconds", "`1`",
    "How long a piece of work lasts before its progress bar is drawn (on a terminal, never "
    "under `--json`); 0 or less draws at once.",
    "a number of seconds", "set it to e.g. 1 or unset it", _seconds_or_less,
    DEFAULT_PROGRESS_AFTER_SECONDS)
ALLOW_UNTESTED_PYSPARK: Setting[bool] = Setting(
    "SPARKPOINT_ALLOW_UNTESTED_PYSPARK", "`1` or `0`", "`0`",
    "`1` lets `run`, `plan`, `resume-point build` and `drain` go on, with a warning, under a "
    "pyspark version sparkpoint is not tested with (state may be misread).",
    "1 (go on under an untested pyspark) or 0", "set it to 1 or unset it", _one_or_zero, False)
TRACEBACK: Setting[bool] = Setting(
    "SPARKPOINT_TRACEBACK", "flag", "off",
    "Any value prints the traceback of an unexpected error (exit 1) on stderr, for a bug "
    "report.",
    _ANYTHING, "", lambda _text: True, False)
CRASH_AT: Setting[str | None] = Setting(
    "SPARKPOINT_CRASH_AT", "crash point", "none",
    "Ends the process at once at this named step (exit 137, no cleanup, as `kill -9` "
    "would), for fault-injection tests; `sparkpoint debug crash-points` lists the names.",
    "a crash point name such as restore.published (sparkpoint debug crash-points lists them)",
    "fix or unset it", _point_name, None)
FREEZE_AT: Setting[str | None] = Setting(
    "SPARKPOINT_FREEZE_AT", "crash point", "none",
    "Stops the process at this named step (it sends itself SIGSTOP, as a long pause of its "
    "machine would) until it gets SIGCONT, to interleave two processes' steps in tests.",
    "a crash point name such as lease.renewing (sparkpoint debug crash-points lists them)",
    "fix or unset it", _point_name, None)

# Every variable, in the order the reference lists them.
SETTINGS: tuple[Setting[Any], ...] = (
    HOME, SNAPSHOTS, SCRATCH, HOST, LEASE_SECONDS, LEASE_LOG, WEBHDFS_URL, PROGRESS_AFTER,
    ALLOW_UNTESTED_PYSPARK, TRACEBACK, CRASH_AT, FREEZE_AT,
)


def check_environment(environ: Mapping[str, str] | None = None) -> None:
    """Refuse a bad value of any variable at once, before a command does anything (each is
    also checked where it is read, for callers of the Python API)."""
    for setting in SETTINGS:
        setting.get(environ)
