"""A job runs on a real Spark standalone cluster (master and worker started from the pip
package with sbin/spark-daemon.sh), is snapshotted and continues from the snapshot."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from sparkpoint.storage.home import Home
from sparkpoint.testing import expected_hourly_counts, output_rows, write_clicks
from tests.conftest import EXAMPLES
from tests.support.cli import sparkpoint

pytestmark = [pytest.mark.spark, pytest.mark.cluster]
JOB = EXAMPLES / "clicks_job.py"
MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    root = tmp_path_factory.mktemp("cluster")
    spark_home = _spark_home()
    daemon = spark_home / "sbin" / "spark-daemon.sh"
    env = dict(os.environ, SPARK_HOME=str(spark_home), SPARK_LOG_DIR=str(root / "logs"),
               SPARK_PID_DIR=str(root / "pids"), SPARK_WORKER_DIR=str(root / "work"),
               SPARK_LOCAL_IP="127.0.0.1", PYSPARK_PYTHON=sys.executable)
    port = _free_port()
    url = f"spark://127.0.0.1:{port}"
    subprocess.run(["bash", str(daemon), "start", MASTER_CLASS, "1", "--host", "127.0.0.1",
                    "--port", str(port), "--webui-port", str(_free_port())],
                   env=env, check=True, capture_output=True)
    subprocess.run(["bash", str(daemon), "start", WORKER_CLASS, "1", "--host", "127.0.0.1",
                    "--cores", "2", "--memory", "1g", "--webui-port", str(_free_port()), url],
                   env=env, check=True, capture_output=True)
    try:
        yield url, root / "logs"
    finally:
        for cls in (WORKER_CLASS, MASTER_CLASS):
            subprocess.run(["bash", str(daemon), "stop", cls, "1"], env=env,
                           capture_output=True)


def test_job_on_standalone_cluster_continues_from_snapshot(
    cluster: tuple[str, Path], spark: object, home: Home, tmp_path: Path
) -> None:
    url, logs = cluster
    inp = tmp_path / "in"
    events = write_clicks(inp, range(0, 3))
    common = ["--master", url, "--conf", "spark.sql.shuffle.partitions=2",
              "--conf", "spark.executor.memory=512m", "--param", f"input={inp}",
              "--param", "files_per_batch=1", "--until-caught-up"]
    first = sparkpoint(home, "run", str(JOB), "--job", "on-cluster",
                       "--param", f"output={tmp_path / 'o1'}", *common)
    assert first.code == 0, first.err[-3000:]
    assert sparkpoint(home, "snapshot", "create", "on-cluster", "c1").code == 0
    events += write_clicks(inp, range(3, 6))
    second = sparkpoint(home, "run", str(JOB), "--job", "on-cluster-2", "--from-snapshot", "c1",
                        "--param", f"output={tmp_path / 'o2'}", *common)
    assert second.code == 0, second.err[-3000:]
    shown = sparkpoint(home, "jobs", "show", "on-cluster-2", "--json").json()
    master_log = "".join(p.read_text() for p in logs.glob("*Master*.out"))
    assert "Registering app sparkpoint:on-cluster" in master_log
    assert "Registering app sparkpoint:on-cluster-2" in master_log
    assert shown["master"] == url and shown["lineage"]["from_snapshot"] == "c1"
    combined = output_rows(spark, tmp_path / "o1") + output_rows(spark, tmp_path / "o2")  # type: ignore[arg-type]
    assert combined == expected_hourly_counts(events)
