"""Whether a process recorded in sparkpoint's files (a running job, a snapshot being
written) is still alive: on this machine by its pid, on another by the record's age."""

from __future__ import annotations

import datetime as dt
import os
import socket
from collections.abc import Mapping
from typing import Any

# A holder on another machine cannot be asked whether it lives; its record counts as live
# for this long after it was written (locks in a remote home, leases in a snapshot store).
OTHER_HOST_EXPIRY = dt.timedelta(hours=12)


def this_host() -> str:
    """This machine's name as recorded in locks and leases. SPARKPOINT_HOST overrides it
    where machines share a host name (containers started from one image)."""
    return os.environ.get("SPARKPOINT_HOST") or socket.gethostname()


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # alive, owned by someone else
    return True


def holder_record() -> dict[str, Any]:
    """Who holds something, as written into a lock or lease: this host, pid and time."""
    return {"host": this_host(), "pid": os.getpid(),
            "started_at": dt.datetime.now(dt.UTC).isoformat()}


def live_holder(record: Mapping[str, Any], expiry: dt.timedelta = OTHER_HOST_EXPIRY) -> int | None:
    """The pid of the live process a holder record names: its pid when alive on this host,
    -1 when on another host (pid unknown there) and younger than ``expiry``, else None."""
    try:
        started = dt.datetime.fromisoformat(str(record["started_at"]))
    except (KeyError, ValueError):
        return None
    if dt.datetime.now(dt.UTC) - started > expiry:
        return None
    pid = record.get("pid")
    if record.get("host") == this_host():
        return pid if isinstance(pid, int) and pid_alive(pid) else None
    return pid if isinstance(pid, int) else -1
