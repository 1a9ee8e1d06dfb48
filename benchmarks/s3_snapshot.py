"""What snapshots on S3 cost next to boto3's own parallel transfers of the same files.

    .venv/bin/python benchmarks/s3_snapshot.py [--keys N] [--value-bytes B] [--partitions P]
        [--repeats R] [--profile] [--keep]

One run starts moto's S3 server on loopback, builds a RocksDB state of at least 100 MB (a
``groupBy("key").agg(max(value))`` over N distinct keys with wide random values), and measures:

(a) ``snapshot create`` to S3 / uploading the snapshot's files with boto3's transfer manager;
(b) a second snapshot after a small change (one batch touching a few keys) / the first one;
(c) restore from S3 (fetching and checking the snapshot into the home's scratch space, what
    ``run --from-snapshot`` does before it builds the checkpoint) / downloading the same
    files with boto3's transfer manager.

Each is printed as a ratio with PASS/FAIL against its target. It is a report, not a test: it
exits 0 whatever the verdict, and non-zero only when the benchmark itself cannot run.
"""

from __future__ import annotations

import argparse
import base64
import cProfile
import os
import pstats
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from timing import Timing  # benchmarks/timing.py, beside this script
from workspace import work_dir  # benchmarks/, beside this script

from sparkpoint import api
from sparkpoint.snapshot.manifest import CHECKPOINT_SUBDIR, Manifest
from sparkpoint.snapshot.object_store import FILES_DIR, ObjectSnapshotStore, blob_name
from sparkpoint.snapshot.store import open_snapshot_store
from sparkpoint.spark.session import create_session
from sparkpoint.storage.fileio import TRANSFER_CONCURRENCY
from sparkpoint.storage.home import Home

JOB = "bench"
OPERATOR = "latest_value"
REPEATS = 5
# The state is built in this many batches (one parquet file each). Few on purpose: RocksDB
# compacts level 0 once it holds 4 files, and a compaction after the first snapshot would
# rewrite the whole state, which is no "small change".
BUILD_FILES = 2
SMALL_CHANGE_KEYS = 2_000
CREATE_TARGET = 1.2
INCREMENTAL_TARGET = 0.2
RESTORE_TARGET = 1.2
MIN_STATE_BYTES = 100 * 2**20
CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "bench",
    "AWS_SECRET_ACCESS_KEY": "bench",
    "AWS_REGION": "us-east-1",
}

JOB_SOURCE = f'''\
"""The newest value per key: one stateful aggregation whose state holds every key's value."""

from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import DataStreamWriter

import sparkpoint as sp


def build(spark: SparkSession, ctx: sp.JobContext) -> DataStreamWriter:
    events = (
        spark.readStream.name("events")
        .schema("key STRING, value STRING")
        .option("maxFilesPerTrigger", "1")
        .parquet(ctx.require_param("input"))
    )
    latest = ctx.stateful("{OPERATOR}", events.groupBy("key").agg(F.max("value").alias("value")))
    # noop keeps the sink out of the measurements; update mode is what it accepts here.
    return latest.writeStream.format("noop").outputMode("update")
'''


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    parser.add_argument("--keys", type=int, default=400_000,
                        help="distinct keys in the state (default 400000)")
    parser.add_argument("--value-bytes", type=int, default=256,
                        help="bytes of each key's random value (default 256)")
    parser.add_argument("--partitions", type=int, default=4,
                        help="spark.sql.shuffle.partitions (default 4)")
    parser.add_argument("--repeats", type=int, default=REPEATS,
                        help=f"timed runs of each operation, median reported (default {REPEATS})")
    parser.add_argument("--profile", action="store_true",
                        help="also run a create and a restore once more under cProfile")
    parser.add_argument("--keep", action="store_true",
                        help="keep the work directory instead of removing it")
    args = parser.parse_args(argv)
    if args.keys < SMALL_CHANGE_KEYS * 2:
        parser.error(f"--keys must be at least {SMALL_CHANGE_KEYS * 2}")
    if args.value_bytes < 1 or args.partitions < 1 or args.repeats < 1:
        parser.error("--value-bytes, --partitions and --repeats must be at least 1")
    return args


