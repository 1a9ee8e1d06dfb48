"""Concurrency torture of one job in a home on S3 (moto's server) and on HDFS (a
MiniDFSCluster): four processes, each a machine of its own (its host name in the lease, its
own scratch space), change the job at once with a seeded random sequence of snapshot create
(with and without --cancel), delete and verify, startpoint set, run, jobs stop, drain, a
machine dying while it holds the job's lease, a container restarted in a fresh pid namespace
with the dead holder's host name and pid, and a cut-off `jobs delete` of a second job
followed by a new job of its name (tests/support/torture_machine.py). Two of the
machines have their wall clocks set apart (20 s behind, 45 s ahead: the job's lease lasts
8 s), as machines without synchronised clocks do.

Afterwards, from what the processes reported and what the home holds:
- no operation ended in an unexpected error or a traceback; refusals are the expected ones
  (JOB_RUNNING for a job another machine holds, and the like: EXPECTED_REFUSALS);
- no two processes held a job's lease at once, by every process's lease log (compared on
  the machine's monotonic clock), and none took the lease of a machine that died holding it
  before that lease expired;
- every startpoint set was applied exactly once, or is still pending, and is applied once
  by the next start;
- exactly the snapshots created and not deleted are listed, each verifies, and jobs started
  from a sample of them continue the job with nothing lost or doubled;
- the job's output, read through its sink log, equals the multiset computed from the input
  files alone;
- a job run again after its cut-off deletion starts from nothing and stays listed.

The job counts every event once however often it is read, so the startpoints (each reads
everything again) and drains change nothing a reference could not predict
(tests/data/jobs/clicks_counted_once.py).

Bounded for the suite (two cores): 3 operations a machine, runs and drains on two of the
machines only (each needs a Spark session, a JVM of its own), none begun after 60 s, one
snapshot started from: about two minutes a store. SPARKPOINT_TORTURE_OPS,
SPARKPOINT_TORTURE_SPARK_MACHINES (up to 4), SPARKPOINT_TORTURE_SECONDS and
SPARKPOINT_TORTURE_STARTS make a longer run; SPARKPOINT_TORTURE_SEED repeats one (the seed is
printed, and shown when the test fails).

Beside it, one machine behind a faulty network to its S3 home (tests/support/slow_proxy.py:
requests failed with 500 and 503, connections cut, a slow lease) runs, snapshots and drains
the job with the same invariants.

Found with it, each with its own reproduction: a drain of a running job on a home in a store
was refused JOB_RUNNING by the run it had itself stopped (test_lease_fencing.py); a drain's
batch was cut short by another process's stop request (jobs stop, or another drain), the
drain failing with exit 1 (test_drain.py); on S3 a run stopped while it read a checkpoint
file failed with exit 1 (below). And while writing it: a snapshot taken during a drain held
the drain's maximal watermark (test_drain.py).
"""

from __future__ import annotations

import datetime as dt
import itertools
import json
import os
import queue
import random
import re
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import IO, Any

import pytest

from sparkpoint import api
from sparkpoint.startpoints.store import StartpointStore
from sparkpoint.storage.fileio import join
from sparkpoint.storage.home import Home
from sparkpoint.testing import output_rows
from tests.conftest import REPO
from tests.integration.test_remote_home import _s3a_jars
from tests.support.cli import _env, wait_for
from tests.support.faults import clock_apart_env
from tests.support.s3 import S3Server
from tests.support.slow_proxy import fault_proxy, slow_proxy

pytestmark = pytest.mark.spark

JOB = "clicks"
MACHINES = 4
OPERATIONS = ("create", "cancel", "delete", "verify", "startpoint", "run", "stop", "drain",
              "crash", "restart", "recreate")
# The operations that need the machine's own Spark session.
SPARK_KINDS = ("run", "drain", "recreate")
SPARK_MACHINES = max(1, min(MACHINES, int(os.environ.get("SPARKPOINT_TORTURE_SPARK_MACHINES",
                                                         "2"))))
