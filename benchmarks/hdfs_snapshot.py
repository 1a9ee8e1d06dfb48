"""What ``snapshot create`` costs on HDFS-provider state next to ``cp -r`` of the same files.

    .venv/bin/python benchmarks/hdfs_snapshot.py [--keys N] [--batches B] [--partitions P]
        [--repeats R] [--maintenance] [--keep] [--reuse DIR]

One run builds HDFS-provider state the way a long-running job leaves it: a
``groupBy("key").count()`` job reads B parquet files, one per batch; each file brings N/B new
keys and revisits as many keys seen before, so every partition holds a chain of B deltas
(maintenance, which would write snapshot files, is held off unless ``--maintenance``). Then,
in the same run, it times ``cp -r`` of the files Spark reads to load the committed state (the
newest snapshot file at or below the version, the deltas after it, and the logs and metadata
a snapshot holds), ``sparkpoint snapshot create`` as a command and ``snapshot_create``
in-process, and prints one table with the ratios against the target (create / cp at most
1.5). The command's figure includes its Python start-up, shown on its own as ``snapshot
list``. It is a report, not a test: it exits 0 whatever the verdict.
"""

from __future__ import annotations

import argparse
import functools
import os
import random
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from sparkpoint import api
from sparkpoint.checkpoint.rocksdb_state import HDFS_PROVIDER
from sparkpoint.snapshot.manifest import Manifest
from sparkpoint.spark.session import PROVIDER_CONF, create_session
from sparkpoint.storage.home import Home

JOB = "bench"
OPERATOR = "key_counts"
TARGET = 1.5
MAINTENANCE_CONF = "spark.sql.streaming.stateStore.maintenanceInterval"
_STATE_FILE = re.compile(r"^(\d+)\.(delta|snapshot)$")

JOB_SOURCE = f'''\
"""Count events per key: one stateful aggregation whose state holds every key seen."""

from pyspark.sql import SparkSession
from pyspark.sql.streaming import DataStreamWriter

import sparkpoint as sp


def build(spark: SparkSession, ctx: sp.JobContext) -> DataStreamWriter:
    events = (
        spark.readStream.name("events")
        .schema("key STRING")
        .option("maxFilesPerTrigger", "1")
        .parquet(ctx.require_param("input"))
    )
    counts = ctx.stateful("{OPERATOR}", events.groupBy("key").count())
    return counts.writeStream.format("noop").outputMode("update")
'''


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    parser.add_argument("--keys", type=int, default=300_000, help="distinct keys (300000)")
    parser.add_argument("--batches", type=int, default=30, help="batches, one file each (30)")
    parser.add_argument("--partitions", type=int, default=8, help="shuffle partitions (8)")
    parser.add_argument("--repeats", type=int, default=5, help="timed runs, median shown (5)")
    parser.add_argument("--maintenance", action="store_true",
                        help="let Spark's state maintenance write snapshot files every 60 s "
                             "(default: off, so every partition keeps its whole delta chain)")
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    parser.add_argument("--reuse", type=Path, metavar="DIR",
                        help="time again on the state a --keep run left in DIR (no job run)")
    args = parser.parse_args(argv)
    if args.batches < 2 or args.keys < args.batches:
        parser.error("need at least 2 batches and as many keys as batches")
    return args


def write_events(directory: Path, keys: int, batches: int) -> None:
    """File i holds keys [i*K/B, (i+1)*K/B) and as many revisits of earlier keys."""
    directory.mkdir(parents=True)
    rng = random.Random(7)
    for index in range(batches):
        start, end = keys * index // batches, keys * (index + 1) // batches
        revisits = [rng.randrange(start) for _ in range(end - start)] if start else []
        names = [f"k{n:010d}" for n in [*range(start, end), *revisits]]
        pq.write_table(pa.table({"key": pa.array(names)}),
                       directory / f"part-{index:04d}.parquet")


