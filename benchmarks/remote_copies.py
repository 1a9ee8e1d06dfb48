"""What a snapshot create and a start from a snapshot move through sparkpoint's process on an
S3 home whose snapshots are in the same store (the store copies the state files itself).

    .venv/bin/python benchmarks/remote_copies.py [--keys N] [--value-bytes B] [--repeats R]

Used by ``remote_home.py`` (see there); runnable alone. It starts moto's S3 server on
loopback, runs a ``groupBy("key").agg(max(value))`` job over N keys with wide random values
in an S3 home (Spark writes the checkpoint through s3a), and measures, each as the median of
``--repeats`` runs:

- the bytes that pass through sparkpoint's process (every read, write, upload and download
  of its FileIO, counted at the FileIO) for a ``snapshot create`` into an empty snapshot
  store and for a start from that snapshot (``run --from-snapshot``), as a share of the
  snapshot's state bytes (target: at most 1%);
- the wall time of the create, and of the start's building of the checkpoint, against
  boto3's transfer manager downloading the same state files and uploading them again (what
  moving them through one machine costs at best; target: at most 0.3).

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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from s3_snapshot import (  # benchmarks/s3_snapshot.py, beside this script
    JOB_SOURCE,
    boto3_download,
    boto3_upload,
    moto_server,
    s3_client,
    verdict,
    write_values,
)
from timing import Timing  # benchmarks/timing.py, beside this script

from sparkpoint import api
from sparkpoint.snapshot.object_store import is_state_data
from sparkpoint.spark.s3a import s3a_conf
from sparkpoint.spark.session import create_session
from sparkpoint.storage import fileio, s3_io
from sparkpoint.storage.home import SCRATCH_ENV, Home
from sparkpoint.upgrade import pipeline as start  # where the start calls build_new_checkpoint

SHARE_TARGET = 0.01
TIME_TARGET = 0.3
S3A_JARS = Path(__file__).resolve().parents[1] / ".cache" / "s3a" / "lib"
JOB = "bench"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    parser.add_argument("--keys", type=int, default=200_000)
    parser.add_argument("--value-bytes", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=3)
    return parser.parse_args(argv)


@dataclass
class Counted:
    bytes: int = 0


@contextmanager
def counted_transfers() -> Iterator[Counted]:
    """Count the bytes every FileIO call moves between this process and a store."""
    counted = Counted()
    io_class = fileio.FileIO
    originals = {name: getattr(io_class, name) for name in
                 ("read_bytes", "write_bytes", "get_files", "put_files")}
    s3_create = s3_io.S3FileIO.create_exclusive

    def read_bytes(self: Any, location: str) -> bytes:
        data: bytes = originals["read_bytes"](self, location)
        counted.bytes += len(data)
        return data

    def write_bytes(self: Any, location: str, data: bytes) -> None:
        counted.bytes += len(data)
        originals["write_bytes"](self, location, data)

    def create_exclusive(self: Any, location: str, data: bytes) -> bool:
        counted.bytes += len(data)
        return bool(s3_create(self, location, data))

    def get_files(self: Any, pairs: Any, *args: Any, **kwargs: Any) -> None:
        originals["get_files"](self, pairs, *args, **kwargs)
        counted.bytes += sum(local.stat().st_size for _, local in pairs)

    def put_files(self: Any, pairs: Any, *args: Any, **kwargs: Any) -> None:
        counted.bytes += sum(local.stat().st_size for local, _ in pairs)
        originals["put_files"](self, pairs, *args, **kwargs)

    patched = {"read_bytes": read_bytes, "write_bytes": write_bytes, "get_files": get_files,
               "put_files": put_files}
    for name, method in patched.items():
        setattr(io_class, name, method)
    s3_io.S3FileIO.create_exclusive = create_exclusive  # type: ignore[method-assign]
    try:
        yield counted
    finally:
        for name, method in originals.items():
            setattr(io_class, name, method)
        s3_io.S3FileIO.create_exclusive = s3_create  # type: ignore[method-assign]


@contextmanager
def timed_builds() -> Iterator[list[float]]:
    """The seconds each start from a snapshot spends building its new checkpoint (restore,
    repartition, migration) while inside, one entry per start."""
    built: list[float] = []
    original = start.build_new_checkpoint

    def timed(*a: Any, **k: Any) -> Any:
        began = time.perf_counter()
        try:
            return original(*a, **k)
        finally:
            built.append(time.perf_counter() - began)

    start.build_new_checkpoint = timed  # type: ignore[assignment]
    try:
        yield built
    finally:
        start.build_new_checkpoint = original  # type: ignore[assignment]


@dataclass(frozen=True)
class Figures:
    state_bytes: int
    create_bytes: list[int]
    start_bytes: list[int]
    create: Timing
    build: Timing
    boto3: Timing


def measure(args: argparse.Namespace, work: Path) -> Figures:
    jars = ",".join(sorted(str(jar) for jar in S3A_JARS.glob("*.jar")))
    if not jars:
        raise SystemExit(f"no s3a jars in {S3A_JARS}: run scripts/test-deps.sh")
    from tests.support.s3 import S3Server  # the same client settings as the tests

    endpoint = os.environ["AWS_ENDPOINT_URL"]
    bucket = S3Server(endpoint).new_bucket()
    url = f"s3://{bucket}/home"
    os.environ[SCRATCH_ENV] = str(work / "machine")
    conf = {"spark.jars": jars, "spark.sql.shuffle.partitions": "4"}
    spark = create_session(None, {**s3a_conf(url, conf), **conf}, "remote-copies-bench")
    job_file = work / "bench_job.py"
    job_file.write_text(JOB_SOURCE)
    write_values(work / "events" / "part-000.parquet", range(args.keys), args.value_bytes, "a")
    home = Home.resolve(url)
    api.run(home, job_file, JOB, params={"input": str(work / "events")}, conf=conf,
            until_caught_up=True, spark=spark)

    client = s3_client(endpoint)
    create_bytes, start_bytes, creates, builds, baselines = [], [], [], [], []
    state_bytes = 0
    for repeat in range(args.repeats):
        snapshots = f"s3://{bucket}/snapshots{repeat}"
        store_home = Home.resolve(url, snapshots)
        shutil.rmtree(work / "machine", ignore_errors=True)
        with counted_transfers() as counted:
            began = time.perf_counter()
            manifest = api.snapshot_create(store_home, JOB, "s")
            creates.append(time.perf_counter() - began)
        create_bytes.append(counted.bytes)
        state = [entry for entry in manifest.files if is_state_data(entry.path)]
        state_bytes = sum(entry.bytes for entry in state)

        # The baseline: the same state files down to this machine and up again.
        keys = [f"home/jobs/{JOB}/{entry.path}" for entry in state]
        local = work / f"boto3-{repeat}"
        began = time.perf_counter()
        boto3_download(client, bucket, [(key, local / key) for key in keys])
        boto3_upload(client, bucket, [(local / key, f"boto3-{repeat}/{key}") for key in keys])
        baselines.append(time.perf_counter() - began)
        shutil.rmtree(local, ignore_errors=True)

        shutil.rmtree(work / "machine", ignore_errors=True)
        with timed_builds() as built, counted_transfers() as counted:
            api.run(store_home, job_file, f"started{repeat}", from_snapshot="s",
                    params={"input": str(work / "events")}, conf=conf,
                    until_caught_up=True, spark=spark)
        start_bytes.append(counted.bytes)
        builds.extend(built)
    spark.stop()
    return Figures(state_bytes, create_bytes, start_bytes, Timing(tuple(creates)),
                   Timing(tuple(builds)), Timing(tuple(baselines)))


def report(figures: Figures) -> list[str]:
    lines = []
    for what, moved in (("snapshot create", figures.create_bytes),
                        ("start from the snapshot", figures.start_bytes)):
        share = sorted(moved)[len(moved) // 2] / max(1, figures.state_bytes)
        lines.append(f"{what}: {sorted(moved)[len(moved) // 2]} bytes through sparkpoint's "
                     f"process of {figures.state_bytes} state bytes = {share:.4f} (target <= "
                     f"{SHARE_TARGET:g}) {verdict(share <= SHARE_TARGET)}")
    for what, timing in (("snapshot create", figures.create),
                         ("start: building the checkpoint", figures.build)):
        ratio = timing.median / figures.boto3.median
        lines.append(f"{what}: median {timing.median:.3f} s vs boto3 download + upload of the "
                     f"state files {figures.boto3.median:.3f} s = {ratio:.2f} (target <= "
                     f"{TIME_TARGET:g}) {verdict(ratio <= TIME_TARGET)}")
    return lines


def run(argv: list[str] | None = None) -> list[str]:
    args = parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="sparkpoint-remote-copies-bench-"))
    try:
        with moto_server(work / "moto.log"):
            return report(measure(args, work))
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    for line in run():
        print(line)
