"""Driving the ``sparkpoint`` CLI as a user would: its arguments, its output and exit code.

A command runs in the test's own process, in the JVM the process already has
(``tests/support/spark_session.py``), unless being a separate process is what the test is
about or what the command needs: a crash or freeze point (the process exits or stops
itself), a JVM of other settings (a master, the UI, jars or options only a new JVM takes, a
Python of the user's shell), the machine's environment changed for it (``AWS_*``, Spark's
and Hadoop's variables, another host), a job held by a thread of the test, a terminal, a
background process, or ``process=True``. ``SPARKPOINT_TEST_CLI=process`` runs every
command as a process, to compare. Each in-process command gets a Spark session of its own
(``create_session`` over a running JVM), and once it returned the JVM's state stores are
closed, as the end of a process closes them: a finished run's provider must not write into
a checkpoint after the command that held the job's lease returned (Spark's maintenance pass
would)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sparkpoint.storage.home import Home
from tests.support import in_process


@dataclass
class Result:
    code: int
    out: str
    err: str

    def json(self) -> Any:
        return json.loads(self.out)


def _env(worker_python: bool = True, extra: dict[str, str] | None = None) -> dict[str, str]:
    """The test's environment; ``worker_python=False`` leaves PYSPARK_PYTHON unset, as in a
    user's shell, so that sparkpoint has to choose the workers' Python itself."""
    env = dict(os.environ)
    if worker_python:
        env["PYSPARK_PYTHON"] = sys.executable
    else:
        env.pop("PYSPARK_PYTHON", None)
        env.pop("PYSPARK_DRIVER_PYTHON", None)
    env.update(extra or {})
    return env


def command(home: Home, *args: str) -> list[str]:
    return [sys.executable, "-m", "sparkpoint.cli.main", "--home", home.location, *args]


def sparkpoint(home: Home, *args: str, timeout: float = 300, worker_python: bool = True,
               env: dict[str, str] | None = None, process: bool = False) -> Result:
    if process or not in_process.allowed(args, worker_python, env):
        done = subprocess.run(command(home, *args), capture_output=True, text=True,
                              timeout=timeout, env=_env(worker_python, env))
        return Result(done.returncode, done.stdout, done.stderr)
    code, out, err = in_process.run(["--home", home.location, *args], env or {}, timeout)
    return Result(code, out, err)


def sparkpoint_on_a_terminal(home: Home, *args: str, env: dict[str, str] | None = None,
                             timeout: float = 300) -> Result:
    """The CLI with its stderr on a pseudo-terminal, as in a user's shell (stdout still
    captured): ``err`` is what the terminal received."""
    import fcntl
    import pty
    import select
    import struct
    import termios

    parent, child = pty.openpty()
    # A terminal of 40 rows of 120 columns: a new pseudo-terminal has none (0 x 0).
    fcntl.ioctl(child, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    process = subprocess.Popen(command(home, *args), stdout=subprocess.PIPE, stderr=child,
                               env=_env(True, env))
    os.close(child)
    received = bytearray()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([parent], [], [], 1.0)
        if ready:
            try:
                chunk = os.read(parent, 65536)
            except OSError:  # EIO: the terminal's last writer closed it
                break
            if not chunk:
                break
            received += chunk
    os.close(parent)
    out, _ = process.communicate(timeout=max(1.0, deadline - time.monotonic()))
    return Result(process.returncode, out.decode(), received.decode(errors="replace"))


def start(home: Home, *args: str, log: Path, worker_python: bool = True) -> subprocess.Popen[bytes]:
    handle = open(log, "wb")  # noqa: SIM115 - lives as long as the process
    return subprocess.Popen(command(home, *args), stdout=handle, stderr=subprocess.STDOUT,
                            env=_env(worker_python))


def committed_log_offset(home: Home, job: str, source: str) -> int | None:
    """The file-source log offset of the job's latest committed batch."""
    ckpt = home.checkpoint_dir(job)
    commits = [int(p.name) for p in (ckpt / "commits").glob("*") if p.name.isdigit()] \
        if (ckpt / "commits").is_dir() else []
    if not commits:
        return None
    text = (ckpt / "offsets" / str(max(commits))).read_text()
    for line in text.split("\n")[2:]:
        name, _, body = line.partition(":")
        if name == source and body != "-":
            value: int = json.loads(body)["logOffset"]
            return value
    return None


def files_committed(home: Home, job: str, source: str) -> int:
    offset = committed_log_offset(home, job, source)
    if offset is None:
        return 0
    log = home.checkpoint_dir(job) / "sources" / source
    return sum(len(p.read_text().splitlines()) - 1 for p in log.iterdir()
               if p.name.isdigit() and int(p.name) <= offset)


def wait_for(predicate: Any, timeout: float, what: str, log: Path | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.5)
    detail = log.read_text()[-3000:] if log is not None and log.exists() else ""
    raise AssertionError(f"timed out after {timeout}s waiting for {what}\n{detail}")


def sparkpoint_on_terminal(home: Home, *args: str, answer: str,
                           timeout: float = 120) -> Result:
    """Run the CLI with a terminal as its standard input, typing ``answer`` (e.g. "n\\n")."""
    import pty

    controller, terminal = pty.openpty()
    try:
        os.write(controller, answer.encode())
        done = subprocess.run(command(home, *args), stdin=terminal, capture_output=True,
                              text=True, timeout=timeout, env=_env())
    finally:
        os.close(controller)
        os.close(terminal)
    return Result(done.returncode, done.stdout, done.stderr)
