"""One machine of the concurrency torture test (tests/integration/test_home_torture.py).

A process of its own, with the identity the test gives it in its environment
(``SPARKPOINT_HOST``, ``SPARKPOINT_SCRATCH``, ``SPARKPOINT_LEASE_LOG``), changing one job in one
home through sparkpoint's API, with one Spark session for all its runs and drains (a JVM per
command would not fit the suite's time on two cores).

    python -m tests.support.torture_machine HOME JOB INDEX INPUT OUTPUT [S3A_JARS]

Commands come on stdin, one JSON object a line; each is answered on stdout by lines
``TORTURE {json}``, the last one ``{"done": <command>}``:

- ``{"do": "spark"}``: start its Spark session now (before the torture, not during it).
- ``{"do": "setup"}``: write the first input files, run the job until caught up.
- ``{"do": "torture", "seed": S, "ops": [...], "deadline_s": T}``: the operations in order
  (``create``, ``cancel``, ``delete``, ``verify``, ``startpoint``, ``run``, ``stop``,
  ``drain``, ``crash``), none
  begun after T seconds; one line per operation with its outcome: ``ok``, the error code of a
  SparkpointError with its exit code, or ``traceback``.
  ``crash`` is a machine dying while it holds the job: a ``snapshot create`` in a process
  of its own, on a host of its own, ended right after it took the job's lease (crash point
  lease.taken), so that the lease stays until it expires and the others must wait for that.
  Its holding is written into this machine's lease log as let go when the process was seen
  dead.
  ``restart`` is a container restarted after it died holding the job: the same dying
  ``snapshot create``, run as pid 7 of a pid namespace of its own under the machine's
  container host name, then the command again in a fresh namespace with that same host name
  and pid, which must go on once the dead holder's lease expires (never refused for ever
  because the dead run's pid is its own).
  ``recreate`` is a ``jobs delete`` cut off, then a new job of the same name: this machine's
  side job (``again-m<index>``) run until caught up, deleted by a process that dies at one of
  the deletion's crash points, ``jobs list``, and the job run again into an output of its
  own, which must start from nothing (batch 0) and stay listed.
- ``{"do": "finish"}``: once no live lease holds the job, run it until caught up, then
  drain it.
- ``{"do": "start_from", "snapshot": S, "job": J, "output": DIR}``: start job J from snapshot
  S into DIR, run it until caught up, drain it.
"""

from __future__ import annotations

import fcntl
import json
import os
import random
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sparkpoint import api
from sparkpoint.crash_points import CRASH_ENV, CRASH_EXIT_CODE
from sparkpoint.errors import SparkpointError
from sparkpoint.runtime.lock import lock_holder
from sparkpoint.storage.home import Home
from sparkpoint.storage.lease import LEASE_LOG_ENV, lease_seconds
from sparkpoint.testing import clicks_for_slice
from tests.support.faults import in_fresh_pid_namespace

JOB_FILE = Path(__file__).resolve().parents[1] / "data" / "jobs" / "clicks_counted_once.py"
QUERY_CONF = {"spark.sql.shuffle.partitions": "2"}
# Startpoints that change nothing a reference could not predict: each reads every file the
# job has read again (and skips none), and the job counts every event once however often it
# is read (tests/data/jobs/clicks_counted_once.py).
# The pid a restarted container's process has in each of its starts.
CONTAINER_PID = 7
# Where a cut-off 'jobs delete' of a home in a store stops (crash_points.py).
DELETE_CUT_OFF_AT = ("jobs.delete_tombstoned", "jobs.delete_files_removed")
REREAD_EVERYTHING: list[tuple[Any, str | None]] = [
    ("earliest", None), ("timestamp", "2001-01-01T00:00:00Z"), ("offset", '{"logOffset":-1}')]


def say(**line: Any) -> None:
    print("TORTURE " + json.dumps(line, default=str), flush=True)


def log(line: str) -> None:
    """What a command says on the way, to stderr (the machine's log)."""
    print(line, file=sys.stderr, flush=True)