OPS_PER_MACHINE = int(os.environ.get("SPARKPOINT_TORTURE_OPS", "3"))
DEADLINE_S = float(os.environ.get("SPARKPOINT_TORTURE_SECONDS", "60"))
STARTS = int(os.environ.get("SPARKPOINT_TORTURE_STARTS", "1"))
# Refusals that are the right answer when other machines change the job at the same time:
# operation -> error code -> what its message says.
EXPECTED_REFUSALS = {
    "run": {"JOB_RUNNING": ""},  # another machine holds the job
    "drain": {"JOB_RUNNING": "",  # another machine holds the job
              "PRECONDITION": "is already drained"},  # by another machine, no run since
    "stop": {"PRECONDITION": "is not running"},
    "verify": {"UNKNOWN_SNAPSHOT": "not found"},  # deleted by another machine meanwhile
    "delete": {"UNKNOWN_SNAPSHOT": "not found"},  # the same
}
# The job's lease lasts this long in the torture, so that a machine that died holding it
# holds the others up for seconds, not the default minute.
LEASE_SECONDS = "8"
WINDOW = dt.timedelta(minutes=20)
# Machines whose wall clocks are set apart (libfaketime; their monotonic clocks, which the
# lease audit compares, are this machine's): one behind by more than two leases, one ahead
# by five. Neither of them runs Spark (they are dealt no run or drain: see plans).
CLOCKS_APART_S = {2: -20, 3: 45}
# How long one command of a machine may take, before the test calls it stuck.
ANSWER_TIMEOUT_S = 600


class MachineProcess:
    """A torture machine: its process, its log, and the lines it answered."""

    def __init__(self, index: int, home_url: str, tmp_path: Path, inp: Path, out: Path,
                 jars: str | None, env: dict[str, str] | None = None) -> None:
        self.index = index
        self.log = tmp_path / f"machine-{index}.log"
        self.lease_log = tmp_path / f"machine-{index}.leases.jsonl"
        env = _env(extra={"SPARKPOINT_HOST": f"machine-{index}",
                          "SPARKPOINT_SCRATCH": str(tmp_path / f"machine-{index}"),
                          "SPARKPOINT_LEASE_LOG": str(self.lease_log),
                          "SPARKPOINT_LEASE_SECONDS": LEASE_SECONDS, **(env or {})})
        with open(self.log, "wb") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "tests.support.torture_machine", home_url, JOB,
                 str(index), str(inp), str(out), *([jars] if jars else [])],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, text=True,
                cwd=REPO, env=env)
        self.lines: queue.Queue[dict[str, Any] | None] = queue.Queue()
        threading.Thread(target=self._read, args=(self.process.stdout,), daemon=True).start()

    def _read(self, stdout: IO[str]) -> None:
        for text in stdout:
            if text.startswith("TORTURE "):
                self.lines.put(json.loads(text[len("TORTURE "):]))
        self.lines.put(None)  # the process ended

    def send(self, **command: Any) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps(command) + "\n")
        self.process.stdin.flush()

    def answer(self) -> list[dict[str, Any]]:
        """The lines answering the last command, up to its ``done``."""
        lines: list[dict[str, Any]] = []
        while True:
            try:
                line = self.lines.get(timeout=ANSWER_TIMEOUT_S)
            except queue.Empty:
                raise AssertionError(f"machine {self.index} did not answer within "
                                     f"{ANSWER_TIMEOUT_S} s\n{self.tail()}") from None
            if line is None:
                raise AssertionError(f"machine {self.index} ended\n{self.tail()}")
            if "done" in line:
                return lines
            lines.append(line)

    def result(self) -> Any:
        """The result of a command that must succeed."""
        lines = self.answer()
        assert [line.get("outcome") for line in lines] == [None], \
            f"machine {self.index}: {lines}\n{self.tail()}"
        print(f"machine {self.index}: {lines[0]}")
        return lines[0]["result"]

    def tail(self) -> str:
        return self.log.read_text(errors="replace")[-3000:] if self.log.exists() else ""

    def stop(self) -> None:
        if self.process.stdin is not None and not self.process.stdin.closed:
            self.process.stdin.close()
        try:
            self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def plans(seed: int) -> list[list[str]]:
    """Each machine's operations, at random, every kind at least once among them. The first
    SPARK_MACHINES draw from every kind, the others from those that need no Spark session of
    their own (on two cores a JVM costs more than the rest of a machine's work)."""
    rng = random.Random(seed)
    others = [kind for kind in OPERATIONS if kind not in SPARK_KINDS]
    spark_kinds = list(SPARK_KINDS)
    rng.shuffle(others)
    rng.shuffle(spark_kinds)
    dealt: list[list[str]] = [[] for _ in range(MACHINES)]
    for number, kind in enumerate(spark_kinds):
        dealt[number % SPARK_MACHINES].append(kind)
    for number, kind in enumerate(others):
        dealt[(SPARK_MACHINES + number) % MACHINES].append(kind)
    for index, plan in enumerate(dealt):
        kinds = OPERATIONS if index < SPARK_MACHINES else others
        plan.extend(rng.choice(kinds) for _ in range(OPS_PER_MACHINE - len(plan)))
        rng.shuffle(plan)
    return dealt


