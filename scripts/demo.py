"""The sparkpoint demo: upgrade a running stateful job without losing a click.

1. A stateful job (dedupe + hourly windowed counts) runs on local Spark over click files.
2. While it runs, we take a snapshot of it (the job keeps running).
3. For the upgrade we snapshot it again with --cancel: it stops right after a committed batch.
4. More clicks arrive while no job runs.
5. A new job starts from the snapshot and catches up, writing to the same output.
6. We check the output against the clicks, computed independently: nothing lost, nothing twice.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pyarrow.parquet as pq

from sparkpoint.checkpoint.sink_log import committed_files
from sparkpoint.testing import expected_hourly_counts, write_clicks

REPO = Path(__file__).resolve().parent.parent
WORK = REPO / "demo-output"
HOME = WORK / "home"
INPUT = WORK / "clicks"
OUTPUT = WORK / "hourly"
JOB = REPO / "examples" / "clicks_job.py"
SPARKPOINT = [sys.executable, "-m", "sparkpoint.cli.main", "--home", str(HOME)]
CONF = ["--conf", "spark.sql.shuffle.partitions=4"]
PARAMS = ["--param", f"input={INPUT}", "--param", f"output={OUTPUT}"]


def step(text: str) -> None:
    print(f"\n== {text}", flush=True)


# What the JVM says on every start; everything else on stderr is sparkpoint's own report.
JVM_NOISE = ("WARNING: Using incubator modules", "Setting default log level",
             "To adjust logging level")


def sparkpoint(*args: str, check: bool = True) -> str:
    print("$ sparkpoint " + " ".join(args), flush=True)
    done = subprocess.run([*SPARKPOINT, *args], capture_output=True, text=True)
    for line in done.stderr.splitlines():
        if line.strip() and not line.startswith(JVM_NOISE) and done.returncode == 0:
            print(f"  {line}", flush=True)
    if done.stdout.strip():
        print(done.stdout.rstrip(), flush=True)
    if check and done.returncode != 0:
        print(done.stderr, file=sys.stderr)
        raise SystemExit(f"demo failed: sparkpoint {args[0]} exited {done.returncode}")
    return done.stdout


def job_batch(job: str) -> int | None:
    done = subprocess.run([*SPARKPOINT, "jobs", "show", job, "--json"],
                          capture_output=True, text=True)
    if done.returncode != 0:
        return None
    batch: int | None = json.loads(done.stdout)["batch"]
    return batch


def wait_for_input_consumed(job: str, files: int, timeout: float = 180) -> None:
    """Wait until the job's file source has committed ``files`` input files."""
    deadline = time.monotonic() + timeout
    sources = HOME / "jobs" / job / "checkpoint" / "sources" / "clicks"
    while time.monotonic() < deadline:
        batch = job_batch(job)
        if batch is not None and sources.is_dir():
            offsets = (HOME / "jobs" / job / "checkpoint" / "offsets" / str(batch)).read_text()
            log_offset = json.loads(offsets.split("clicks:", 1)[1].split("\n")[0])["logOffset"]
            seen = sum(
                len(p.read_text().splitlines()) - 1
                for p in sources.iterdir()
                if p.name.isdigit() and int(p.name) <= log_offset
            )
            if seen >= files:
                return
        time.sleep(1)
    raise SystemExit(f"demo failed: job '{job}' did not consume {files} files in {timeout}s")


def output_rows() -> Counter[tuple[object, ...]]:
    rows: Counter[tuple[object, ...]] = Counter()
    for path in committed_files(OUTPUT):
        table = pq.read_table(path.removeprefix("file://"))
        for record in table.to_pylist():
            rows[(record["window_start"].replace(tzinfo=None),
                  record["window_end"].replace(tzinfo=None), record["user"],
                  record["clicks"])] += 1
    return rows


def main() -> None:
    shutil.rmtree(WORK, ignore_errors=True)
    WORK.mkdir(parents=True)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

    step("1. clicks arrive: 6 files, 20 minutes of events each, some events sent twice")
    clicks = write_clicks(INPUT, range(0, 6))
    print(f"wrote {len(clicks)} click events to {INPUT}")

    step("2. start job 'clicks-v1' (runs until stopped; checkpoint owned by sparkpoint)")
    print("$ sparkpoint run examples/clicks_job.py --job clicks-v1 ... &")
    log = open(WORK / "clicks-v1.log", "w")  # noqa: SIM115 - the job outlives this block
    job = subprocess.Popen([*SPARKPOINT, "run", str(JOB), "--job", "clicks-v1", *PARAMS, *CONF],
                           stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_for_input_consumed("clicks-v1", 6)
        sparkpoint("jobs", "list")

        step("3. snapshot the running job (it keeps running)")
        sparkpoint("snapshot", "create", "clicks-v1", "nightly")
        more = write_clicks(INPUT, range(6, 8))
        clicks += more
        print(f"{len(more)} more clicks arrive; the job keeps processing them")
        wait_for_input_consumed("clicks-v1", 8)

        step("4. upgrade time: snapshot again and cancel the job right after a committed batch")
        sparkpoint("snapshot", "create", "clicks-v1", "upgrade", "--cancel")
        job.wait(timeout=120)
    finally:
        if job.poll() is None:
            job.terminate()
            job.wait(timeout=60)
        log.close()
    sparkpoint("jobs", "show", "clicks-v1")
    sparkpoint("snapshot", "list")
    sparkpoint("snapshot", "show", "upgrade")
    sparkpoint("snapshot", "verify", "upgrade")

    step("5. more clicks arrive while no job runs")
    more = write_clicks(INPUT, range(8, 12))
    clicks += more
    print(f"wrote {len(more)} more click events")

    step("6. start job 'clicks-v2' from snapshot 'upgrade'; it catches up and stops")
    sparkpoint("run", str(JOB), "--job", "clicks-v2", "--from-snapshot", "upgrade",
               *PARAMS, *CONF, "--until-caught-up")
    sparkpoint("jobs", "list")

    step("7. check: the output equals the hourly counts computed from the clicks themselves")
    actual = output_rows()
    expected = expected_hourly_counts(clicks)
    lost = expected - actual
    extra = actual - expected
    print(f"{sum(actual.values())} hourly rows written, {sum(expected.values())} expected; "
          f"lost {sum(lost.values())}, duplicated or wrong {sum(extra.values())}")
    if lost or extra:
        raise SystemExit("demo failed: the upgraded job's output differs from the expected rows")
    print("nothing lost, nothing duplicated: the state survived the upgrade")


if __name__ == "__main__":
    main()
