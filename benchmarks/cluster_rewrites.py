"""What a start into another partition count and a prune move through the driver's process
on an S3 home when the executors share no disk with the driver, and how long they take next
to the same commands on ``local[2]``.

    .venv/bin/python benchmarks/cluster_rewrites.py [--keys N] [--repeats R]

It starts moto's S3 server on loopback and the two-worker standalone cluster whose workers
run in mount namespaces of their own, where this script's work directory (the driver's
scratch and temporary files) is an empty tmpfs (``tests/support/spark_cluster.py``, as in
``tests/integration/test_other_host_executors.py``). A ``groupBy("key").count()`` job over N
keys builds RocksDB state in 4 partitions on the cluster, with its home in the bucket, and a
snapshot is taken. Then, each ``--repeats`` times, on the cluster and on ``local[2]`` (a
session of this process either way):

- a start from the snapshot into 3 partitions (``run --from-snapshot``: the state moved by
  Spark tasks that read and write the store), timed while it builds the new checkpoint;
- ``snapshot prune`` of about a third of the keys (Spark's reader and sparkpoint's JVM
  writer in the store).

For each it prints the bytes that passed through the driver's process, as a share of the
snapshot's state bytes (target: at most 1%): every byte sparkpoint's own store client moved
(counted at its FileIO, as ``remote_copies.py`` does), and every byte the driver's JVM read
and wrote through s3a (its Spark reads and writes the checkpoint's logs, offsets and
commits; on the cluster the state files are read and written by the tasks on the
executors, other JVMs; on ``local[2]`` the tasks run in the driver's JVM and count there).
The JVM's bytes are Hadoop's statistics of the scheme: ``FileSystem.getAllStatistics()``
for what goes through ``FileSystem`` and ``FileContext.getAllStatistics()`` for what goes
through ``FileContext``, Spark's default checkpoint file manager, whose S3A instance is not
the cached one and whose bytes the first never shows (measured: a query's offsets and
commits on s3a counted 0 bytes there, 4,472 written in the second). And the median wall
time on the cluster against ``local[2]`` (target: at most 1.3).

It is a report, not a test: it exits 0 whatever the verdict.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from remote_copies import (  # benchmarks/remote_copies.py, beside this script
    counted_transfers,
    timed_builds,
)
from s3_snapshot import moto_server, verdict  # benchmarks/s3_snapshot.py, beside this script
from timing import Timing  # benchmarks/timing.py, beside this script

from sparkpoint import api
from sparkpoint.snapshot.object_store import is_state_data
from sparkpoint.spark.s3a import s3a_conf
from sparkpoint.spark.session import create_session
from sparkpoint.storage.home import SCRATCH_ENV, Home

REPO = Path(__file__).resolve().parents[1]
SHARE_TARGET = 0.01
TIME_TARGET = 1.3
S3A_JARS = REPO / ".cache" / "s3a" / "lib"
JOB = REPO / "tests" / "data" / "jobs" / "key_counts.py"
OPERATOR = "key_counts"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    parser.add_argument("--keys", type=int, default=300_000)
    parser.add_argument("--repeats", type=int, default=2)
    return parser.parse_args(argv)


@dataclass
class Step:
    """One command's samples on one master: wall seconds and bytes through the driver."""

    seconds: list[float] = field(default_factory=list)
    driver_bytes: list[int] = field(default_factory=list)
    jvm_bytes: list[int] = field(default_factory=list)

    @property
    def median_bytes(self) -> int:
        return sorted(self.driver_bytes)[len(self.driver_bytes) // 2]

    @property
    def median_jvm_bytes(self) -> int:
        return sorted(self.jvm_bytes)[len(self.jvm_bytes) // 2]


def jvm_s3a_bytes(spark: Any) -> int:
    """Bytes read and written through s3a by this session's JVM so far, through Hadoop's
    ``FileSystem`` and through its ``FileContext`` (Spark's checkpoint logs)."""
    hadoop = spark.sparkContext._jvm.org.apache.hadoop.fs
    total = sum(stats.getBytesRead() + stats.getBytesWritten()
                for stats in hadoop.FileSystem.getAllStatistics()
                if stats.getScheme() == "s3a")
    for entry in hadoop.FileContext.getAllStatistics().entrySet():
        if entry.getKey().getScheme() == "s3a":
            total += entry.getValue().getBytesRead() + entry.getValue().getBytesWritten()
    return int(total)


@contextmanager
def _measured(step: Step, spark: Any) -> Iterator[None]:
    before = jvm_s3a_bytes(spark)
    with counted_transfers() as counted:
        began = time.perf_counter()
        yield
        step.seconds.append(time.perf_counter() - began)
    step.driver_bytes.append(counted.bytes)
    step.jvm_bytes.append(jvm_s3a_bytes(spark) - before)


def _session(master: str, url: str) -> Any:
    jars = sorted(str(jar) for jar in S3A_JARS.glob("*.jar"))
    if not jars:
        raise SystemExit(f"no s3a jars in {S3A_JARS}: run scripts/test-deps.sh")
    conf = {"spark.jars": ",".join(f"local:{jar}" for jar in jars),
            # s3a's classes where each worker reads them, as a cluster's image holds them.
            "spark.executor.extraClassPath": ":".join(jars),
            "spark.executor.memory": "512m", "spark.sql.shuffle.partitions": "4"}
    return create_session(master, {**s3a_conf(url, conf), **conf}, "cluster-rewrites-bench")


def _rewrites(spark: Any, home: Home, inp: str, label: str, repeats: int,
              moves: Step, prunes: Step) -> None:
    for repeat in range(repeats):
        job = f"keys-3-{label}-{repeat}"
        with _measured(moves, spark), timed_builds() as built:
            api.run(home, JOB, job, from_snapshot="k1", params={"input": inp},
                    conf={"spark.sql.shuffle.partitions": "3"}, until_caught_up=True,
                    spark=spark)
        moves.seconds[-1] = sum(built)  # the move itself, not the query run after it
        with _measured(prunes, spark):
            api.snapshot_prune(home, "k1", f"k1-{label}-{repeat}", operator=OPERATOR,
                               where="key < 'k00100000' OR key LIKE '%7'", spark=spark)


@dataclass(frozen=True)
class Figures:
    state_bytes: int
    cluster: dict[str, Step]
    local: dict[str, Step]


def measure(args: argparse.Namespace, work: Path, cluster_root: Path) -> Figures:
    from tests.support.s3 import S3Server  # the same client settings as the tests
    from tests.support.spark_cluster import other_host_cluster

    bucket = S3Server(os.environ["AWS_ENDPOINT_URL"]).new_bucket()
    url = f"s3://{bucket}/home"
    home = Home.resolve(url)
    inp = f"s3a://{bucket}/in"
    os.environ[SCRATCH_ENV] = str(work / "machine")
    cluster: dict[str, Step] = {"move": Step(), "prune": Step()}
    local: dict[str, Step] = {"move": Step(), "prune": Step()}
    with other_host_cluster(cluster_root, work) as master:
        spark = _session(master, url)
        spark.range(args.keys).selectExpr("format_string('k%08d', id) AS key") \
            .repartition(4).write.parquet(inp)
        api.run(home, JOB, "keys", params={"input": inp}, until_caught_up=True, spark=spark,
                conf={"spark.sql.shuffle.partitions": "4"})
        manifest = api.snapshot_create(home, "keys", "k1")
        state_bytes = sum(entry.bytes for entry in manifest.files if is_state_data(entry.path))
        _rewrites(spark, home, inp, "cluster", args.repeats, cluster["move"], cluster["prune"])
        spark.stop()
    spark = _session("local[2]", url)
    _rewrites(spark, home, inp, "local", args.repeats, local["move"], local["prune"])
    spark.stop()
    return Figures(state_bytes, cluster, local)


def report(figures: Figures, keys: int) -> list[str]:
    lines = [f"{keys} keys, RocksDB, 4 partitions: {figures.state_bytes} state bytes in the "
             "snapshot"]
    for name, what in (("move", "start into 3 partitions (building the checkpoint)"),
                       ("prune", "snapshot prune")):
        on_cluster, on_local = figures.cluster[name], figures.local[name]
        moved = on_cluster.median_bytes
        share = moved / max(1, figures.state_bytes)
        lines.append(f"{what}: {moved} bytes through sparkpoint's store client in the driver's "
                     f"process = {share:.4f} of the state (target <= {SHARE_TARGET:g}) "
                     f"{verdict(share <= SHARE_TARGET)}")
        jvm = on_cluster.median_jvm_bytes
        lines.append(f"{what}: {jvm} bytes through s3a in the driver's JVM on the cluster = "
                     f"{jvm / max(1, figures.state_bytes):.4f} of the state (on local[2], "
                     f"where the tasks run in it: {on_local.median_jvm_bytes})")
        cluster_time = Timing(tuple(on_cluster.seconds))
        local_time = Timing(tuple(on_local.seconds))
        ratio = cluster_time.median / local_time.median
        lines.append(f"{what}: cluster {cluster_time.describe(1)} s vs local[2] "
                     f"{local_time.describe(1)} s, medians {ratio:.2f} (target <= "
                     f"{TIME_TARGET:g}) {verdict(ratio <= TIME_TARGET)}")
    return lines


def run(argv: list[str] | None = None) -> list[str]:
    args = parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="sparkpoint-cluster-rewrites-bench-"))
    # The workers' own files, outside the directory they cannot see.
    cluster_root = Path(tempfile.mkdtemp(prefix="sparkpoint-bench-cluster-"))
    os.environ["TMPDIR"] = str(work)  # the driver's temporary files: hidden from the workers
    tempfile.tempdir = None
    try:
        with moto_server(work / "moto.log"):
            return report(measure(args, work, cluster_root), args.keys)
    finally:
        shutil.rmtree(work, ignore_errors=True)
        shutil.rmtree(cluster_root, ignore_errors=True)


if __name__ == "__main__":
    sys.path.insert(0, str(REPO))
    for line in run():
        print(line)