def reference(inp: Path) -> Counter[tuple[Any, ...]]:
    """Every 20-minute window of the input files' events, each event counted once: the
    output of the job once every file was read and the job drained."""
    events = {}
    for path in sorted(inp.glob("clicks-*.json")):
        for text in path.read_text().splitlines():
            event = json.loads(text)
            events[event["event_id"]] = event
    counts: Counter[tuple[dt.datetime, str]] = Counter()
    for event in events.values():
        ts = dt.datetime.strptime(event["ts"], "%Y-%m-%dT%H:%M:%S.%fZ")
        start = ts.replace(minute=ts.minute - ts.minute % 20, second=0, microsecond=0)
        counts[(start, event["user"])] += 1
    return Counter((start, start + WINDOW, user, n) for (start, user), n in counts.items())


def sink_files_up_to(output: Path, batch: int) -> list[str]:
    """Files a file sink committed in batches 0..``batch``, by its log: the newest compaction
    at or before the batch (it lists every file before it) and the entries after it."""
    log = output / "_spark_metadata"
    entries = {int(path.name.removesuffix(".compact")): path for path in log.iterdir()
               if path.name.removesuffix(".compact").isdigit()}
    first = max((b for b, path in entries.items() if path.suffix == ".compact" and b <= batch),
                default=0)
    return [json.loads(text)["path"] for b in range(first, batch + 1)
            for text in entries[b].read_text().splitlines()[1:] if text.strip()]


Holding = tuple[float, float, str, int, float | None, str, tuple[Any, ...]]


def lease_intervals(machines: list[MachineProcess]) -> dict[str, list[Holding]]:
    """Each holding of each job's lease, from the processes' logs: (taken, let go, host,
    generation, for a holder that died holding it the expiry it wrote, how it ended, and the
    holder's host, boot and pid namespace), in the order taken, on this machine's monotonic
    clock."""
    taken: dict[str, dict[str, Any]] = {}
    let_go: dict[str, dict[str, Any]] = {}
    for machine in machines:
        text = machine.lease_log.read_text() if machine.lease_log.exists() else ""
        for line in map(json.loads, text.splitlines()):
            (taken if line["event"] == "acquired" else let_go)[line["token"]] = line
    assert set(taken) == set(let_go), \
        f"leases taken and never let go, or the reverse: {set(taken) ^ set(let_go)}"
    holdings: dict[str, list[Holding]] = {}
    for token, line in taken.items():
        died = let_go[token].get("outcome") == "died"
        # Monotonic times: the machines' processes share this machine's monotonic clock,
        # whatever their wall clocks say (one of them has its wall clock set apart).
        holdings.setdefault(line["job"], []).append(
            (line["monotonic"], let_go[token]["held_until_monotonic"], line["host"],
             line["generation"], line["expires_monotonic"] if died else None,
             let_go[token]["outcome"],
             (line["host"], line.get("boot_id"), line.get("pid_namespace"))))
    return {job: sorted(intervals) for job, intervals in holdings.items()}


