"""sparkpoint's heavy commands on production-size state, against baselines measured in the
same run.

    .venv/bin/python benchmarks/scale.py [--keys N] [--partitions P] [--providers rocksdb,hdfs]
                                         [--driver-memory 8g] [--keep] [--only migration]

For each state store provider, a real Spark job (``groupBy("key").count()`` over N distinct
keys in parquet, two batches, P shuffle partitions; defaults 10,000,000 and 200) builds the
state through ``sparkpoint run``. Then, in this one Python process (a warm JVM, as a
long-lived driver would be):

- ``snapshot create`` against ``cp -r`` of the job's checkpoint;
- ``snapshot inspect`` (keys per second);
- ``snapshot prune`` of half of the keys (removed keys per second) against Spark's state
  reader counting those keys per partition (the read every prune does);
- a start from the snapshot (``run --from-snapshot``, no new input) against ``cp -r`` of the
  snapshot's files back;
- the same start into 64 partitions (repartitioning: keys per second over the whole start);
- ``snapshot import`` of the job's checkpoint against ``plan`` of the same job from its
  snapshot;
- a state migration: a job counting the keys by an int id, snapshotted, started as a version
  whose id is a bigint and which adds ``sum(id)`` (the key widened, rehashed to its new
  partitions; an aggregate added), against Spark's state reader reading the same state
  (every key counted per partition) in the same run, each measured twice and the faster
  kept;
- ``rehearse`` of the job from its snapshot against the job itself, after the job ran
  ``REHEARSED`` more batches of new keys (each a file of N/8 keys): the rehearsal replays
  them in scratch space, against the job's own run of those batches;
- ``sparkpoint jobs list`` over 50 jobs (the CLI in its own process) against the CLI's own
  start (``--help``).

It prints keys, bytes, seconds, keys per second, the baseline and the ratio where there is
one, the target and a verdict, and the peak memory (resident set) of this Python process so
far, which runs every command: the JVM's memory is not sparkpoint's. A report, not a test:
it exits 0 whatever the verdict.
"""

from __future__ import annotations

import argparse
import functools
import resource
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from workspace import tree_bytes, work_dir, write_keys  # benchmarks/, beside this script

from sparkpoint import api
from sparkpoint.checkpoint.rocksdb_state import HDFS_PROVIDER, ROCKSDB_PROVIDER
from sparkpoint.spark.session import PROVIDER_CONF, create_session
from sparkpoint.storage.home import Home

PROVIDERS = {"rocksdb": ROCKSDB_PROVIDER, "hdfs": HDFS_PROVIDER}
OPERATOR = "key_counts"
FILES = 8
SHUFFLE_CONF = "spark.sql.shuffle.partitions"
REPARTITION_TO = 64
REHEARSED = 5
JOBS_LISTED = 50
MEASURED_TWICE = 2
ID_JOB_SOURCE = f'''\
"""Count events per numeric id (``id_type`` INT, or BIGINT with a sum of the ids added)."""

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

import sparkpoint as sp


def build(spark: SparkSession, ctx: sp.JobContext):
    events = (spark.readStream.name("events").schema("key STRING")
              .option("maxFilesPerTrigger", ctx.param("files_per_batch", "{FILES // 2}"))
              .parquet(ctx.require_param("input")))
    kind = ctx.param("id_type", "INT")
    ids = events.select(F.expr(f"CAST(substr(key, 2) AS {{kind}})").alias("id"))
    measures = [F.count("*").alias("count")]
    if kind == "BIGINT":
        measures.append(F.sum("id").alias("total"))
    counts = ctx.stateful("{OPERATOR}", ids.groupBy("id").agg(*measures))
    return counts.writeStream.format("noop").outputMode("update")
'''
JOB_SOURCE = f'''\
"""Count events per key: one aggregation whose state holds every key seen."""

from pyspark.sql import SparkSession

import sparkpoint as sp


def build(spark: SparkSession, ctx: sp.JobContext):
    events = (spark.readStream.name("events").schema("key STRING")
              .option("maxFilesPerTrigger", ctx.param("files_per_batch", "{FILES // 2}"))
              .parquet(ctx.require_param("input")))
    counts = ctx.stateful("{OPERATOR}", events.groupBy("key").count())
    return counts.writeStream.format("noop").outputMode("update")
'''


