"""A real HDFS on loopback for the store tests: Hadoop's MiniDFSCluster (one NameNode, one
DataNode in one JVM), started once per test session from the jars scripts/test-deps.sh
fetched, with WebHDFS on the NameNode's HTTP port."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import requests

from tests.support.s3 import free_port
from tests.support.servers import environment, stop_process_group

REPO = Path(__file__).resolve().parents[2]
MINICLUSTER_LIB = REPO / ".cache" / "hdfs-minicluster" / "lib"
# Generous: on a busy two-core machine the JVM has taken 90 s to start.
START_TIMEOUT_SECONDS = 300


@dataclass(frozen=True)
class HdfsServer:
    # hdfs://127.0.0.1:<NameNode RPC port>: what Spark's Hadoop client is handed.
    url: str
    # http://127.0.0.1:<NameNode HTTP port>: where WebHDFS answers.
    webhdfs: str
    # Seconds from launching the JVM to WebHDFS answering.
    start_seconds: float

    @property
    def env(self) -> dict[str, str]:
        """What sparkpoint's WebHDFS store reads to find the NameNode's HTTP port."""
        return {"SPARKPOINT_WEBHDFS_URL": self.webhdfs}

    def new_dir(self) -> str:
        """A fresh, not yet existing directory URL for one test."""
        return f"{self.url}/t-{uuid.uuid4().hex[:12]}"

    def status(self, path: str) -> requests.Response:
        return requests.get(f"{self.webhdfs}/webhdfs/v1{path}",
                            params={"op": "GETFILESTATUS"}, timeout=10)


def _ready(webhdfs: str) -> bool:
    """WebHDFS answers and the NameNode has a live DataNode, so writes can succeed."""
    try:
        root = requests.get(f"{webhdfs}/webhdfs/v1/", params={"op": "GETFILESTATUS"}, timeout=2)
        if root.status_code != 200:
            return False
        jmx = requests.get(f"{webhdfs}/jmx",
                           params={"qry": "Hadoop:service=NameNode,name=FSNamesystemState"},
                           timeout=2)
        beans = jmx.json().get("beans", [])
        return bool(beans) and int(beans[0].get("NumLiveDataNodes", 0)) >= 1
    except (requests.RequestException, ValueError):
        return False


def start_hdfs_server(work_dir: Path) -> Iterator[HdfsServer]:
    """Start the minicluster under ``work_dir``, yield it with SPARKPOINT_WEBHDFS_URL set, and
    stop its whole process group afterwards."""
    if not MINICLUSTER_LIB.is_dir():
        raise RuntimeError(
            f"the HDFS minicluster jars are missing from {MINICLUSTER_LIB}; "
            "run bash scripts/test-deps.sh (scripts/test.sh runs it)"
        )
    java = shutil.which("java")
    if java is None:
        raise RuntimeError("java is not on PATH; the HDFS minicluster needs Java 17")
    rpc_port, http_port = free_port(), free_port()
    data_dir, tmp_dir = work_dir / "data", work_dir / "tmp"
    data_dir.mkdir(parents=True, exist_ok=True)
    tmp_dir.mkdir(parents=True, exist_ok=True)
    log_path = work_dir / "minicluster.log"
    log = open(log_path, "wb")  # noqa: SIM115 - open while the cluster runs
    command = [
        java, "-Xmx512m",
        # The client JIT alone and the serial collector: ~40% less CPU to start (7 s instead
        # of 12 s measured), which matters on a busy two-core machine; the load is tiny.
        "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC",
        # Name and data directories, and Jetty's unpacked web apps, stay in the session tmp.
        f"-Dtest.build.data={data_dir}", f"-Djava.io.tmpdir={tmp_dir}",
        "-cp", f"{MINICLUSTER_LIB}/*",
        "org.apache.hadoop.mapreduce.MiniHadoopClusterManager",
        "-nomr", "-format", "-nnport", str(rpc_port), "-nnhttpport", str(http_port),
        "-D", "dfs.namenode.rpc-bind-host=127.0.0.1",
        "-D", "dfs.namenode.http-bind-host=127.0.0.1",
        "-writeDetails", str(work_dir / "details.json"),
    ]
    started = time.monotonic()
    # Its own process group, so that stopping it cannot leave a JVM behind.
    process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT,
                               start_new_session=True)
    webhdfs = f"http://127.0.0.1:{http_port}"
    try:
        deadline = started + START_TIMEOUT_SECONDS
        details_file = work_dir / "details.json"
        # The manager writes its details file once the cluster is up; WebHDFS then answers.
        while not (details_file.exists() and _ready(webhdfs)):
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the HDFS minicluster did not start; see {log_path}")
            time.sleep(0.5)  # polling for readiness, not synchronising test steps
        details = json.loads(details_file.read_text())
        if details.get("namenode_port") != rpc_port:
            raise RuntimeError(f"the minicluster reports {details}, expected port {rpc_port}")
        server = HdfsServer(f"hdfs://127.0.0.1:{rpc_port}", webhdfs,
                            round(time.monotonic() - started, 1))
        (work_dir / "start_seconds").write_text(f"{server.start_seconds}\n")
        with environment(server.env):
            yield server
    finally:
        stop_process_group(process)
        log.close()