def explained(line: dict[str, Any]) -> bool:
    """An operation's outcome is ok, or a refusal (exit 4) concurrent machines explain."""
    if line["outcome"] == "ok":
        return True
    says = EXPECTED_REFUSALS.get(line["op"], {}).get(line["outcome"])
    return says is not None and says in line["message"] and line["exit_code"] == 4


def test_four_machines_changing_one_job_at_random_leave_it_whole(
    spark: object, request: pytest.FixtureRequest, tmp_path: Path, store: str
) -> None:
    seed = int(os.environ.get("SPARKPOINT_TORTURE_SEED") or random.randrange(1_000_000))
    print(f"torture seed {seed} (SPARKPOINT_TORTURE_SEED={seed} repeats it)")
    began = time.monotonic()
    if store == "s3":
        home_url = f"s3://{request.getfixturevalue('s3_server').new_bucket()}/home"
    else:
        home_url = join(request.getfixturevalue("hdfs_server").new_dir(), "home")
    home = Home.resolve(home_url)
    inp, out = tmp_path / "input" / "clicks", tmp_path / "out"
    jars = _s3a_jars() if store == "s3" else None
    machines = [MachineProcess(i, home_url, tmp_path, inp, out, jars,
                               env=clock_apart_env(CLOCKS_APART_S[i]) if CLOCKS_APART_S.get(i)
                               else None)
                for i in range(MACHINES)]
    timings: dict[str, float] = {}
    try:
        # Sessions start at once, while machine 0 runs the job's first batches.
        dealt = plans(seed)
        needs_spark = [i for i, plan in enumerate(dealt) if i > 0 and set(SPARK_KINDS) & set(plan)]
        machines[0].send(do="setup")
        for i in needs_spark:
            machines[i].send(do="spark")
        assert machines[0].result()["batches"] >= 1
        for i in needs_spark:
            machines[i].result()
        timings["setup"] = time.monotonic() - began

        for machine, plan in zip(machines, dealt, strict=True):
            machine.send(do="torture", seed=seed, ops=plan, deadline_s=DEADLINE_S)
        done = [line for machine in machines for line in machine.answer()]
        timings["torture"] = time.monotonic() - began - timings["setup"]
        print(f"operations: {json.dumps(done, indent=1)}")
        ops = [line for line in done if "op" in line]
        if [line for line in ops if not explained(line)]:
            for machine in machines:  # who held the lease when, to tell why
                if machine.lease_log.exists():
                    print(f"{machine.lease_log.name}:\n{machine.lease_log.read_text()}")
        assert not [line for line in ops if not explained(line)], \
            "unexpected outcomes (see the operations and lease logs above)"
        assert not [line for line in ops if line.get("result", {}).get("problems")]

        # Startpoints: each set consumed by exactly one application, or still pending.
        made = [line["result"]["set_id"] for line in ops
                if line["op"] == "startpoint" and line["outcome"] == "ok"]

        def applied() -> Counter[str]:
            record = api.job_view(home, JOB, details=False).record
            return Counter(i for a in record.startpoints_applied for i in a.set_ids)

        # Every set still stored counts as pending ('startpoint list' folds them: a set a
        # later whole-source one replaces is not shown, yet the next start consumes it).
        pending = {i for ids in StartpointStore(home).all_with_ids(JOB)[1].values()
                   for i in ids}
        once = applied()
        assert max(once.values(), default=1) == 1, f"a set applied twice: {once}"
        assert sorted(made) == sorted(set(once) | pending) and not set(once) & pending, \
            f"sets made {made}, applied {once}, pending {pending}"

        # Everything read, every window emitted: the pending sets are applied (once).
        finish = time.monotonic()
        machines[0].send(do="finish")
        machines[0].result()
        timings["finish"] = time.monotonic() - finish
        assert api.startpoint_list(home, JOB) == {}
        assert sorted(applied().elements()) == sorted(made)
        expected = reference(inp)
        assert output_rows(spark, out) == expected  # type: ignore[arg-type]

        # Snapshots: exactly those created and not deleted, each whole.
        created = {line["result"]["snapshot"] for line in ops if line["outcome"] == "ok"
                   and line["op"] in ("create", "cancel", "drain", "crash", "restart")
                   and line["result"].get("snapshot")}
        deleted = {line["result"]["snapshot"] for line in ops
                   if line["op"] == "delete" and line["outcome"] == "ok"}
        listed = {m.name: m for m in api.snapshot_list(home)}
        assert set(listed) == created - deleted
        for name in listed:
            assert api.snapshot_verify(home, name) == [], name

        # Jobs started from snapshots continue where each was taken: the job's output up to
        # the snapshot's batch and the new job's output are every window, once.
        starts = time.monotonic()
        for name in random.Random(seed).sample(sorted(listed), min(STARTS, len(listed))):
            machines[0].send(do="start_from", snapshot=name, job=f"from-{name}",
                             output=str(tmp_path / f"out-{name}"))
            machines[0].result()
            before = output_rows(spark, out, sink_files_up_to(out, listed[name].batch_id))  # type: ignore[arg-type]
            after = output_rows(spark, tmp_path / f"out-{name}")  # type: ignore[arg-type]
            assert before + after == expected, name
        timings["starts"] = time.monotonic() - starts

        # A job deleted by a cut-off 'jobs delete', then run again under its name: the new
        # job starts from nothing (every window its deleted namesake wrote, and only windows
        # of the input), and stays listed.
        listed_jobs = {view.record.name for view in api.jobs_list(home)}
        for line in ops:
            if line["op"] != "recreate" or line["outcome"] != "ok":
                continue
            again = line["result"]
            old = output_rows(spark, Path(again["old_output"]))  # type: ignore[arg-type]
            new = output_rows(spark, Path(again["output"]))  # type: ignore[arg-type]
            assert again["new"]["first_batch"] is None, again
            assert old and not old - new and not new - expected, again
            assert again["job"] in again["listed_after_run"] and again["job"] in listed_jobs

        # Leases: one holder of a job at a time. Each interval runs from the moment its
        # holder's conditional create won to the moment before it wrote its release (or its
        # own deadline, for a lease found lost), all on this machine's clock. A taker's create
        # follows the release it read (or the expiry of a lost holder, whose deadline is at
        # or before the expiry it wrote), so in a correct protocol each interval ends before
        # the next begins, with no margin needed; generations rise in the same order.
        holdings = lease_intervals(machines)
        assert len(holdings[JOB]) > 1, "the job's lease was logged once or never"
        for job, intervals in holdings.items():
            for before, after in itertools.pairwise(intervals):
                assert before[1] <= after[0], f"{job}: two holders at once: {before}, {after}"
                # A job deleted with its lease, then made anew, starts from generation 1.
                assert before[3] < after[3] or before[5] == "deleted", \
                    f"{job}: generations out of order: {before}, {after}"
                # A holder that died holding the lease holds the job until its lease expires,
                # except for a taker that sees its pid namespace (the same host, boot and
                # namespace: the kernel gives a freed namespace's number to a new one, so a
                # container restarted may find itself in the namespace its dead run had, by
                # number), and so can prove it gone.
                assert before[4] is None or before[4] <= after[0] or \
                    (None not in before[6] and before[6] == after[6]), \
                    f"{job}: taken before the lease of a dead holder expired: {before}, {after}"
        died = sum(1 for holding in holdings[JOB] if holding[4] is not None)
        print(f"holdings that ended with their holder's death: {died}")
    finally:
        for machine in machines:
            machine.stop()
        print(f"timings (s): { {k: round(v, 1) for k, v in timings.items()} }, "
              f"total {time.monotonic() - began:.1f}")


