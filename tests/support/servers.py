"""Servers the tests start in their own process group, and how they are stopped."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Iterator, Mapping


def stop_process_group(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM to the server's whole process group, SIGKILL if it is still there after 30 s."""
    try:
        os.killpg(process.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()


@contextlib.contextmanager
def environment(values: Mapping[str, str]) -> Iterator[None]:
    """The variables set for the block (child processes inherit them), then put back."""
    saved = {key: os.environ.get(key) for key in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
