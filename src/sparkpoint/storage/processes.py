"""Who a process is, as recorded in sparkpoint's files (a running job, a lease, a snapshot
being written, a collection), and whether such a process is provably gone.

A pid alone names nothing for long: a restarted container's first process gets the pid its
dead predecessor had, and a process in another pid namespace (a container sharing the host's
network, hence its host name) may have any pid. A holder is therefore recorded with what
tells processes apart across restarts and namespaces:

- the host name (``SPARKPOINT_HOST`` overrides it, for machines that share one);
- the kernel's boot id (``/proc/sys/kernel/random/boot_id``): a new one after every reboot;
- the pid namespace (the inode of ``/proc/self/ns/pid``): a new one for every container
  start;
- the pid and the process's start time (field 22 of ``/proc/<pid>/stat``, clock ticks since
  boot): a pid reused by a later process has another start time.

A recorded process is *provably gone* only when this process can see its pid namespace (same
host, boot and namespace) and the pid there is free or belongs to a process started at
another time. Anything else (another machine, another namespace, a record without the
identity) is *unknown* from here: the caller decides by what the store says (a lease's age
on the store's clock, a kernel lock), never by a pid it cannot see.
"""

from __future__ import annotations

import functools
import json
import os
import socket
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from sparkpoint import settings

HOST_ENV = settings.HOST.name
BOOT_ID_FILE = "/proc/sys/kernel/random/boot_id"
PID_NAMESPACE_LINK = "/proc/self/ns/pid"


def this_host() -> str:
    """This machine's name as recorded in locks and leases. SPARKPOINT_HOST overrides it
    where machines share a host name (containers started from one image)."""
    return settings.HOST.get() or socket.gethostname()


def pid_alive(pid: int) -> bool:
    """Some process has this pid in this process's namespace (maybe not the one meant)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # alive, owned by someone else
    return True


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="ascii") as handle:
            return handle.read().strip()
    except (OSError, UnicodeDecodeError):
        return None


@functools.cache
def boot_id() -> str | None:
    """This kernel's boot id (None where /proc does not tell, e.g. not Linux)."""
    return _read(BOOT_ID_FILE)


def pid_namespace() -> str | None:
    """This process's pid namespace, as ``pid:[<inode>]`` (None where /proc does not tell).
    Not cached: a forked child may have entered another (``unshare --pid --fork``)."""
    try:
        return os.readlink(PID_NAMESPACE_LINK)
    except OSError:
        return None


def start_ticks(pid: int) -> int | None:
    """When process ``pid`` started, in clock ticks since boot; None when there is no such
    process here (or /proc does not tell)."""
    text = _read(f"/proc/{pid}/stat")
    if text is None:
        return None
    # The command name (field 2) is in parentheses and may hold spaces or parentheses: the
    # fields after it follow the last ')'.
    fields = text[text.rfind(")") + 2:].split()
    try:
        return int(fields[19])  # field 22 of the whole line
    except (IndexError, ValueError):
        return None


@dataclass(frozen=True)
class ProcessIdentity:
    host: str
    pid: int
    boot_id: str | None = None
    pid_namespace: str | None = None
    start_ticks: int | None = None

    @classmethod
    def current(cls) -> ProcessIdentity:
        pid = os.getpid()
        return cls(this_host(), pid, boot_id(), pid_namespace(), start_ticks(pid))

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> ProcessIdentity | None:
        """The identity a record names (its ``host`` and ``pid`` at least); None when it
        names none. Fields an older version did not write are None."""
        host, pid = record.get("host"), record.get("pid")
        if not isinstance(host, str) or not isinstance(pid, int) or isinstance(pid, bool):
            return None
        boot, namespace, ticks = (record.get("boot_id"), record.get("pid_namespace"),
                                  record.get("start_ticks"))
        return cls(host, pid, boot if isinstance(boot, str) else None,
                   namespace if isinstance(namespace, str) else None,
                   ticks if isinstance(ticks, int) and not isinstance(ticks, bool) else None)

    def to_record(self) -> dict[str, Any]:
        return asdict(self)

    def describe(self) -> str:
        return f"pid {self.pid} on {self.host}"

    def visible_here(self) -> bool:
        """Whether this process can see the recorded one's pid namespace: same host, same
        boot, same namespace (all recorded)."""
        return (self.boot_id is not None and self.pid_namespace is not None
                and self.host == this_host() and self.boot_id == boot_id()
                and self.pid_namespace == pid_namespace())

    def gone(self) -> bool:
        """Provably gone: its namespace is visible here and its pid is free or was reused by
        a process started at another time. False when it cannot be told from here. A record
        of an older version (host and pid only) of this host is judged by its pid, as then."""
        if self.boot_id is None and self.pid_namespace is None and self.host == this_host():
            return not pid_alive(self.pid)
        if not self.visible_here():
            return False
        if self.start_ticks is None:
            return not pid_alive(self.pid)
        return start_ticks(self.pid) != self.start_ticks

    def alive(self) -> bool:
        """Provably alive: visible here, and its pid belongs to the process started then."""
        return self.visible_here() and not self.gone() and pid_alive(self.pid)

    def same_process(self, other: ProcessIdentity) -> bool:
        """The same process as ``other`` as far as both records tell (fields either lacks
        are not compared: a record of an older version names host and pid only)."""
        if (self.host, self.pid) != (other.host, other.pid):
            return False
        pairs = ((self.boot_id, other.boot_id), (self.pid_namespace, other.pid_namespace),
                 (self.start_ticks, other.start_ticks))
        return all(mine == theirs for mine, theirs in pairs
                   if mine is not None and theirs is not None)


# A working directory of one process (a snapshot's staging, a prune's or a rehearsal's
# scratch) names its owner here, so that another process removes it only once its owner is
# provably gone: in a home shared by containers, a pid free in this pid namespace may be a
# live process in another.
OWNER_FILE = ".owner.json"


def claim(directory: Path) -> None:
    """Name this process as ``directory``'s owner (the directory exists)."""
    (directory / OWNER_FILE).write_text(json.dumps(ProcessIdentity.current().to_record()))


def abandoned(directory: Path, pid: int | None) -> bool:
    """Whether ``directory``'s owner is provably gone. A directory without its owner's
    record (an older version's) is judged by the pid in its name, on this host."""
    try:
        owner = ProcessIdentity.from_record(json.loads((directory / OWNER_FILE).read_text()))
    except (OSError, ValueError):
        owner = None
    if owner is None:
        if pid is None:
            return False
        owner = ProcessIdentity(this_host(), pid)
    return owner.gone()