@pytest.fixture(params=["s3", "hdfs"])
def store(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def test_a_run_on_s3_asked_to_stop_while_it_reads_its_checkpoint_stops_cleanly(
    s3_server: S3Server, tmp_path: Path
) -> None:
    """A stop asked of a run on an S3 home (``jobs stop``, or a drain stopping the job) while
    its query read a checkpoint file failed the run (QUERY_FAILED, exit 1, "Error while
    reading data. Read interrupted while waiting for data"): hadoop-aws 3.5's default input
    stream, the analytics accelerator, turns the interrupt of Spark's stop into a plain
    IOException, which Spark takes for a failure of the query. Found by the torture test.
    The read (of a state schema, at the query's start) is held at a proxy while the stop
    lands."""
    home_url = f"s3://{s3_server.new_bucket()}/home"
    home = Home.resolve(home_url)
    inp, out = tmp_path / "input" / "clicks", tmp_path / "out"
    with slow_proxy(s3_server.endpoint, latency=0, bytes_per_second=0) as proxy:
        machine = MachineProcess(0, home_url, tmp_path, inp, out, _s3a_jars(),
                                 env={"AWS_ENDPOINT_URL": proxy.endpoint})
        try:
            machine.send(do="setup")
            machine.result()
            proxy.hold = re.compile(r"^GET \S*/checkpoint/state/\d+/\d+/_metadata/schema")
            machine.send(do="torture", seed=0, ops=["run"], deadline_s=600)
            wait_for(lambda: proxy.held_count() >= 1, 300, "a read of a state schema",
                     machine.log)
            api.jobs_stop(home, JOB)
            wait_for(lambda: "stop requested" in machine.log.read_text(), 60,
                     "the run to see the stop request", machine.log)
            proxy.release()
            [stopped] = machine.answer()
        finally:
            proxy.release()
            machine.stop()
    assert stopped["outcome"] == "ok", stopped
    assert api.job_view(home, JOB, details=False).status == "stopped"


def test_a_machine_behind_a_faulty_network_to_s3_loses_and_doubles_nothing(
    spark: object, s3_server: S3Server, tmp_path: Path
) -> None:
    """One machine runs, snapshots and drains a job on an S3 home while its network to the
    store (sparkpoint's own requests and Spark's s3a alike) fails requests with 500 and 503,
    cuts connections before they reach the store, and is slow to the job's lease: faults
    that the clients' retries absorb. The invariants are the torture's: every operation
    succeeds, every listed snapshot verifies, and the drained output is the input's, each
    window once. About two minutes on two cores."""
    home_url = f"s3://{s3_server.new_bucket()}/home"
    home = Home.resolve(home_url)
    inp, out = tmp_path / "input" / "clicks", tmp_path / "out"
    checkpoint = rf"/home/jobs/{JOB}/checkpoint/"
    with fault_proxy(s3_server.endpoint) as proxy:
        machine = MachineProcess(0, home_url, tmp_path, inp, out, _s3a_jars(),
                                 env={"AWS_ENDPOINT_URL": proxy.endpoint})
        try:
            machine.send(do="setup")
            machine.result()
            faults = [proxy.fail("PUT", r"/home/snapshots/", status=503, times=3),
                      proxy.drop("GET", r"/home/snapshots/", times=2),
                      proxy.fail("GET", checkpoint + "offsets/", status=500, times=2),
                      proxy.drop("PUT", checkpoint + "commits/", times=1),
                      proxy.fail("PUT", checkpoint + "state/", status=503, times=2),
                      proxy.delay(None, rf"/home/jobs/{JOB}/lease/", ms=200)]
            # A snapshot, a run of the next input file, a drain (a last batch emitting
            # every window left), each through the faults.
            machine.send(do="torture", seed=0, ops=["create", "run", "drain"], deadline_s=600)
            done = machine.answer()
        finally:
            machine.stop()
    print(f"operations: {json.dumps(done, indent=1)}")
    assert [(line["op"], line["outcome"]) for line in done] == \
        [("create", "ok"), ("run", "ok"), ("drain", "ok")], done
    # Every fault happened, each as often as it was set to.
    assert [len(rule.matched) for rule in faults[:-1]] == \
        [rule.times for rule in faults[:-1]], [rule.matched for rule in faults]
    assert faults[-1].matched
    assert output_rows(spark, out) == reference(inp)  # type: ignore[arg-type]
    created = {line["result"]["snapshot"] for line in done if line["result"].get("snapshot")}
    listed = [m.name for m in api.snapshot_list(home)]
    assert created and sorted(listed) == sorted(created)
    for name in listed:
        assert api.snapshot_verify(home, name) == [], name
