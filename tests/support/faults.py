"""Faults of the machine a sparkpoint process runs on, for tests: a wall clock set apart, and
a restart in a fresh pid namespace (a container's restart). The network's faults are in
slow_proxy.py.

Clocks set apart: ``clock_apart_env(seconds)`` is the environment that makes a process (and
every process it starts: Spark's JVM, its Python workers) read a wall clock ``seconds`` off
the real one, with libfaketime preloaded (the library comes with the ``libfaketime`` package
of the dev extras). ``CLOCK_MONOTONIC`` is left alone (``FAKETIME_DONT_FAKE_MONOTONIC``): the
process measures durations as the machine does and only its idea of the date is off, as on
a machine whose clock drifted. ``FAKETIME_FORCE_MONOTONIC_FIX=0`` (libfaketime's rewriting of
timed waits on CLOCK_MONOTONIC, off) is what lets a JVM start under it: with the default, a
SparkSession's start hung here.

A fresh pid namespace: ``unshare --pid --fork --mount-proc`` (needs root, as the tests have
here and in CI) runs a command as pid 1 of a namespace of its own, seeing none of the other
processes; ``pid=N`` makes it N instead, through ``/proc/sys/kernel/ns_last_pid`` inside the
new namespace, to imitate a restarted container whose process gets the pid of the run that
died.
"""

from __future__ import annotations

import os
import subprocess
import sys

from sparkpoint.storage.home import Home
from tests.support.cli import Result, _env, command

# Run as pid 1 of the new namespace: makes the next pid ``N`` and runs the command as it.
_LAUNCH_AS_PID = """
import subprocess, sys
wanted, argv = int(sys.argv[1]), sys.argv[2:]
with open("/proc/sys/kernel/ns_last_pid", "w") as last:
    last.write(str(wanted - 1))
sys.exit(subprocess.call(argv))
"""


def clock_apart_env(seconds: int) -> dict[str, str]:
    """The variables that make a process's wall clock ``seconds`` off (negative: behind)."""
    import libfaketime

    _, preload = libfaketime.get_reload_information()
    return {
        "LD_PRELOAD": preload["LD_PRELOAD"],
        "LD_LIBRARY_PATH": os.pathsep.join(
            filter(None, [preload["LD_LIBRARY_PATH"], os.environ.get("LD_LIBRARY_PATH")])),
        "FAKETIME": f"{seconds:+d}",
        "FAKETIME_DONT_FAKE_MONOTONIC": "1",
        "DONT_FAKE_MONOTONIC": "1",  # the same, by the older name the bundled build reads
        "FAKETIME_FORCE_MONOTONIC_FIX": "0",
    }


def sparkpoint_with_clock_apart(home: Home, seconds: int, *args: str, timeout: float = 300,
                                env: dict[str, str] | None = None) -> Result:
    """The CLI in a process whose wall clock is ``seconds`` off."""
    done = subprocess.run(command(home, *args), capture_output=True, text=True,
                          timeout=timeout,
                          env=_env(extra={**clock_apart_env(seconds), **(env or {})}))
    return Result(done.returncode, done.stdout, done.stderr)


def in_fresh_pid_namespace(argv: list[str], pid: int | None = None) -> list[str]:
    """``argv`` run in a pid namespace of its own: as pid 1, or as ``pid`` (at least 2: pid 1
    is then the launcher that gives it that number and waits for it)."""
    wrapped = ["unshare", "--pid", "--fork", "--mount-proc", "--"]
    if pid is None:
        return [*wrapped, *argv]
    if pid < 2:
        raise ValueError(f"pid {pid}: expected 2 or more (pid 1 is the launcher)")
    return [*wrapped, sys.executable, "-c", _LAUNCH_AS_PID, str(pid), *argv]


def sparkpoint_in_fresh_pid_namespace(home: Home, *args: str, pid: int | None = None,
                                      timeout: float = 300,
                                      env: dict[str, str] | None = None) -> Result:
    """The CLI restarted as in a new container: pid 1 (or ``pid``) of a namespace of its own,
    unable to see or signal the test's processes."""
    done = subprocess.run(in_fresh_pid_namespace(command(home, *args), pid),
                          capture_output=True, text=True, timeout=timeout, env=_env(extra=env))
    return Result(done.returncode, done.stdout, done.stderr)
