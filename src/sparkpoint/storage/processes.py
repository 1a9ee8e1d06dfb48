"""Whether a process recorded in sparkpoint's files (a running job, a snapshot being
written) is still alive on this machine."""

from __future__ import annotations

import os


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # alive, owned by someone else
    return True
