"""A Spark standalone cluster on loopback: a master and two one-core workers, each its own
process started from the pip package with sbin/spark-daemon.sh, stopped at the end."""

from __future__ import annotations

import os
import shlex
import socket
import subprocess
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent


@contextmanager
def standalone_cluster(root: Path, instance: int,
                       worker_prefix: Sequence[str] = ()) -> Iterator[str]:
    """The master's URL. ``root``: the daemons' logs (``root/logs``), pids and work
    directories; ``instance``: the daemons' instance numbers start there (spark-daemon.sh
    tells daemons of one class apart by it); ``worker_prefix``: a command each worker's
    daemon is started under (its shell command is given to it as the last argument)."""
    home = spark_home()
    daemon = home / "sbin" / "spark-daemon.sh"
    env = dict(os.environ, SPARK_HOME=str(home), SPARK_LOG_DIR=str(root / "logs"),
               SPARK_PID_DIR=str(root / "pids"), SPARK_WORKER_DIR=str(root / "work"),
               SPARK_LOCAL_IP="127.0.0.1", PYSPARK_PYTHON=sys.executable)
    port = free_port()
    url = f"spark://127.0.0.1:{port}"
    workers = (str(instance + 1), str(instance + 2))
    subprocess.run(["bash", str(daemon), "start", MASTER_CLASS, str(instance), "--host",
                    "127.0.0.1", "--port", str(port), "--webui-port", str(free_port())],
                   env=env, check=True, capture_output=True)
    try:
        for worker in workers:
            start = ["bash", str(daemon), "start", WORKER_CLASS, worker, "--host",
                     "127.0.0.1", "--cores", "1", "--memory", "1g",
                     "--work-dir", str(root / f"work-{worker}"),
                     "--webui-port", str(free_port()), url]
            command = [*worker_prefix, shlex.join(start)] if worker_prefix else start
            subprocess.run(command, env=env, check=True, capture_output=True)
        yield url
    finally:
        for worker in workers:
            subprocess.run(["bash", str(daemon), "stop", WORKER_CLASS, worker], env=env,
                           capture_output=True)
        subprocess.run(["bash", str(daemon), "stop", MASTER_CLASS, str(instance)], env=env,
                       capture_output=True)