# -- the S3 server and boto3's own transfers ---------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def moto_server(log: Path) -> Iterator[str]:
    """moto's S3 server on loopback; the AWS variables of this process point at it."""
    import requests

    port = free_port()
    endpoint = f"http://127.0.0.1:{port}"
    with open(log, "wb") as handle:
        process = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
            stdout=handle, stderr=subprocess.STDOUT,
        )
        try:
            deadline = time.monotonic() + 60
            while True:
                try:
                    requests.get(endpoint, timeout=2)
                    break
                except requests.ConnectionError:
                    if process.poll() is not None or time.monotonic() > deadline:
                        raise SystemExit(f"moto server did not start; see {log}") from None
                    time.sleep(0.2)
            os.environ.update(CREDENTIALS)
            os.environ["AWS_ENDPOINT_URL"] = endpoint
            yield endpoint
        finally:
            process.terminate()
            process.wait(timeout=30)


def s3_client(endpoint: str) -> Any:
    import boto3
    from botocore.config import Config

    # As many pooled connections as transfers in flight, as boto3's docs advise.
    return boto3.client("s3", endpoint_url=endpoint,
                        config=Config(max_pool_connections=TRANSFER_CONCURRENCY))


def transfer_manager(client: Any) -> Any:
    from boto3.s3.transfer import TransferConfig, create_transfer_manager

    config = TransferConfig(max_concurrency=TRANSFER_CONCURRENCY, use_threads=True)
    return create_transfer_manager(client, config)


def boto3_upload(client: Any, bucket: str, pairs: list[tuple[Path, str]]) -> None:
    with transfer_manager(client) as manager:
        futures = [manager.upload(str(local), bucket, key) for local, key in pairs]
        for future in futures:
            future.result()


def boto3_download(client: Any, bucket: str, pairs: list[tuple[str, Path]]) -> None:
    for _, local in pairs:
        local.parent.mkdir(parents=True, exist_ok=True)
    with transfer_manager(client) as manager:
        futures = [manager.download(bucket, key, str(local)) for key, local in pairs]
        for future in futures:
            future.result()


def empty_bucket(client: Any, bucket: str) -> None:
    """Delete every object (moto keeps them in memory)."""
    paginator = client.get_paginator("list_objects_v2")
    for page in paginator.paginate(Bucket=bucket):
        keys = [{"Key": item["Key"]} for item in page.get("Contents", [])]
        if keys:
            client.delete_objects(Bucket=bucket, Delete={"Objects": keys})


# -- the job ------------------------------------------------------------------------------


def write_values(path: Path, keys: range, value_bytes: int, seed_text: str) -> None:
    """One parquet file: each key once with a random value (random, so RocksDB's compression
    cannot shrink the state below what the keys and values weigh)."""
    raw = os.urandom(len(keys) * value_bytes * 3 // 4 + 4)
    text = base64.b64encode(raw).decode("ascii")
    values = [seed_text + text[i * value_bytes:(i + 1) * value_bytes]
              for i in range(len(keys))]
    table = pa.table({"key": pa.array([f"k{n:010d}" for n in keys]),
                      "value": pa.array(values)})
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path, compression="none")


