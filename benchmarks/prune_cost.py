"""What ``snapshot prune`` costs: time to remove a share of an aggregation's keys.

    .venv/bin/python benchmarks/prune_cost.py [--keys N] [--share F] [--partitions P]
        [--provider rocksdb|hdfs] [--keep]

Builds a ``groupBy("key").count()`` job over N distinct keys (one parquet file, one batch),
snapshots it, and times ``api.snapshot_prune`` (in a warm JVM) removing the first F of the
keys (``key < 'k...'``, evaluated by Spark): first with Spark's rewrite writing through
Hadoop's own local file system (the baseline), then through sparkpoint's (spark/local_fs.py).
Prints each time, keys removed per second, their ratio, rows and the operator's bytes before
and after. A report, not a test: it exits 0.
"""

from __future__ import annotations

import argparse
import time

from workspace import work_dir, write_keys  # benchmarks/, beside this script

from sparkpoint import api
from sparkpoint.checkpoint.rocksdb_state import HDFS_PROVIDER, ROCKSDB_PROVIDER
from sparkpoint.spark import local_fs
from sparkpoint.spark.session import PROVIDER_CONF, create_session
from sparkpoint.storage.home import Home

PROVIDERS = {"rocksdb": ROCKSDB_PROVIDER, "hdfs": HDFS_PROVIDER}
OPERATOR = "key_counts"
JOB_SOURCE = f'''\
"""Count events per key: one aggregation whose state holds every key seen."""

from pyspark.sql import SparkSession

import sparkpoint as sp


def build(spark: SparkSession, ctx: sp.JobContext):
    events = spark.readStream.name("events").schema("key STRING").parquet(
        ctx.require_param("input"))
    counts = ctx.stateful("{OPERATOR}", events.groupBy("key").count())
    return counts.writeStream.format("noop").outputMode("update")
'''


def main() -> None:
    parser = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    parser.add_argument("--keys", type=int, default=100_000)
    parser.add_argument("--share", type=float, default=0.5,
                        help="share of the keys to remove (default 0.5)")
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--provider", choices=sorted(PROVIDERS), default="rocksdb")
    parser.add_argument("--keep", action="store_true")
    args = parser.parse_args()
    with work_dir("sparkpoint-prune-bench-", args.keep) as work:
        write_keys(work / "in", args.keys, 1)
        job = work / "job.py"
        job.write_text(JOB_SOURCE)
        home = Home(work / "home")
        spark = create_session("local[2]", {"spark.sql.shuffle.partitions": str(args.partitions)},
                               "prune-bench")
        api.run(home, job, "bench", params={"input": str(work / "in")},
                conf={PROVIDER_CONF: PROVIDERS[args.provider]}, until_caught_up=True,
                spark=spark)
        api.snapshot_create(home, "bench", "full")
        cut = f"k{int(args.keys * args.share):010d}"
        print(f"provider {args.provider}, {args.keys} keys, {args.partitions} partitions")
        # Baseline of the same run: the rewrite through Hadoop's own local file system (one
        # chmod process per file it creates; spark/local_fs.py), then through sparkpoint's.
        own_settings = local_fs.rewrite_settings
        # Alternated, twice each, the fastest kept: the first prune also warms the JVM.
        timed: dict[str, float] = {}
        for round_ in range(2):
            for name, settings in (("hadoop-local-fs", lambda _spark: {}),
                                   ("sparkpoint", own_settings)):
                local_fs.rewrite_settings = settings  # type: ignore[assignment]
                started = time.perf_counter()
                result = api.snapshot_prune(home, "full", f"pruned-{name}-{round_}", OPERATOR,
                                            f"key < '{cut}'", spark=spark)
                seconds = time.perf_counter() - started
                timed[name] = min(seconds, timed.get(name, seconds))
                print(f"prune ({name}): {seconds:.2f} s, {result.rows_removed} keys removed "
                      f"({result.rows_removed / seconds:,.0f} keys/s)")
        local_fs.rewrite_settings = own_settings
        print(f"ratio sparkpoint / hadoop-local-fs (fastest of each): "
              f"{timed['sparkpoint'] / timed['hadoop-local-fs']:.2f}")
        print(f"rows {result.rows_before} -> {result.rows_after}, "
              f"operator bytes {result.bytes_before:,} -> {result.bytes_after:,}")

if __name__ == "__main__":
    main()