def append_input(input_dir: Path, files: int) -> list[int]:
    """Write the next ``files`` 20-minute slices of clicks, in event-time order, as any
    machine's turn comes: under a lock shared by the test's processes, each file strictly
    newer than the last (Spark's file source reads files in modification-time order, in
    milliseconds; a slice read after a later one would be late and dropped)."""
    input_dir.mkdir(parents=True, exist_ok=True)
    state_file = input_dir.parent / "input-state.json"
    with open(input_dir.parent / "input.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        state = json.loads(state_file.read_text()) if state_file.exists() else \
            {"next": 0, "mtime_ns": 0}
        written = []
        for _ in range(files):
            index = state["next"]
            tmp = input_dir / f".clicks-{index:05d}.json.tmp"
            tmp.write_text("\n".join(c.to_json() for c in clicks_for_slice(index)) + "\n")
            mtime = max(time.time_ns(), state["mtime_ns"] + 2_000_000)
            os.utime(tmp, ns=(mtime, mtime))
            os.replace(tmp, input_dir / f"clicks-{index:05d}.json")
            state = {"next": index + 1, "mtime_ns": mtime}
            written.append(index)
        state_file.write_text(json.dumps(state))
    return written


class CommandRefused(SparkpointError):
    """A refusal of a command this machine ran in a process of its own."""

    def __init__(self, code: str, exit_code: int, message: str) -> None:
        super().__init__(message)
        self.code, self.exit_code = code, exit_code


def refusal(done: subprocess.CompletedProcess[str]) -> CommandRefused:
    """A command's refusal, from its JSON answer (a traceback has none: it fails here)."""
    error = json.loads(done.stdout)["error"]
    return CommandRefused(error["code"], done.returncode, error["message"])


class Machine:
    def __init__(self, home: Home, job: str, index: int, input_dir: Path, output: Path,
                 jars: str | None) -> None:
        self.home, self.job, self.index = home, job, index
        self.input, self.output, self.jars = input_dir, output, jars
        self._spark: Any = None

    @property
    def spark(self) -> Any:
        if self._spark is None:
            from sparkpoint.spark.s3a import s3a_conf
            from sparkpoint.spark.session import create_session

            conf = dict(QUERY_CONF)
            if self.jars:
                conf = {**conf, **s3a_conf(self.home.location, {"spark.jars": self.jars}),
                        "spark.jars": self.jars}
            self._spark = create_session("local[2]", conf, f"torture-{self.index}")
        return self._spark

    def params(self, output: Path | None = None) -> dict[str, str]:
        return {"input": str(self.input), "output": str(output or self.output),
                "files_per_batch": "1"}

    def run(self, job: str | None = None, output: Path | None = None,
            from_snapshot: str | None = None) -> dict[str, Any]:
        result = api.run(self.home, JOB_FILE, job or self.job, params=self.params(output),
                         conf=QUERY_CONF, from_snapshot=from_snapshot, until_caught_up=True,
                         spark=self.spark, echo=log)
        return {"first_batch": result.first_batch, "last_batch": result.last_batch,
                "batches": result.batches_run}

    def drain(self, job: str | None = None, snapshot: str | None = None) -> dict[str, Any]:
        drained = api.drain(self.home, job or self.job, snapshot=snapshot, spark=self.spark,
                            echo=log)
        return {"batch": drained.batch, "snapshot": drained.snapshot}

    def operation(self, op: str, name: str, rng: random.Random) -> dict[str, Any]:
        """One operation of the torture; returns what it did (raises what it refused)."""
        if op in ("create", "cancel"):
            # cancel: a running job (on any machine) is asked to stop first, as Flink's
            # cancel with savepoint.
            manifest = api.snapshot_create(self.home, self.job, name, cancel=op == "cancel",
                                           echo=log)
            return {"snapshot": name, "batch": manifest.batch_id}
        if op in ("delete", "verify"):
            listed = sorted(m.name for m in api.snapshot_list(self.home))
            if not listed:
                return {"snapshot": None}
            chosen = rng.choice(listed)
            if op == "delete":
                api.snapshot_delete(self.home, chosen)
                return {"snapshot": chosen}
            problems = api.snapshot_verify(self.home, chosen)
            return {"snapshot": chosen, "problems": [str(p) for p in problems]}
        if op == "startpoint":
            kind, value = rng.choice(REREAD_EVERYTHING)
            preview = api.startpoint_set(self.home, self.job, "clicks", kind, value)
            return {"set_id": preview.startpoints[-1].set_id, "kind": kind}
        if op == "run":
            return {"input": append_input(self.input, 1), **self.run()}
        if op == "stop":
            return api.jobs_stop(self.home, self.job)
        if op == "drain":
            return self.drain(snapshot=name if rng.random() < 0.5 else None)
        if op == "crash":
            return self.die_holding_the_job(name)
        if op == "restart":
            return self.restart_after_dying(name)
        if op == "recreate":
            return self.recreate_after_a_cut_off_delete(name, rng)
        raise ValueError(f"unknown operation {op!r}")

    def die_holding_the_job(self, name: str, host: str | None = None,
                            wrap: Callable[[list[str]], list[str]] = lambda argv: argv,
                            ) -> dict[str, Any]:
        """See ``crash`` in the module's docs. A snapshot create takes the job's lease only
        when the job is not running: otherwise it is an ordinary create (or a refusal)."""
        host = host or f"{os.environ.get('SPARKPOINT_HOST', 'machine')}-died-{name}"
        done = self.cli(["snapshot", "create", self.job, name], host, wrap,
                        **{CRASH_ENV: "lease.taken"})
        if done.returncode == 0:
            return {"snapshot": name}
        if done.returncode != CRASH_EXIT_CODE:
            raise refusal(done)
        [taken] = self.seen_dead(host, None, "died")
        return {"died_holding": taken["generation"], "expires_at": taken["expires_at"]}

    def seen_dead(self, host: str, pid: int | None, outcome: str) -> list[dict[str, Any]]:
        """The holdings a process of ``host`` (and ``pid``) that was just seen dead never let
        go, written into this machine's lease log as let go now, with ``outcome``: ``died``
        for a holder no one can prove gone (its lease holds until it expires), ``crashed``
        for one whose host and pid namespace are this machine's (it is provably gone)."""
        seen_dead, seen_dead_monotonic = time.time(), time.monotonic()
        lease_log = Path(os.environ[LEASE_LOG_ENV])
        lines = [json.loads(text) for text in lease_log.read_text().splitlines()]
        # Holdings never let go: a container's earlier ones, under the same host name, were.
        let_go = {line["token"] for line in lines if line["event"] != "acquired"}
        taken = [line for line in lines if line["event"] == "acquired"
                 and line["host"] == host and line["token"] not in let_go
                 and pid in (None, line["pid"])]
        assert taken, f"no holding of {host} ({pid}) left in {lease_log}"
        with open(lease_log, "a", encoding="utf-8") as handle:
            for line in taken:
                handle.write(json.dumps({**line, "event": "released", "outcome": outcome,
                                         "held_until": seen_dead,
                                         "held_until_monotonic": seen_dead_monotonic}) + "\n")
        return taken

    def cli(self, args: list[str], host: str,
            wrap: Callable[[list[str]], list[str]] = lambda argv: argv,
            **env: str) -> subprocess.CompletedProcess[str]:
        """A sparkpoint command in a process of its own, as host ``host``; its pid is the
        answer's ``args[0]`` (not wrapped) once it ended."""
        argv = wrap([sys.executable, "-m", "sparkpoint.cli.main", "--home",
                     self.home.location, *args, "--json"])
        with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env=dict(os.environ, SPARKPOINT_HOST=host, **env)) as process:
            out, err = process.communicate(timeout=300)
        log(err)
        return subprocess.CompletedProcess([process.pid], process.returncode, out, err)

    def restart_after_dying(self, name: str) -> dict[str, Any]:
        """See ``restart`` in the module's docs."""
        host = f"{os.environ.get('SPARKPOINT_HOST', 'machine')}-container"

        def container(argv: list[str]) -> list[str]:
            return in_fresh_pid_namespace(argv, pid=CONTAINER_PID)

        died = self.die_holding_the_job(name, host, container)
        if "died_holding" not in died:
            return died  # the job was running elsewhere: nothing died holding it
        again = self.cli(["snapshot", "create", self.job, f"{name}-r"], host, container)
        if again.returncode != 0:
            raise refusal(again)
        return {**died, "snapshot": f"{name}-r"}

    def recreate_after_a_cut_off_delete(self, name: str, rng: random.Random) -> dict[str, Any]:
        """See ``recreate`` in the module's docs."""
        job = f"again-m{self.index}"
        # Three files at least, so that its first window is closed and written by then.
        written = append_input(self.input, 1)
        first = self.run(job, self.output.parent / f"{job}-{name}-old")
        cut_at = rng.choice(DELETE_CUT_OFF_AT)
        # Cut off on this machine (as a Ctrl-C'd delete would be): a holder here that is
        # provably gone holds nothing.
        deleted = self.cli(["jobs", "delete", job], os.environ["SPARKPOINT_HOST"],
                           **{CRASH_ENV: cut_at})
        if deleted.returncode != CRASH_EXIT_CODE:
            raise refusal(deleted)
        self.seen_dead(os.environ["SPARKPOINT_HOST"], deleted.args[0], "crashed")
        listed = sorted(view.record.name for view in api.jobs_list(self.home))
        output = self.output.parent / f"{job}-{name}-new"
        second = self.run(job, output)
        still = sorted(view.record.name for view in api.jobs_list(self.home))
        return {"input": written, "job": job, "cut_off_at": cut_at, "old": first,
                "new": second, "listed_after_delete": listed, "listed_after_run": still,
                "old_output": str(self.output.parent / f"{job}-{name}-old"),
                "output": str(output)}

    def wait_until_free(self) -> None:
        """Until no live lease holds the job (a machine that died holding it: its lease)."""
        deadline = time.monotonic() + 3 * lease_seconds()
        while lock_holder(self.home, self.job) is not None and time.monotonic() < deadline:
            time.sleep(0.5)

    def torture(self, seed: int, ops: list[str], deadline_s: float) -> None:
        rng = random.Random(seed * 1000 + self.index)
        began = time.monotonic()
        for number, op in enumerate(ops):
            if time.monotonic() - began > deadline_s:
                say(skipped=ops[number:])
                return
            name = f"m{self.index}-{number}"
            line: dict[str, Any] = {"machine": self.index, "number": number, "op": op,
                                    "began": time.time()}
            try:
                line["result"] = self.operation(op, name, rng)
                line["outcome"] = "ok"
            except SparkpointError as exc:
                line.update(outcome=exc.code, exit_code=exc.exit_code, message=exc.message)
            except Exception:
                line.update(outcome="traceback", message=traceback.format_exc())
            line["ended"] = time.time()
            say(**line)


def main(argv: list[str]) -> None:
    home_url, job, index, input_dir, output = argv[:5]
    machine = Machine(Home.resolve(home_url), job, int(index), Path(input_dir), Path(output),
                      argv[5] if len(argv) > 5 else None)
    commands: dict[str, Callable[..., Any]] = {
        "spark": lambda: {"spark": machine.spark.version},
        "setup": lambda: {"input": append_input(machine.input, 2), **machine.run()},
        "torture": machine.torture,
        "finish": lambda: (machine.wait_until_free(),
                           {"run": machine.run(), "drain": machine.drain()})[1],
        "start_from": lambda snapshot, job, output: {
            "run": machine.run(job, Path(output), from_snapshot=snapshot),
            "drain": machine.drain(job)},
    }
    for text in sys.stdin:
        command = json.loads(text)
        what = command.pop("do")
        began = time.monotonic()
        try:
            result = commands[what](**command)
            if result is not None:
                say(result=result, seconds=round(time.monotonic() - began, 1))
        except SparkpointError as exc:
            say(outcome=exc.code, exit_code=exc.exit_code, message=exc.message)
        except Exception:
            say(outcome="traceback", message=traceback.format_exc())
        say(done=what)


if __name__ == "__main__":
    main(sys.argv[1:])