def build_state(args: argparse.Namespace, home: Home, work: Path, spark: Any) -> float:
    events = work / "events"
    job_file = work / "bench_job.py"
    job_file.write_text(JOB_SOURCE)
    bounds = [args.keys * i // BUILD_FILES for i in range(BUILD_FILES + 1)]
    for index in range(BUILD_FILES):
        write_values(events / f"part-{index:03d}.parquet", range(bounds[index], bounds[index + 1]),
                     args.value_bytes, "a")
    start = time.perf_counter()
    run_job(home, work, spark)
    return time.perf_counter() - start


def run_job(home: Home, work: Path, spark: Any) -> None:
    result = api.run(home, work / "bench_job.py", JOB, params={"input": str(work / "events")},
                     conf={"spark.sql.shuffle.partitions": str(spark.conf.get(
                         "spark.sql.shuffle.partitions"))},
                     until_caught_up=True, spark=spark)
    print(f"job ran {result.batches_run} batches (last {result.last_batch})", flush=True)


def small_change(args: argparse.Namespace, home: Home, work: Path, spark: Any) -> None:
    """One more batch: half of the keys it touches are new, half get a larger value."""
    start = args.keys - SMALL_CHANGE_KEYS // 2
    write_values(work / "events" / "part-999.parquet",
                 range(start, start + SMALL_CHANGE_KEYS), args.value_bytes, "b")
    run_job(home, work, spark)


# -- measuring ----------------------------------------------------------------------------


def timed(action: Callable[[], object]) -> float:
    # Flush the previous step's dirty pages so a write-back it started is not billed here.
    os.sync()
    start = time.perf_counter()
    action()
    return time.perf_counter() - start


def profile(label: str, action: Callable[[], object]) -> None:
    profiler = cProfile.Profile()
    profiler.enable()
    action()
    profiler.disable()
    # cProfile sees only this thread: s3fs's transfers run on its event loop thread.
    print(f"\n--- cProfile of {label}, main thread, top 20 by cumulative time", flush=True)
    pstats.Stats(profiler, stream=sys.stdout).sort_stats("cumulative").print_stats(20)


def _no_samples() -> Timing:
    return Timing(())


@dataclass
class Figures:
    state_bytes: int = 0
    files: int = 0
    build_s: float = 0.0
    create: Timing = field(default_factory=_no_samples)
    upload: Timing = field(default_factory=_no_samples)
    second: Timing = field(default_factory=_no_samples)
    second_added_bytes: int = 0
    second_files_added: int = 0
    restore: Timing = field(default_factory=_no_samples)
    download: Timing = field(default_factory=_no_samples)
    cli_create: float = 0.0
    cli_startup: float = 0.0


def bucket_home(home: Home, client: Any, bucket: str) -> Home:
    client.create_bucket(Bucket=bucket)
    return Home(home.root, f"s3://{bucket}/snapshots")


def measure(args: argparse.Namespace, home: Home, work: Path, endpoint: str,
            spark: Any) -> tuple[Figures, Manifest]:
    client = s3_client(endpoint)
    figures = Figures()
    homes = [bucket_home(home, client, f"snapshots-{i}") for i in range(args.repeats)]

    # Both sides start with their S3 client set up: boto3's client is made above, and
    # sparkpoint keeps the one a first listing made for the rest of the process. What a
    # fresh process pays on top is the CLI figure.
    api.snapshot_list(homes[0])
    # Each create is followed by boto3 uploading the same files (read from the job's
    # checkpoint, where the create read them too): the two sides of a ratio run next to each
    # other, under the same load.
    checkpoint = home.checkpoint_dir(JOB)
    client.create_bucket(Bucket="baseline")
    creates, uploads, manifests = [], [], []
    for attempt, store_home in enumerate(homes):
        creates.append(timed(
            lambda h=store_home: manifests.append(api.snapshot_create(h, JOB, "first"))))
        pairs = [(checkpoint / entry.path.removeprefix(f"{CHECKPOINT_SUBDIR}/"),
                  f"up{attempt}/{FILES_DIR}/{blob_name(entry)}") for entry in manifests[0].files]
        uploads.append(timed(lambda p=pairs: boto3_upload(client, "baseline", p)))
        empty_bucket(client, "baseline")
    first = manifests[0]
    figures.create = Timing(tuple(creates))
    figures.upload = Timing(tuple(uploads))
    figures.state_bytes = sum(op.bytes for op in first.operators)
    figures.files = len(first.files)
    store = open_snapshot_store(homes[0])
    assert isinstance(store, ObjectSnapshotStore)

    small_change(args, home, work, spark)
    seconds = []
    for store_home in homes:
        seconds.append(timed(
            lambda h=store_home: manifests.append(api.snapshot_create(h, JOB, "second"))))
    second = manifests[-1]
    figures.second = Timing(tuple(seconds))
    figures.second_added_bytes = second.added_bytes or 0
    first_blobs = {blob_name(entry) for entry in first.files}
    figures.second_files_added = len({blob_name(e) for e in second.files} - first_blobs)

    # Restore: fetch + check into the scratch space; boto3 downloads the same objects.
    restores, downloads = [], []
    fetched = homes[0].scratch_dir / "snapshots"
    for attempt in range(args.repeats):
        shutil.rmtree(fetched, ignore_errors=True)
        restores.append(timed(lambda: store.local_dir(first.name)))
        target = work / f"download-{attempt}"
        pairs = [(f"snapshots/{FILES_DIR}/{blob_name(entry)}", target / entry.path)
                 for entry in first.files]
        downloads.append(timed(lambda p=pairs: boto3_download(client, "snapshots-0", p)))
        shutil.rmtree(target)
    figures.restore = Timing(tuple(restores))
    figures.download = Timing(tuple(downloads))

    cli_home = bucket_home(home, client, "cli")
    assert cli_home.snapshots is not None
    figures.cli_create = timed(lambda: run_cli(
        [sparkpoint_command(), "--home", str(home.root), "--snapshots", cli_home.snapshots,
         "snapshot", "create", JOB, "cli"]))
    figures.cli_startup = timed(lambda: run_cli(
        [sparkpoint_command(), "--home", str(home.root), "--snapshots", cli_home.snapshots,
         "snapshot", "list"]))
    if args.profile:
        profile_create_and_restore(home, client, store, first)
    return figures, first


def sparkpoint_command() -> str:
    beside = Path(sys.executable).parent / "sparkpoint"
    found = str(beside) if beside.is_file() else shutil.which("sparkpoint")
    if found is None:
        raise SystemExit("the sparkpoint command is not installed next to this Python or on PATH")
    return found


def run_cli(command: list[str]) -> None:
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} exited {done.returncode}:\n{done.stderr}")