def files_spark_reads(checkpoint: Path, batch: int) -> list[Path]:
    """What restarting from ``batch`` needs, chosen here independently of sparkpoint's code."""
    version = batch + 1
    chosen = [checkpoint / "metadata", checkpoint / "commits" / str(batch)]
    chosen += [checkpoint / "offsets" / str(b) for b in (batch - 1, batch)
               if (checkpoint / "offsets" / str(b)).is_file()]
    chosen += [p for p in (checkpoint / "sources").rglob("*") if p.is_file()]
    for path in (checkpoint / "state").rglob("_metadata/*"):
        if path.is_file() and not path.name.startswith("."):
            chosen.append(path)
    for directory in {p.parent for p in (checkpoint / "state").rglob("*.delta")}:
        found = {}
        for entry in directory.iterdir():
            match = _STATE_FILE.match(entry.name)
            if match:
                found[(int(match.group(1)), match.group(2))] = entry
        base = max((v for v, kind in found if kind == "snapshot" and v <= version), default=0)
        if base:
            chosen.append(found[(base, "snapshot")])
        chosen += [found[(v, "delta")] for v in range(base + 1, version + 1)]
    return chosen


def link_tree(checkpoint: Path, files: list[Path], target: Path) -> None:
    for path in files:
        out = target / path.relative_to(checkpoint)
        out.parent.mkdir(parents=True, exist_ok=True)
        os.link(path, out)


@dataclass(frozen=True)
class Sample:
    wall: float
    # CPU seconds (user + system) of this process and its children: on a machine shared
    # with other work the wall clock also counts time spent waiting for a core.
    cpu: float


def timed(action: Callable[[], object]) -> Sample:
    # Dirty pages of the previous step are flushed so that their write-back is not billed here.
    os.sync()
    before = _cpu_seconds()
    start = time.perf_counter()
    action()
    return Sample(time.perf_counter() - start, _cpu_seconds() - before)


def _cpu_seconds() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


@dataclass(frozen=True)
class Timing:
    samples: list[Sample]

    @property
    def wall(self) -> float:
        return statistics.median(s.wall for s in self.samples)

    @property
    def cpu(self) -> float:
        return statistics.median(s.cpu for s in self.samples)

    def describe(self) -> str:
        walls = " ".join(f"{s.wall:.3f}" for s in self.samples)
        return f"{self.wall:.3f}  cpu {self.cpu:.3f}  [{walls}]"


def median_of(repeats: int, action: Callable[[int], object]) -> Timing:
    return Timing([timed(functools.partial(action, i)) for i in range(repeats)])


def run_cli(*args: str) -> None:
    command = Path(sys.executable).parent / "sparkpoint"
    done = subprocess.run([str(command), *args], capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"sparkpoint {' '.join(args)} exited {done.returncode}:\n"
                         f"{done.stdout}{done.stderr}")


