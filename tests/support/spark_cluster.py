"""A Spark standalone cluster on loopback: a master and two one-core workers, each its own
process started from the pip package with sbin/spark-daemon.sh, stopped at the end; and the
same cluster with its workers on "other hosts": each in a mount namespace of its own where
the driver's files are an empty tmpfs, without the driver's store settings."""

from __future__ import annotations

import os
import shlex
import shutil
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


# The environment sparkpoint's store clients read.
STORE_ENV = ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_ACCESS_KEY_ID",
             "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_REGION", "AWS_DEFAULT_REGION",
             "SPARKPOINT_WEBHDFS_URL", "HADOOP_CONF_DIR")


def private_mounts_work() -> bool:
    """Whether this machine lets a process mount in a namespace of its own (root, or user
    namespaces)."""
    if shutil.which("unshare") is None:
        return False
    probe = subprocess.run(["unshare", "--mount", "--propagation", "private", "true"],
                           capture_output=True)
    return probe.returncode == 0


@contextmanager
def other_host_cluster(root: Path, hidden: Path) -> Iterator[str]:
    """The master's URL of a cluster whose workers see an empty tmpfs over ``hidden`` (the
    driver's files) and none of the store settings of this process's environment: the tasks
    must get them from the application. ``root``: the daemons' own files, outside
    ``hidden``."""
    unset = "unset " + " ".join(STORE_ENV) + "; "
    prefix = ["unshare", "--mount", "--propagation", "private", "bash", "-c",
              f"mount -t tmpfs other-host {shlex.quote(str(hidden))} && {unset}"
              "exec bash -c \"$0\""]
    with standalone_cluster(root, 10, prefix) as url:
        yield url