def profile_create_and_restore(home: Home, client: Any, store: ObjectSnapshotStore,
                               first: Manifest) -> None:
    profiled = bucket_home(home, client, "profiled")
    profile("snapshot create", lambda: api.snapshot_create(profiled, JOB, "profiled"))
    profile("snapshot create, every file in the store already",
            lambda: api.snapshot_create(profiled, JOB, "profiled-again"))
    shutil.rmtree(home.scratch_dir / "snapshots", ignore_errors=True)
    profile("restore (fetch + check)", lambda: store.local_dir(first.name))


def mib(size: int) -> str:
    return f"{size:,} B ({size / 2**20:.1f} MiB)"


def verdict(ok: bool) -> str:
    return "PASS" if ok else "FAIL"


def report(args: argparse.Namespace, figures: Figures, first: Manifest) -> None:
    create_ratio = figures.create.median / figures.upload.median
    incremental_ratio = figures.second.median / figures.create.median
    restore_ratio = figures.restore.median / figures.download.median
    state_ok = figures.state_bytes >= MIN_STATE_BYTES

    def against(value: float, target: float) -> str:
        return f"{value:.2f}  target <= {target}  {verdict(value <= target)}"

    rows = [
        ("keys / value bytes / partitions",
         f"{args.keys:,} / {args.value_bytes} / {args.partitions}"),
        ("state bytes (snapshot operators)",
         f"{mib(figures.state_bytes)}  >= 100 MiB {verdict(state_ok)}"),
        ("snapshot files / bytes", f"{figures.files} / {mib(first.total_bytes)}"),
        ("transfers in flight (both sides)", str(TRANSFER_CONCURRENCY)),
        ("state build s (job until caught up)", f"{figures.build_s:.1f}"),
        ("(a) snapshot create s (median)",
         f"{figures.create.median:.2f}   [{figures.create.describe(2)}]"),
        ("    boto3 parallel upload s (median)",
         f"{figures.upload.median:.2f}   [{figures.upload.describe(2)}]"),
        ("(b) second snapshot s (median)",
         f"{figures.second.median:.2f}   [{figures.second.describe(2)}]"),
        ("    second snapshot uploaded",
         f"{figures.second_files_added} files, {mib(figures.second_added_bytes)}"),
        ("(c) restore (fetch + check) s (median)",
         f"{figures.restore.median:.2f}   [{figures.restore.describe(2)}]"),
        ("    boto3 parallel download s (median)",
         f"{figures.download.median:.2f}   [{figures.download.describe(2)}]"),
        ("CLI snapshot create s (once, new bucket)", f"{figures.cli_create:.2f}"),
        ("CLI start-up s (snapshot list)", f"{figures.cli_startup:.2f}"),
        ("(a) create / boto3 upload", against(create_ratio, CREATE_TARGET)),
        ("(b) second / first snapshot", against(incremental_ratio, INCREMENTAL_TARGET)),
        ("(c) restore / boto3 download", against(restore_ratio, RESTORE_TARGET)),
    ]
    width = max(len(label) for label, _ in rows)
    print()
    print(f"{'metric'.ljust(width)} | value")
    print(f"{'-' * width}-+-{'-' * 44}")
    for label, value in rows:
        print(f"{label.ljust(width)} | {value}")
    passed = (state_ok and create_ratio <= CREATE_TARGET
              and incremental_ratio <= INCREMENTAL_TARGET and restore_ratio <= RESTORE_TARGET)
    print(f"\nOVERALL: {verdict(passed)}", flush=True)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    with work_dir("sparkpoint-s3-bench-", args.keep) as work:
        print(f"work dir {work}: {args.keys:,} keys x {args.value_bytes} B values, "
              f"{args.partitions} shuffle partitions", flush=True)
        with moto_server(work / "moto.log") as endpoint:
            home = Home(work / "home")
            os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
            spark = create_session("local[2]", {"spark.sql.shuffle.partitions":
                                                str(args.partitions),
                                                "spark.driver.memory": "2g"}, "s3-bench")
            try:
                build_s = build_state(args, home, work, spark)
                figures, first = measure(args, home, work, endpoint, spark)
            finally:
                spark.stop()
            figures.build_s = build_s
            report(args, figures, first)
    # A report, not a test: a missed target is printed, not signalled.
    return 0


if __name__ == "__main__":
    sys.exit(main())