@dataclass(frozen=True)
class Row:
    operation: str
    keys: int
    bytes: int
    seconds: float
    baseline: float | None = None
    target: str = ""
    passed: bool | None = None
    peak_mb: float = 0.0

    def line(self) -> str:
        rate = f"{self.keys / self.seconds:>12,.0f}" if self.seconds > 0 else " " * 12
        ratio = f"{self.seconds / self.baseline:6.2f}" if self.baseline else "     -"
        base = f"{self.baseline:8.2f}" if self.baseline is not None else "       -"
        verdict = {None: "", True: "PASS", False: "FAIL"}[self.passed]
        return (f"{self.operation:<34} {self.keys:>11,} {self.bytes / 2**20:>9.1f} "
                f"{self.seconds:>8.2f} {rate} {base} {ratio}  {self.target:<16} {verdict:<4} "
                f"{self.peak_mb:>7.0f}")


HEADER = (f"{'operation':<34} {'keys':>11} {'MiB':>9} {'seconds':>8} {'keys/s':>12} "
          f"{'baseline':>8} {'ratio':>6}  {'target':<16} {'':<4} {'peak MB':>7}")


def peak_mb() -> float:
    """The most memory (resident set) this Python process has held so far, in MB."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def timed(action: Callable[[], object]) -> float:
    started = time.perf_counter()
    action()
    return time.perf_counter() - started


def copy_tree(source: Path, target: Path) -> float:
    """Seconds ``cp -r`` takes, with the copy's pages written out (a snapshot's are too)."""
    return timed(lambda: subprocess.run(["cp", "-r", str(source), str(target)], check=True))


def measure(provider: str, keys: int, partitions: int, work: Path, spark: object) -> list[Row]:
    work.mkdir(parents=True)
    home = Home(work / "home")
    job = work / "job.py"
    job.write_text(JOB_SOURCE)
    inputs = work / "in"
    write_keys(inputs, keys, FILES)
    params = {"input": str(inputs)}
    conf = {PROVIDER_CONF: PROVIDERS[provider], SHUFFLE_CONF: str(partitions)}
    name = f"scale-{provider}"
    built = timed(lambda: api.run(home, job, name, params=params, conf=conf,
                                  until_caught_up=True, spark=spark))  # type: ignore[arg-type]
    checkpoint = home.checkpoint_dir(name)
    assert isinstance(checkpoint, Path)  # a home on local disk
    rows = [Row(f"{provider}: build (Spark job)", keys, tree_bytes(checkpoint), built,
                peak_mb=peak_mb())]

    cp = copy_tree(checkpoint, work / "cp-checkpoint")
    created = timed(lambda: api.snapshot_create(home, name, "full"))
    manifest = api.snapshot_show(home, "full")
    op = manifest.operator(OPERATOR)
    assert op is not None and op.rows == keys, (op, keys)
    target = "<= 1.5x cp -r" if provider == "hdfs" else "(S3: <= 1.2x)"
    rows.append(Row(f"{provider}: snapshot create", keys, manifest.total_bytes, created, cp,
                    target, created / cp <= 1.5 if provider == "hdfs" else None, peak_mb()))

    inspected = timed(lambda: api.snapshot_inspect(home, "full"))
    rows.append(Row(f"{provider}: snapshot inspect", keys, op.bytes, inspected, None,
                    ">= 1M keys/s", keys / inspected >= 1_000_000, peak_mb()))

    half = f"k{keys // 2:010d}"
    condition = f"key < '{half}'"
    # Every prune reads the whole state with Spark's state reader to find the keys: that
    # read alone (counted per partition, nothing written) is its baseline, so the ratio is
    # what sparkpoint adds to Spark's own work.
    read = timed(lambda: spark.read.format("statestore")  # type: ignore[attr-defined]
                 .option("batchId", manifest.batch_id).option("operatorId", op.operator_id)
                 .load(str(checkpoint)).filter(f"key.{condition}")
                 .groupBy("partition_id").count().collect())
    result = None

    def prune() -> None:
        nonlocal result
        result = api.snapshot_prune(home, "full", "half", OPERATOR, condition,
                                    spark=spark)  # type: ignore[arg-type]

    pruned = timed(prune)
    assert result is not None and result.rows_removed == keys // 2, result
    rows.append(Row(f"{provider}: prune half ({result.rewritten_by})", result.rows_removed,
                    op.bytes, pruned, read, ">= 200k keys/s",
                    result.rows_removed / pruned >= 200_000, peak_mb()))

    back = copy_tree(home.snapshots_dir / "full", work / "cp-snapshot")
    started = timed(lambda: api.run(home, job, "restored", params=params, conf=conf,
                                    from_snapshot="full", until_caught_up=True,
                                    spark=spark))  # type: ignore[arg-type]
    rows.append(Row(f"{provider}: start from snapshot", keys, manifest.total_bytes, started,
                    back, "(vs cp -r back)", None, peak_mb()))

    moved = timed(lambda: api.run(home, job, "repartitioned", params=params,
                                  conf={**conf, SHUFFLE_CONF: str(REPARTITION_TO)},
                                  from_snapshot="full", until_caught_up=True,
                                  spark=spark))  # type: ignore[arg-type]
    rows.append(Row(f"{provider}: start into {REPARTITION_TO} parts", keys,
                    manifest.total_bytes, moved, None, ">= 1M keys/s",
                    keys / moved >= 1_000_000, peak_mb()))

    planned = timed(lambda: api.plan(home, job, params=params, conf=conf, from_snapshot="full",
                                     spark=spark))  # type: ignore[arg-type]
    imported = timed(lambda: api.snapshot_import(
        home, checkpoint, "imported", job, params=params, conf=conf,
        spark=spark))  # type: ignore[arg-type]
    rows.append(Row(f"{provider}: snapshot import", keys, manifest.total_bytes, imported,
                    planned, "<= 2x plan", imported / planned <= 2, peak_mb()))

    rows.append(_migration(provider, keys, work, conf, params, spark))

    # The job runs REHEARSED more batches (a file of new keys each); the rehearsal replays
    # them from the snapshot taken before.
    write_keys(inputs, keys // FILES * REHEARSED, REHEARSED, first=keys)
    ran = timed(lambda: api.run(home, job, name, params={**params, "files_per_batch": "1"},
                                conf=conf, until_caught_up=True,
                                spark=spark))  # type: ignore[arg-type]
    rehearsal = None

    def rehearse() -> None:
        nonlocal rehearsal
        rehearsal = api.rehearse(home, job, name, from_snapshot="full",
                                 spark=spark)  # type: ignore[arg-type]

    rehearsed = timed(rehearse)
    assert rehearsal is not None
    first, last = rehearsal.batches
    assert last - first + 1 == REHEARSED, rehearsal.batches
    rows.append(Row(f"{provider}: rehearse {REHEARSED} batches", keys // FILES * REHEARSED,
                    manifest.total_bytes, rehearsed, ran, "(vs running them)", None,
                    peak_mb()))

    # jobs list over JOBS_LISTED jobs (this one, the two started from its snapshot, and small
    # ones), as a user runs it: the CLI in its own process, against the CLI's own start.
    tiny = work / "tiny"
    write_keys(tiny, FILES, FILES)
    small = {PROVIDER_CONF: PROVIDERS[provider], SHUFFLE_CONF: "2"}
    for index in range(JOBS_LISTED - len(api.jobs_list(home))):
        api.run(home, job, f"small-{index}", params={"input": str(tiny)}, conf=small,
                until_caught_up=True, spark=spark)  # type: ignore[arg-type]
    cli = [sys.executable, "-m", "sparkpoint.cli.main", "--home", str(home.location)]
    bare = timed(lambda: subprocess.run([*cli, "--help"], check=True, capture_output=True))
    listed = timed(lambda: subprocess.run([*cli, "jobs", "list"], check=True,
                                          capture_output=True))
    rows.append(Row(f"{provider}: jobs list ({JOBS_LISTED} jobs)", 0, 0, listed, bare,
                    "(vs CLI --help)", None, peak_mb()))
    return rows


def _migration(provider: str, keys: int, work: Path, conf: dict[str, str],
               params: dict[str, str], spark: object) -> Row:
    """The id job run and snapshotted, then started as its widened, grown version."""
    home = Home(work / "migration-home")
    job = work / "ids.py"
    job.write_text(ID_JOB_SOURCE)
    api.run(home, job, "ids", params={**params, "id_type": "INT"}, conf=conf,
            until_caught_up=True, spark=spark)  # type: ignore[arg-type]
    manifest = api.snapshot_create(home, "ids", "ints")
    op = manifest.operator(OPERATOR)
    assert op is not None and op.rows == keys, (op, keys)
    checkpoint = home.checkpoint_dir("ids")
    # Each measured twice, read and migration in turn, and the faster of the two kept:
    # single runs of either varied by a quarter from one to the next.
    reads, migrations = [], []
    for attempt in range(MEASURED_TWICE):
        reads.append(timed(lambda: spark.read.format("statestore")  # type: ignore[attr-defined]
                           .option("batchId", manifest.batch_id)
                           .option("operatorId", op.operator_id)
                           .load(str(checkpoint)).groupBy("partition_id").count().collect()))
        name = f"bigints-{attempt}"
        migrations.append(timed(functools.partial(
            api.run, home, job, name, params={**params, "id_type": "BIGINT"}, conf=conf,
            from_snapshot="ints", until_caught_up=True, spark=spark)))
    read, migrated = min(reads), min(migrations)
    return Row(f"{provider}: migrate (widen, add sum)", keys, op.bytes, migrated, read,
               "<= 2x Spark's read", migrated / read <= 2, peak_mb())


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    parser.add_argument("--keys", type=int, default=10_000_000)
    parser.add_argument("--partitions", type=int, default=200)
    parser.add_argument("--providers", default="rocksdb,hdfs")
    parser.add_argument("--driver-memory", default="8g",
                        help="the JVM's heap (the HDFS provider holds its state there)")
    parser.add_argument("--keep", action="store_true")
    parser.add_argument("--only", choices=["migration"],
                        help="measure the state migration alone")
    args = parser.parse_args(argv)
    providers = [p for p in args.providers.split(",") if p]
    unknown = set(providers) - set(PROVIDERS)
    if unknown:
        parser.error(f"--providers: expected some of {', '.join(PROVIDERS)}, found {unknown}")
    with work_dir("sparkpoint-scale-", args.keep) as work:
        spark = create_session("local[2]", {"spark.driver.memory": args.driver_memory}, "scale")
        print(f"{args.keys:,} keys, {args.partitions} partitions, work dir {work}", flush=True)
        print(HEADER, flush=True)
        for provider in providers:
            if args.only == "migration":
                inputs = work / provider / "in"
                write_keys(inputs, args.keys, FILES)
                conf = {PROVIDER_CONF: PROVIDERS[provider], SHUFFLE_CONF: str(args.partitions)}
                print(_migration(provider, args.keys, work / provider, conf,
                                 {"input": str(inputs)}, spark).line(), flush=True)
                continue
            for row in measure(provider, args.keys, args.partitions, work / provider, spark):
                print(row.line(), flush=True)

if __name__ == "__main__":
    main()
