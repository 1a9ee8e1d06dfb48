"""What a home on S3 costs for the commands that touch every job, and what a job's lease costs.

    .venv/bin/python benchmarks/remote_home.py [--jobs N] [--batches B] [--repeats R]

One run starts moto's S3 server on loopback, writes N jobs into an S3 home (each a job record
and B batches of offsets, commits and source logs, as a run leaves them), and measures:

(a) ``jobs list`` from a machine that has never seen the home (its local space deleted) and
    again with it kept (target: at most 1 s for 50 jobs, either way; every file is read at
    its URL, nothing is mirrored);
(b) taking, renewing and letting go of a job's lease, against the same three steps of a
    local home's kernel lock, and what renewing costs a running job: one renewal every third
    of ``SPARKPOINT_LEASE_SECONDS`` (default 60), so the share of its wall time a renewal
    takes (target: at most 1%, i.e. a throughput ratio of at least 0.99);
(c) with ``--copies``, ``remote_copies.py``'s figures: the bytes a snapshot create and a start
    from it move through sparkpoint's process on an S3 home whose snapshots are in the same
    store (target: at most 1% of the state's bytes), and their time against boto3
    downloading and uploading the same files (target: at most 0.3).

It is a report, not a test: it exits 0 whatever the verdict.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from s3_snapshot import moto_server  # benchmarks/s3_snapshot.py, beside this script
from timing import Timing

from sparkpoint import api
from sparkpoint.runtime.lock import job_lock, lease_store
from sparkpoint.runtime.registry import JobRecord, JobRegistry
from sparkpoint.storage.home import SCRATCH_ENV, Home
from sparkpoint.storage.lease import DEFAULT_LEASE_SECONDS

LIST_TARGET_S = 1.0
RENEWAL_SHARE_TARGET = 0.01


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    parser.add_argument("--jobs", type=int, default=50)
    parser.add_argument("--batches", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--copies", action="store_true",
                        help="also run remote_copies.py (a Spark job on an S3 home)")
    return parser.parse_args(argv)


def timed(step: Callable[[], object], repeats: int, before: Callable[[], None] = lambda: None
          ) -> Timing:
    samples = []
    for _ in range(repeats):
        before()
        started = time.perf_counter()
        step()
        samples.append(time.perf_counter() - started)
    return Timing(tuple(samples))


def write_jobs(home: Home, jobs: int, batches: int) -> None:
    registry = JobRegistry(home)
    for index in range(jobs):
        name = f"job{index:03d}"
        registry.save(JobRecord(name=name, job_file="job.py", status="stopped"))
        checkpoint = home.checkpoint_dir(name)
        for sub in ("offsets", "commits", "sources/0"):
            (checkpoint / sub).mkdir(parents=True, exist_ok=True)
        (checkpoint / "metadata").write_text('{"id":"00000000-0000-0000-0000-000000000000"}\n')
        for batch in range(batches):
            offsets = '{"batchWatermarkMs":0,"batchTimestampMs":0,"conf":{}}'
            (checkpoint / "offsets" / str(batch)).write_text(
                f'v1\n{offsets}\n{{"logOffset":{batch}}}\n')
            (checkpoint / "commits" / str(batch)).write_text('v1\n{"nextBatchWatermarkMs":0}\n')
            (checkpoint / "sources" / "0" / str(batch)).write_text(
                f'v1\n{{"path":"file:///in/f{batch}","timestamp":0,"batchId":{batch}}}\n')


def main(argv: list[str] | None = None) -> int:
    import os

    args = parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="sparkpoint-remote-home-bench-"))
    try:
        with moto_server(work / "moto.log"):
            from tests.support.s3 import S3Server  # the same client settings as the tests

            bucket = S3Server(os.environ["AWS_ENDPOINT_URL"]).new_bucket()
            os.environ[SCRATCH_ENV] = str(work / "writer")
            url = f"s3://{bucket}/home"
            write_jobs(Home.resolve(url), args.jobs, args.batches)
            os.environ[SCRATCH_ENV] = str(work / "reader")
            reader = Home.resolve(url)

            def forget() -> None:
                shutil.rmtree(work / "reader", ignore_errors=True)

            def listed() -> None:
                assert len(api.jobs_list(reader)) == args.jobs

            cold = timed(listed, args.repeats, before=forget)
            warm = timed(listed, args.repeats)

            remote = Home.resolve(url)
            local = Home(work / "local-home")

            def hold(home: Home) -> Callable[[], None]:
                def step() -> None:
                    with job_lock(home, "job000"):
                        pass
                return step

            remote_lock = timed(hold(remote), args.repeats)
            local_lock = timed(hold(local), args.repeats)
            with job_lock(remote, "job000"):
                from sparkpoint.runtime.lock import held_lease

                lease = held_lease(remote, "job000")
                assert lease is not None
                renewal = timed(lease.renew, args.repeats)
            assert lease_store(remote, "job000").holder() is None
    finally:
        shutil.rmtree(work, ignore_errors=True)

    share = renewal.median / (DEFAULT_LEASE_SECONDS / 3)
    rows = [
        (f"jobs list, {args.jobs} jobs x {args.batches} batches, this machine's local space "
         "deleted first", cold, cold.median <= LIST_TARGET_S, f"<= {LIST_TARGET_S:g} s"),
        (f"jobs list, {args.jobs} jobs, local space kept", warm,
         warm.median <= LIST_TARGET_S, f"<= {LIST_TARGET_S:g} s"),
        ("take and let go of a job's lease (S3)", remote_lock, None, ""),
        ("take and let go of a job's kernel lock (local home)", local_lock, None, ""),
        ("renew a lease (S3)", renewal, None, ""),
    ]
    for what, timing, ok, target in rows:
        verdict = "" if ok is None else ("PASS" if ok else "FAIL")
        print(f"{what}: median {timing.median:.3f} s (samples {timing.describe()}) "
              f"{target} {verdict}".rstrip())
    print(f"share of a running job's time spent renewing its lease (one renewal every "
          f"{DEFAULT_LEASE_SECONDS / 3:g} s): {share:.5f}, throughput ratio {1 - share:.5f} "
          f"(target >= {1 - RENEWAL_SHARE_TARGET:g}) "
          f"{'PASS' if share <= RENEWAL_SHARE_TARGET else 'FAIL'}")
    if args.copies:
        import remote_copies  # benchmarks/remote_copies.py, beside this script

        for line in remote_copies.run([]):
            print(line)
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    sys.exit(main())
