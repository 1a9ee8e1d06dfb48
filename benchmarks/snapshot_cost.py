"""What a snapshot costs next to copying the job's checkpoint with ``cp -r``.

    .venv/bin/python benchmarks/snapshot_cost.py [--keys N] [--partitions P]
        [--provider rocksdb|hdfs] [--repeats R] [--profile] [--keep]

One run builds a stateful job (``groupBy("key").count()`` over N distinct keys read from
parquet files), runs it until it has caught up, then times ``cp -r`` of the checkpoint,
``snapshot create`` (API and CLI) and a restore from the snapshot, and prints one table with
PASS/FAIL against the targets: create and restore within 1.5x of ``cp -r``, the snapshot at
most 5% larger than the state files of the version it holds. It is a report, not a test: it
exits 0 whatever the verdict, and non-zero only when the benchmark itself cannot run.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from timing import Timing  # benchmarks/timing.py, beside this script
from workspace import tree_bytes, work_dir, write_keys

from sparkpoint import api
from sparkpoint.checkpoint.rocksdb_state import HDFS_PROVIDER, ROCKSDB_PROVIDER
from sparkpoint.snapshot.manifest import Manifest
from sparkpoint.snapshot.store import open_snapshot_store
from sparkpoint.spark.session import PROVIDER_CONF, create_session
from sparkpoint.storage.home import Home
from sparkpoint.upgrade.assemble import UsedSnapshot, assemble_checkpoint
from sparkpoint.upgrade.validate import (
    JobShape,
    NewOperator,
    NewSource,
    default_resume_point,
    validate,
)

JOB = "bench"
OPERATOR = "key_counts"
PROVIDERS = {"rocksdb": ROCKSDB_PROVIDER, "hdfs": HDFS_PROVIDER}
# One batch per file, so the checkpoint holds several state versions the way a running job's
# does: cp -r copies all of them, a snapshot only the newest.
FILES = 4
REPEATS = 3
TIME_RATIO_TARGET = 1.5
SIZE_RATIO_TARGET = 1.05

JOB_SOURCE = f'''\
"""Count events per key: one stateful aggregation whose state holds every key seen."""

from pyspark.sql import SparkSession
from pyspark.sql.streaming import DataStreamWriter

import sparkpoint as sp


def build(spark: SparkSession, ctx: sp.JobContext) -> DataStreamWriter:
    events = (
        spark.readStream.name("events")
        .schema("key STRING")
        .option("maxFilesPerTrigger", ctx.param("files_per_batch", "1"))
        .parquet(ctx.require_param("input"))
    )
    counts = ctx.stateful("{OPERATOR}", events.groupBy("key").count())
    # noop keeps the sink out of the measurements; update mode is what it accepts here.
    return counts.writeStream.format("noop").outputMode("update")
'''

_HDFS_STATE_FILE = re.compile(r"^(\d+)\.(delta|snapshot)$")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    parser.add_argument("--keys", type=int, default=1_000_000,
                        help="distinct keys, i.e. rows in the state (default 1000000)")
    parser.add_argument("--partitions", type=int, default=4,
                        help="spark.sql.shuffle.partitions (default 4)")
    parser.add_argument("--provider", choices=sorted(PROVIDERS), default="rocksdb",
                        help="state store provider (default rocksdb)")
    parser.add_argument("--repeats", type=int, default=REPEATS,
                        help=f"timed runs of each operation, median reported (default {REPEATS})")
    parser.add_argument("--profile", action="store_true",
                        help="also run create and restore once more under cProfile")
    parser.add_argument("--keep", action="store_true",
                        help="keep the work directory instead of removing it")
    args = parser.parse_args(argv)
    if args.keys < FILES:
        parser.error(f"--keys must be at least {FILES}")
    if args.partitions < 1:
        parser.error("--partitions must be at least 1")
    if args.repeats < 1:
        parser.error("--repeats must be at least 1")
    return args


def hdfs_version_bytes(state_root: Path, version: int) -> int:
    """Bytes Spark reads to load ``version``: newest snapshot at or below it plus later deltas."""
    total = 0
    for partition_dir in state_root.glob("*/*"):
        if not partition_dir.is_dir() or not partition_dir.name.isdigit():
            continue
        files: dict[tuple[int, str], Path] = {}
        for entry in partition_dir.iterdir():
            match = _HDFS_STATE_FILE.match(entry.name)
            if match:
                files[(int(match.group(1)), match.group(2))] = entry
        base = max((v for v, kind in files if kind == "snapshot" and v <= version), default=0)
        if base:
            total += files[(base, "snapshot")].stat().st_size
        total += sum(
            path.stat().st_size for (v, kind), path in files.items()
            if kind == "delta" and base < v <= version
        )
    return total


def measure(repeats: int, action: Callable[[int], object],
            cleanup: Callable[[int], object] | None = None) -> Timing:
    samples = []
    for attempt in range(repeats):
        # Flush the previous step's dirty pages so a write-back it started is not billed here.
        os.sync()
        start = time.perf_counter()
        action(attempt)
        samples.append(time.perf_counter() - start)
        if cleanup is not None:
            cleanup(attempt)
    return Timing(tuple(samples))


def sparkpoint_command() -> str:
    beside = Path(sys.executable).parent / "sparkpoint"
    found = str(beside) if beside.is_file() else shutil.which("sparkpoint")
    if found is None:
        raise SystemExit("the sparkpoint command is not installed next to this Python or on PATH")
    return found


def run_command(command: list[str]) -> float:
    os.sync()
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(
            f"{' '.join(command)} exited {done.returncode}:\n{done.stdout}{done.stderr}"
        )
    return elapsed


def profile(label: str, action: Callable[[], object]) -> None:
    profiler = cProfile.Profile()
    profiler.enable()
    action()
    profiler.disable()
    # cProfile sees only this thread: work done in copy pools shows up as lock waits.
    print(f"\n--- cProfile of {label}, main thread, top 20 by cumulative time", flush=True)
    pstats.Stats(profiler, stream=sys.stdout).sort_stats("cumulative").print_stats(20)
    print(f"--- cProfile of {label}, top 12 by own time", flush=True)
    pstats.Stats(profiler, stream=sys.stdout).sort_stats("tottime").print_stats(12)


def mib(size: int) -> str:
    return f"{size:,} B ({size / 2**20:.1f} MiB)"


def verdict(ok: bool) -> str:
    return "PASS" if ok else "FAIL"


def print_table(rows: list[tuple[str, str]]) -> None:
    width = max(len(label) for label, _ in rows)
    print()
    print(f"{'metric'.ljust(width)} | value")
    print(f"{'-' * width}-+-{'-' * 40}")
    for label, value in rows:
        print(f"{label.ljust(width)} | {value}")
    print(flush=True)


@dataclass(frozen=True)
class JobRun:
    jvm_start: float
    seconds: float
    batches: int


@dataclass(frozen=True)
class Costs:
    cp: Timing
    create: Timing
    restore: Timing
    cli_create: float
    cli_startup: float


def run_job(args: argparse.Namespace, home: Home, work: Path) -> JobRun:
    events = work / "events"
    job_file = work / "bench_job.py"
    job_file.write_text(JOB_SOURCE)
    write_keys(events, args.keys, FILES)
    partitions = str(args.partitions)

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    start = time.perf_counter()
    # The HDFS provider keeps whole state versions on the heap: give it room for 1M keys.
    spark = create_session("local[2]", {"spark.sql.shuffle.partitions": partitions,
                                        "spark.driver.memory": "2g"}, "bench")
    jvm_start = time.perf_counter() - start

    start = time.perf_counter()
    result = api.run(
        home, job_file, JOB, params={"input": str(events), "files_per_batch": "1"},
        conf={"spark.sql.shuffle.partitions": partitions,
              PROVIDER_CONF: PROVIDERS[args.provider]},
        until_caught_up=True, spark=spark,
    )
    seconds = time.perf_counter() - start
    # Stopped so that no state store maintenance can touch the checkpoint while it is copied.
    spark.stop()
    print(f"job ran {result.batches_run} batches (last {result.last_batch}) in {seconds:.1f}s",
          flush=True)
    return JobRun(jvm_start, seconds, result.batches_run)


def measure_costs(home: Home, work: Path, repeats: int) -> tuple[Costs, Manifest]:
    checkpoint = home.checkpoint_dir(JOB)
    copies = work / "copies"
    copies.mkdir()
    cp = measure(
        repeats,
        lambda i: subprocess.run(["cp", "-r", str(checkpoint), str(copies / f"cp-{i}")],
                                 check=True),
        lambda i: shutil.rmtree(copies / f"cp-{i}"),
    )

    manifests: list[Manifest] = []
    create = measure(repeats,
                     lambda i: manifests.append(api.snapshot_create(home, JOB, f"snap{i}")))
    manifest = manifests[0]
    snapshot_dir = open_snapshot_store(home).local_dir(manifest.name)
    restores = work / "restores"
    store = open_snapshot_store(home)

    def restore_once(i: int) -> None:
        # What `run --from-snapshot` does before Spark starts: verify, then build.
        problems = store.verify(manifest.name)
        if problems:
            raise SystemExit(f"snapshot {manifest.name} failed verification: {problems[0]}")
        build_checkpoint(snapshot_dir, manifest, restores / f"restore-{i}" / "checkpoint")

    restore = measure(repeats, restore_once, lambda i: shutil.rmtree(restores / f"restore-{i}"))

    command = [sparkpoint_command(), "--home", str(home.root), "snapshot"]
    cli_create = run_command([*command, "create", JOB, "cli1"])
    # The same process start-up and imports with next to no work: what the CLI adds.
    cli_startup = run_command([*command, "list"])
    return Costs(cp, create, restore, cli_create, cli_startup), manifest


def report(args: argparse.Namespace, home: Home, job: JobRun, costs: Costs,
           manifest: Manifest) -> None:
    checkpoint = home.checkpoint_dir(JOB)
    checkpoint_bytes = tree_bytes(checkpoint)
    state_bytes = tree_bytes(checkpoint / "state")
    snapshot_bytes = manifest.total_bytes
    operator_bytes = sum(op.bytes for op in manifest.operators)
    version = manifest.batch_id + 1
    if args.provider == "hdfs":
        # Computed here from the checkpoint: the snapshot file and deltas Spark replays.
        version_bytes = hdfs_version_bytes(checkpoint / "state", version)
        version_what = f"snapshot + deltas Spark loads for version {version}"
    else:
        version_bytes = operator_bytes
        version_what = f"zip + listed SSTs of version {version}"
    rows_known = all(op.rows is not None for op in manifest.operators)
    rows_total = sum(op.rows or 0 for op in manifest.operators)
    rows_ok = rows_known and rows_total == args.keys and manifest.operator(OPERATOR) is not None

    create_ratio = costs.create.median / costs.cp.median
    restore_ratio = costs.restore.median / costs.cp.median
    size_ratio = snapshot_bytes / version_bytes if version_bytes else float("inf")

    def against(value: float, target: float, digits: int) -> str:
        return f"{value:.{digits}f}  target <= {target}  {verdict(value <= target)}"

    print_table([
        ("keys", f"{args.keys:,}"),
        ("provider", args.provider),
        ("shuffle partitions", str(args.partitions)),
        ("batches / snapshot batch", f"{job.batches} / {manifest.batch_id}"),
        ("state bytes (checkpoint state/)", mib(state_bytes)),
        ("checkpoint bytes", mib(checkpoint_bytes)),
        ("snapshot bytes (manifest total)", mib(snapshot_bytes)),
        ("operator bytes (manifest)", mib(operator_bytes)),
        ("version state bytes", f"{mib(version_bytes)}: {version_what}"),
        ("JVM start s (create_session)", f"{job.jvm_start:.2f}"),
        ("job run s (until caught up)", f"{job.seconds:.2f}"),
        ("cp -r s (median)", f"{costs.cp.median:.3f}   [{costs.cp.describe()}]"),
        ("create s (median, API)", f"{costs.create.median:.3f}   [{costs.create.describe()}]"),
        ("restore s (verify+build)", f"{costs.restore.median:.3f}   [{costs.restore.describe()}]"),
        ("CLI snapshot create s (once)", f"{costs.cli_create:.3f}"),
        ("CLI start-up s (snapshot list)", f"{costs.cli_startup:.3f}"),
        ("create / cp", against(create_ratio, TIME_RATIO_TARGET, 2)),
        ("restore / cp", against(restore_ratio, TIME_RATIO_TARGET, 2)),
        ("snapshot / version state bytes", against(size_ratio, SIZE_RATIO_TARGET, 3)),
        ("snapshot / checkpoint bytes", f"{snapshot_bytes / checkpoint_bytes:.3f}"),
        ("manifest rows == keys", f"{rows_total if rows_known else 'unknown'} vs "
                                  f"{args.keys}  {verdict(rows_ok)}"),
    ])
    passed = (create_ratio <= TIME_RATIO_TARGET and restore_ratio <= TIME_RATIO_TARGET
              and size_ratio <= SIZE_RATIO_TARGET and rows_ok)
    print(f"OVERALL: {verdict(passed)}", flush=True)


def build_checkpoint(snapshot_dir: Path, manifest: Manifest, target: Path) -> None:
    """The file work of `run --from-snapshot` for the unchanged job: plan, then assemble.

    The job's shape is taken from the manifest itself (the unchanged job has the same
    operators), so no JVM is involved; Spark's restart check is not part of this figure.
    """
    shape = JobShape(
        tuple(NewSource(source.name) for source in manifest.sources),
        tuple(NewOperator(op.name, op.operator_id, op.spark_operator_name)
              for op in manifest.operators),
    )
    plan = validate(shape, default_resume_point(shape, manifest.name, manifest),
                    {manifest.name: manifest})
    assert plan.ok, plan.problems
    assemble_checkpoint(target, plan, {manifest.name: UsedSnapshot(manifest, snapshot_dir)}, {},
                        lambda _dir, _version: None)


def profile_costs(home: Home, work: Path, manifest: Manifest) -> None:
    profile("snapshot_create", lambda: api.snapshot_create(home, JOB, "profiled"))
    profile("build_checkpoint", lambda: build_checkpoint(
        open_snapshot_store(home).local_dir(manifest.name), manifest,
        work / "profiled" / "checkpoint"))


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    with work_dir("sparkpoint-bench-", args.keep) as work:
        print(f"work dir {work}: {args.keys:,} keys, provider {args.provider}, "
              f"{args.partitions} shuffle partitions", flush=True)
        home = Home(work / "home")
        job = run_job(args, home, work)
        costs, manifest = measure_costs(home, work, args.repeats)
        report(args, home, job, costs, manifest)
        if args.profile:
            profile_costs(home, work, manifest)
    # A report, not a test: a missed target is printed, not signalled.
    return 0


if __name__ == "__main__":
    sys.exit(main())
