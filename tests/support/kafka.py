"""A real Kafka-protocol broker on loopback for tests: the noida-db wheel's server."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _listening(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0


@contextmanager
def kafka_broker(data_dir: Path, log: Path) -> Iterator[str]:
    """Start a broker, yield its bootstrap address, stop it."""
    executable = shutil.which("noida-db") or str(Path(__file__).resolve().parents[2] / ".venv"
                                                  / "bin" / "noida-db")
    port = _free_port()
    data_dir.mkdir(parents=True, exist_ok=True)
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [executable, "start", "--data-dir", str(data_dir), "--host", "127.0.0.1",
             "--only", "kafka", "--kafka-port", str(port)],
            stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while not _listening(port):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the Kafka broker did not start: {log.read_text()[-2000:]}")
            time.sleep(0.2)
        yield f"127.0.0.1:{port}"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
