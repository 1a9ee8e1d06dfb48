"""Rows per second of one stateful query run by plain PySpark and by sparkpoint, in one run.

    .venv/bin/python benchmarks/throughput.py [--rows N] [--files F] [--repeats R] [--keep]
                                              [--source files|kafka]

The query is the example job's (examples/clicks_job.py): JSON click events, duplicates
dropped within a 10-minute watermark, clicks counted per user and hour, appended to
parquet. Each launch path runs it over the same input (F files, N rows, every file twice
so the dedupe has work) from an empty checkpoint to the end of its input, in its own
process, with the same Spark settings (local[2], 4 shuffle partitions, RocksDB state store,
which sparkpoint uses by default):

- plain: a PySpark script run by ``python``, no sparkpoint (the baseline);
- plain-submit: the same script run by ``spark-submit`` (the spark-submit path's baseline:
  a script launched by spark-submit logs at Spark's default level, INFO, about two thousand
  lines for this run, where one run by ``python`` logs at WARN; measured 21.2 s against
  24.2-25.7 s for the same 400k rows, with no sparkpoint in either);
- cli: ``sparkpoint run --until-caught-up``;
- spark-submit: ``spark-submit "$(sparkpoint submit-entry)" run ... --until-caught-up``;
- api: ``sparkpoint.start(spark, build, until_caught_up=True)`` in a Python driver.

With ``--source kafka`` the same events are records of a 4-partition topic on a real broker
(tests/support/kafka.py; jars from scripts/test-deps.sh), read by Spark's Kafka connector
(``format("kafka")``, handed over by spark.jars) at the same number of batches, and the
sparkpoint job commits each batch's end offsets to a consumer group
(``ctx.commit_offsets_to_group``), as a job watched by Kafka's lag tools does.

Rows per second = input rows / wall time of the whole process (JVM start included: what a
user waits for). The paths run interleaved, ``--repeats`` times each; the table shows the
median and, per sparkpoint path, its rate divided by its baseline's (plain-submit for
spark-submit, plain for the others; target >= 0.98). It is
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
PATHS = ["plain", "cli", "plain-submit", "spark-submit", "api"]
BASELINES = {"cli": "plain", "spark-submit": "plain-submit", "api": "plain"}
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


PLAIN_KAFKA = PLAIN.replace(  # the same query, its clicks read from Kafka by Spark's connector
    """clicks = (spark.readStream.schema("event_id STRING, user STRING, url STRING, ts TIMESTAMP")
          .option("maxFilesPerTrigger", files_per_batch).json(inp))""",
    """bootstrap, topic = inp.split("/")
clicks = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", bootstrap)
          .option("subscribe", topic).option("startingOffsets", "earliest")
          .option("maxOffsetsPerTrigger", files_per_batch).load()
          .select(F.from_json(F.col("value").cast("string"),
                              "event_id STRING, user STRING, url STRING, ts TIMESTAMP")
                  .alias("c")).select("c.*"))""")

# The example job reading the same events from Kafka, its offsets committed to a group.
KAFKA_JOB = '''
from pyspark.sql import functions as F
import sparkpoint as sp


def build(spark, ctx):
    bootstrap, topic = ctx.require_param("input").split("/")
    clicks = (spark.readStream.name("clicks").format("kafka")
              .option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic)
              .option("startingOffsets", "earliest")
              .option("maxOffsetsPerTrigger", ctx.param("files_per_batch", "1000")).load()
              .select(F.from_json(F.col("value").cast("string"),
                                  "event_id STRING, user STRING, url STRING, ts TIMESTAMP")
                      .alias("c")).select("c.*"))
    ctx.commit_offsets_to_group("clicks", "throughput-" + ctx.job)
    unique = ctx.stateful(
        "dedup_clicks",
        clicks.withWatermark("ts", "10 minutes").dropDuplicates(["event_id", "ts"]))
    hourly = ctx.stateful(
        "hourly_counts",
        unique.groupBy(F.window("ts", "1 hour"), "user").agg(F.count("*").alias("clicks")))
    return (hourly.select(F.col("window.start").alias("window_start"),
                          F.col("window.end").alias("window_end"), "user", "clicks")
            .writeStream.format("parquet").option("path", ctx.require_param("output"))
            .outputMode("append"))
'''


def produce_input(source_dir: Path, bootstrap: str, topic: str) -> int:
    """The events of the input files as records of ``topic``, 4 partitions, in file order."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 50})
    count = 0
    for path in sorted(source_dir.iterdir()):
        for line in path.read_text().splitlines():
            producer.produce(topic, value=line.encode(), partition=count % 4)
            count += 1
            if count % 100_000 == 0:
                producer.flush(60)
    producer.flush(60)
    return count


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


