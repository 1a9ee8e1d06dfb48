"""Rows per second of one stateful query run by plain PySpark and by sparkpoint, in one run.

    .venv/bin/python benchmarks/throughput.py [--rows N] [--files F] [--repeats R] [--keep]

The query is the example job's (examples/clicks_job.py): JSON click events, duplicates
dropped within a 10-minute watermark, clicks counted per user and hour, appended to
parquet. Each launch path runs it over the same input (F files, N rows, every file twice
so the dedupe has work) from an empty checkpoint to the end of its input, in its own
process, with the same Spark settings (local[2], 4 shuffle partitions, RocksDB state store,
which sparkpoint uses by default):

- plain: a PySpark script, no sparkpoint (the baseline);
- cli: ``sparkpoint run --until-caught-up``;
- spark-submit: ``spark-submit "$(sparkpoint submit-entry)" run ... --until-caught-up``;
- api: ``sparkpoint.start(spark, build, until_caught_up=True)`` in a Python driver.

Rows per second = input rows / wall time of the whole process (JVM start included: what a
user waits for). The paths run interleaved, ``--repeats`` times each; the table shows the
median and, per sparkpoint path, its rate divided by plain PySpark's (target >= 0.98). It is
a report, not a test: it exits 0 whatever the verdict.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
JOB = REPO / "examples" / "clicks_job.py"
PYTHON = sys.executable
SPARKPOINT = str(Path(PYTHON).parent / "sparkpoint")
SPARK_SUBMIT = str(Path(PYTHON).parent / "spark-submit")
TARGET = 0.98
CONF = {
    "spark.sql.shuffle.partitions": "4",
    "spark.sql.streaming.stateStore.providerClass":
        "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
    "spark.ui.enabled": "false",
    "spark.driver.host": "127.0.0.1",
    "spark.driver.bindAddress": "127.0.0.1",
}

PLAIN = '''
import sys
from pyspark.sql import SparkSession, functions as F
inp, out, ckpt, files_per_batch = sys.argv[1:5]
conf = sys.argv[5:]
builder = SparkSession.builder.master("local[2]").appName("plain")
for pair in conf:
    key, _, value = pair.partition("=")
    builder = builder.config(key, value)
spark = builder.getOrCreate()
clicks = (spark.readStream.schema("event_id STRING, user STRING, url STRING, ts TIMESTAMP")
          .option("maxFilesPerTrigger", files_per_batch).json(inp))
unique = clicks.withWatermark("ts", "10 minutes").dropDuplicates(["event_id", "ts"])
hourly = unique.groupBy(F.window("ts", "1 hour"), "user").agg(F.count("*").alias("clicks"))
query = (hourly.select(F.col("window.start").alias("window_start"),
                       F.col("window.end").alias("window_end"), "user", "clicks")
         .writeStream.format("parquet").option("path", out).option("checkpointLocation", ckpt)
         .outputMode("append").trigger(availableNow=True).start())
query.awaitTermination()
spark.stop()
'''

API = '''
import sys
from pyspark.sql import SparkSession
import sparkpoint
job_file, home, inp, out, files_per_batch, conf = (sys.argv[1], sys.argv[2], sys.argv[3],
                                                   sys.argv[4], sys.argv[5], sys.argv[6:])
builder = SparkSession.builder.master("local[2]").appName("api")
for pair in conf:
    key, _, value = pair.partition("=")
    builder = builder.config(key, value)
spark = builder.getOrCreate()
query = sparkpoint.start(spark, job_file, job="api", home=home, until_caught_up=True,
                         params={"input": inp, "output": out, "files_per_batch": files_per_batch},
                         echo=lambda line: None)
query.awaitTermination()
sparkpoint.await_job("api")
spark.stop()
'''


def write_input(directory: Path, rows: int, files: int) -> int:
    """JSON click events; every file is written twice under two names (duplicates)."""
    directory.mkdir(parents=True)
    rng = random.Random(7)
    per_file = rows // (2 * files)
    start = 1_700_000_000
    written = 0
    for index in range(files):
        lines = []
        for n in range(per_file):
            ts = start + index * 600 + rng.randrange(600)
            event = {"event_id": f"e{index}-{n}", "user": f"u{rng.randrange(5000)}",
                     "url": f"/p/{rng.randrange(100)}",
                     "ts": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts))}
            lines.append(json.dumps(event))
        text = "\n".join(lines) + "\n"
        for copy in ("a", "b"):
            (directory / f"clicks-{index:04d}-{copy}.json").write_text(text)
            written += per_file
    return written


def conf_args(flag: str) -> list[str]:
    return [arg for key, value in CONF.items() for arg in (flag, f"{key}={value}")]


def command(path: str, work: Path, run: int, inp: Path, files_per_batch: int) -> list[str]:
    out, home = work / f"{path}-{run}-out", work / f"{path}-{run}-home"
    params = ["--param", f"input={inp}", "--param", f"output={out}",
              "--param", f"files_per_batch={files_per_batch}"]
    if path == "plain":
        script = work / "plain.py"
        return [PYTHON, str(script), str(inp), str(out), str(work / f"plain-{run}-ckpt"),
                str(files_per_batch), *[f"{k}={v}" for k, v in CONF.items()]]
    if path == "cli":
        return [SPARKPOINT, "--home", str(home), "run", str(JOB), "--job", "cli",
                *params, *conf_args("--conf"), "--until-caught-up"]
    if path == "spark-submit":
        entry = subprocess.run([SPARKPOINT, "submit-entry"], capture_output=True, text=True,
                               check=True).stdout.strip()
        return [SPARK_SUBMIT, "--master", "local[2]", *conf_args("--conf"), entry,
                "--home", str(home), "run", str(JOB), "--job", "submitted", *params,
                "--until-caught-up"]
    script = work / "api.py"
    return [PYTHON, str(script), str(JOB), str(home), str(inp), str(out), str(files_per_batch),
            *[f"{k}={v}" for k, v in CONF.items()]]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--files", type=int, default=10)
    parser.add_argument("--files-per-batch", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--keep", action="store_true")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="sparkpoint-throughput-"))
    (work / "plain.py").write_text(PLAIN)
    (work / "api.py").write_text(API)
    env = dict(os.environ, PYSPARK_PYTHON=PYTHON, SPARK_LOCAL_IP="127.0.0.1")
    try:
        inp = work / "in"
        rows = write_input(inp, args.rows, args.files)
        print(f"input: {rows} rows in {2 * args.files} files, {args.files_per_batch} files per "
              f"batch; work dir {work}")
        paths = ["plain", "cli", "spark-submit", "api"]
        seconds: dict[str, list[float]] = {path: [] for path in paths}
        for run in range(args.repeats):
            for path in paths:
                started = time.perf_counter()
                done = subprocess.run(command(path, work, run, inp, args.files_per_batch),
                                      capture_output=True, text=True, env=env)
                elapsed = time.perf_counter() - started
                if done.returncode != 0:
                    raise SystemExit(f"{path} failed ({done.returncode}):\n{done.stderr[-3000:]}")
                seconds[path].append(elapsed)
                print(f"  run {run + 1} {path:<12} {elapsed:7.1f} s", flush=True)
        base = rows / statistics.median(seconds["plain"])
        print(f"\n{'path':<13}{'median s':>10}{'rows/s':>12}{'ratio':>8}  verdict (>= {TARGET})")
        for path in paths:
            rate = rows / statistics.median(seconds[path])
            ratio = rate / base
            verdict = "baseline" if path == "plain" else ("PASS" if ratio >= TARGET else "FAIL")
            print(f"{path:<13}{statistics.median(seconds[path]):>10.1f}{rate:>12.0f}"
                  f"{ratio:>8.3f}  {verdict}")
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