def build_state(args: argparse.Namespace, home: Home, work: Path) -> float:
    events = work / "events"
    write_events(events, args.keys, args.batches)
    job_file = work / "bench_job.py"
    job_file.write_text(JOB_SOURCE)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    partitions = str(args.partitions)
    spark = create_session("local[2]", {"spark.sql.shuffle.partitions": partitions,
                                        "spark.driver.memory": "2g"}, "bench")
    start = time.perf_counter()
    conf = {"spark.sql.shuffle.partitions": partitions, PROVIDER_CONF: HDFS_PROVIDER}
    if not args.maintenance:
        conf[MAINTENANCE_CONF] = "1h"
    result = api.run(home, job_file, JOB, params={"input": str(events)}, conf=conf,
                     until_caught_up=True, spark=spark)
    seconds = time.perf_counter() - start
    # Stopped so that no maintenance task writes or deletes state files while they are timed.
    spark.stop()
    print(f"job ran {result.batches_run} batches in {seconds:.1f}s", flush=True)
    return seconds


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    work = args.reuse or Path(tempfile.mkdtemp(prefix="sparkpoint-hdfs-bench-"))
    print(f"work dir {work}: {args.keys:,} keys over {args.batches} batches, "
          f"{args.partitions} shuffle partitions", flush=True)
    try:
        home = Home(work / "home")
        build_seconds = 0.0 if args.reuse else build_state(args, home, work)
        checkpoint = home.checkpoint_dir(JOB)
        batch = max(int(p.name) for p in (checkpoint / "commits").iterdir() if p.name.isdigit())
        files = files_spark_reads(checkpoint, batch)
        same = work / "same-files"
        if not same.is_dir():
            link_tree(checkpoint, files, same)
        state_files = [p for p in files if _STATE_FILE.match(p.name)]
        state_bytes = sum(p.stat().st_size for p in state_files)
        run = f"r{int(time.time())}"
        copies = work / f"copies-{run}"
        copies.mkdir()

        def cp(i: int) -> None:
            subprocess.run(["cp", "-r", str(same), str(copies / f"cp-{i}")], check=True)

        cp_t = median_of(args.repeats, cp)
        home_arg = ["--home", str(home.root)]
        cli_t = median_of(args.repeats,
                          lambda i: run_cli(*home_arg, "snapshot", "create", JOB, f"{run}-cli{i}"))
        manifests: list[Manifest] = []
        api_t = median_of(args.repeats, lambda i: manifests.append(
            api.snapshot_create(home, JOB, f"{run}-api{i}")))
        startup_t = median_of(args.repeats, lambda i: run_cli(*home_arg, "snapshot", "list"))
        verify_t = timed(lambda: run_cli(*home_arg, "snapshot", "verify", f"{run}-cli0"))
        manifest = manifests[0]
        rows = sum(op.rows or 0 for op in manifest.operators)
        rows_known = all(op.rows is not None for op in manifest.operators)

        def against(ratio: float) -> str:
            return f"{ratio:.2f}  target <= {TARGET}  {'PASS' if ratio <= TARGET else 'FAIL'}"

        table = [
            ("keys / batches / partitions", f"{args.keys:,} / {args.batches} / {args.partitions}"),
            ("state build s (job run)", f"{build_seconds:.1f}"),
            ("files Spark reads (state files)", f"{len(files)} ({len(state_files)})"),
            ("state files bytes", f"{state_bytes:,} ({state_bytes / 2**20:.1f} MiB)"),
            ("snapshot files / bytes", f"{len(manifest.files)} / {manifest.total_bytes:,}"),
            ("cp -r s (median)", cp_t.describe()),
            ("snapshot create CLI s", cli_t.describe()),
            ("snapshot create API s", api_t.describe()),
            ("CLI start-up s (snapshot list)", startup_t.describe()),
            ("snapshot verify CLI s", f"{verify_t.wall:.3f}  cpu {verify_t.cpu:.3f}"),
            ("CLI create / cp", against(cli_t.wall / cp_t.wall)),
            ("API create / cp", against(api_t.wall / cp_t.wall)),
            ("(CLI create - start-up) / cp", f"{(cli_t.wall - startup_t.wall) / cp_t.wall:.2f}"),
            ("CPU: CLI create / cp", f"{cli_t.cpu / cp_t.cpu:.2f}"),
            ("CPU: API create / cp", f"{api_t.cpu / cp_t.cpu:.2f}"),
            ("CPU: (CLI create - start-up) / cp",
             f"{(cli_t.cpu - startup_t.cpu) / cp_t.cpu:.2f}"),
            ("manifest rows == keys", f"{rows if rows_known else 'unknown'} vs {args.keys:,}  "
                                      + ("PASS" if rows_known and rows == args.keys else "FAIL")),
        ]
        width = max(len(label) for label, _ in table)
        print()
        for label, value in table:
            print(f"{label.ljust(width)} | {value}")
        print(flush=True)
    finally:
        if args.keep or args.reuse:
            print(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