def command(path: str, work: Path, run: int, inp: Path | str, files_per_batch: int,
            job: Path = JOB) -> list[str]:
    out, home = work / f"{path}-{run}-out", work / f"{path}-{run}-home"
    params = ["--param", f"input={inp}", "--param", f"output={out}",
              "--param", f"files_per_batch={files_per_batch}"]
    if path in ("plain", "plain-submit"):
        script = work / ("plain_kafka.py" if job != JOB else "plain.py")
        launcher = [PYTHON] if path == "plain" else [
            SPARK_SUBMIT, "--master", "local[2]", *conf_args("--conf")]
        return [*launcher, str(script), str(inp), str(out), str(work / f"{path}-{run}-ckpt"),
                str(files_per_batch), *[f"{k}={v}" for k, v in CONF.items()]]
    if path == "cli":
        return [SPARKPOINT, "--home", str(home), "run", str(job), "--job", f"cli{run}",
                *params, *conf_args("--conf"), "--until-caught-up"]
    if path == "spark-submit":
        entry = subprocess.run([SPARKPOINT, "submit-entry"], capture_output=True, text=True,
                               check=True).stdout.strip()
        return [SPARK_SUBMIT, "--master", "local[2]", *conf_args("--conf"), entry,
                "--home", str(home), "run", str(job), "--job", f"submitted{run}", *params,
                "--until-caught-up"]
    script = work / "api.py"
    return [PYTHON, str(script), str(job), str(home), str(inp), str(out), str(files_per_batch),
            *[f"{k}={v}" for k, v in CONF.items()]]


def main() -> None:
    parser = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--files", type=int, default=10)
    parser.add_argument("--files-per-batch", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--keep", action="store_true")
    parser.add_argument("--source", choices=["files", "kafka"], default="files")
    parser.add_argument("--paths", default=",".join(PATHS),
                        help="launch paths to run, comma-separated (a path's baseline is "
                             "added when it is missing)")
    args = parser.parse_args()
    unknown = set(args.paths.split(",")) - set(PATHS)
    if unknown:
        parser.error(f"--paths: expected some of {', '.join(PATHS)}, "
                     f"found {', '.join(sorted(unknown))}")
    work = Path(tempfile.mkdtemp(prefix="sparkpoint-throughput-"))
    (work / "plain.py").write_text(PLAIN)
    (work / "plain_kafka.py").write_text(PLAIN_KAFKA)
    (work / "api.py").write_text(API)
    env = dict(os.environ, PYSPARK_PYTHON=PYTHON, SPARK_LOCAL_IP="127.0.0.1")
    broker = None
    try:
        files = work / "in"
        rows = write_input(files, args.rows, args.files)
        inp: Path | str = files
        job, per_batch = JOB, args.files_per_batch
        if args.source == "kafka":
            sys.path.insert(0, str(REPO))
            from tests.conftest import kafka_connector_jars
            from tests.support.kafka import start_kafka_broker

            jars = kafka_connector_jars()
            if not jars:
                raise SystemExit("no Kafka connector jars: run scripts/test-deps.sh")
            CONF["spark.jars"] = jars
            (work / "broker").mkdir()
            broker = start_kafka_broker(work / "broker")
            server = next(broker)
            bootstrap = server.bootstrap
            server.create_topic("clicks", 4)
            produce_input(files, bootstrap, "clicks")
            inp = f"{bootstrap}/clicks"
            job = work / "kafka_job.py"
            job.write_text(KAFKA_JOB)
            # The same number of batches as the file source makes of the same events.
            per_batch = rows * args.files_per_batch // (2 * args.files)
        print(f"input: {rows} rows ({args.source}) in {2 * args.files} files' worth, "
              f"{args.files_per_batch} files per batch; work dir {work}")
        wanted = set(args.paths.split(","))
        wanted |= {BASELINES[path] for path in wanted if path in BASELINES}
        paths = [path for path in PATHS if path in wanted]
        baselines = BASELINES
        seconds: dict[str, list[float]] = {path: [] for path in paths}
        for run in range(args.repeats):
            for path in paths:
                # The command first (spark-submit's asks sparkpoint for its entry script):
                # only the job's own process is timed.
                argv = command(path, work, run, inp, per_batch, job)
                started = time.perf_counter()
                done = subprocess.run(argv, capture_output=True, text=True, env=env)
                elapsed = time.perf_counter() - started
                if done.returncode != 0:
                    raise SystemExit(f"{path} failed ({done.returncode}):\n{done.stderr[-3000:]}")
                seconds[path].append(elapsed)
                print(f"  run {run + 1} {path:<12} {elapsed:7.1f} s", flush=True)
        rate = {path: rows / statistics.median(seconds[path]) for path in paths}
        print(f"\n{'path':<13}{'median s':>10}{'rows/s':>12}{'ratio':>8}  "
              f"{'against':<13}verdict (>= {TARGET})")
        for path in paths:
            against = baselines.get(path)
            ratio = rate[path] / rate[against or "plain"]
            verdict = "PASS" if ratio >= TARGET else "FAIL"
            print(f"{path:<13}{statistics.median(seconds[path]):>10.1f}{rate[path]:>12.0f}"
                  f"{ratio:>8.3f}  {against or '':<13}{verdict if against else 'baseline'}")
    finally:
        if broker is not None:
            broker.close()
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
