"""A job's lease in a home on S3 (moto's server) and HDFS (a MiniDFSCluster), and the kernel
lock of a local home: separate processes, each with its own identity (host name and working
copy), race for one job and exactly one holds it at a time.

On main before leases: a dead holder's lock was taken over by read, delete, create (two
takers could both win), and a lock in a shared home was never renewed, so a job running past
12 hours could be taken over while it ran and one whose machine died showed as running.

A lease's age is read on the store's clock (its generation's modification time against the
store's Date), never by comparing two machines' clocks; a holder is a process (host, boot,
pid namespace, pid and start time), so a pid seen free from another pid namespace does not
free a live lease.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from sparkpoint.crash_points import CRASH_ENV, CRASH_EXIT_CODE
from sparkpoint.errors import JobRunningError, LeaseLostError
from sparkpoint.runtime.lock import held_lease, job_lock, lease_store, lock_holder, lock_path
from sparkpoint.storage.fileio import join
from sparkpoint.storage.home import Home
from sparkpoint.storage.lease import (
    LEASE_LOG_ENV,
    STORE_CLOCK_RESOLUTION_S,
    LeaseRecord,
    LeaseStore,
)
from sparkpoint.storage.processes import ProcessIdentity, boot_id, pid_namespace
from sparkpoint.storage.stores import file_io
from tests.support.cli import wait_for

# One contender: waits for "go" on stdin, tries the job's lock once, reports, then holds it
# until its stdin gives "release" (or reports LEASE_LOST when a fence check fails).
CONTENDER = """
import json, sys
from sparkpoint.errors import SparkpointError
from sparkpoint.runtime.lock import held_lease, job_lock
from sparkpoint.storage.home import Home
home = Home.resolve(sys.argv[1])
print("ready", flush=True)
assert sys.stdin.readline().strip() == "go"
try:
    with job_lock(home, "j"):
        lease = held_lease(home, "j")
        print(json.dumps({"held": True, "token": lease.record.token if lease else None}),
              flush=True)
        for line in sys.stdin:
            if line.strip() == "check":
                if lease is not None:
                    lease.check()
                print(json.dumps({"checked": True}), flush=True)
            elif line.strip() == "fence":
                if lease is not None:
                    lease.fence()
                print(json.dumps({"fenced": True}), flush=True)
            else:
                break
except SparkpointError as exc:
    print(json.dumps({"held": False, "code": exc.code}), flush=True)
    sys.exit(exc.exit_code)
"""


def _home_of_kind(kind: str, request: pytest.FixtureRequest, tmp_path: Path) -> Home:
    if kind == "local":
        return Home.resolve(str(tmp_path / "home"))
    server: Any = request.getfixturevalue("s3_server" if kind == "s3" else "hdfs_server")
    for name, value in server.env.items():
        os.environ.setdefault(name, value)
    location = f"s3://{server.new_bucket()}/home" if kind == "s3" else \
        join(server.new_dir(), "home")
    return Home.resolve(location)


@pytest.fixture(params=["local", "s3", "hdfs"])
def shared_home(request: pytest.FixtureRequest, tmp_path: Path) -> Home:
    return _home_of_kind(request.param, request, tmp_path)


@pytest.fixture(params=["s3", "hdfs"])
def remote_home(request: pytest.FixtureRequest, tmp_path: Path) -> Home:
    """A home shared by machines: the lease is what holds a job there."""
    return _home_of_kind(request.param, request, tmp_path)


def _contender(home: Home, tmp_path: Path, identity: str,
               lease_seconds: float = 60.0) -> subprocess.Popen[str]:
    env = dict(os.environ, SPARKPOINT_HOST=identity,
               SPARKPOINT_SCRATCH=str(tmp_path / f"copy-{identity}"),
               SPARKPOINT_LEASE_SECONDS=str(lease_seconds))
    process = subprocess.Popen([sys.executable, "-c", CONTENDER, home.location], env=env,
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert process.stdout is not None and process.stdout.readline().strip() == "ready"
    return process


def _say(process: subprocess.Popen[str], line: str) -> dict[str, Any]:
    assert process.stdin is not None and process.stdout is not None
    process.stdin.write(line + "\n")
    process.stdin.flush()
    answer: dict[str, Any] = json.loads(process.stdout.readline())
    return answer


def _finish(process: subprocess.Popen[str]) -> int:
    assert process.stdin is not None
    if not process.stdin.closed:
        process.stdin.close()
    return process.wait(timeout=60)


def test_of_six_processes_racing_for_a_free_job_exactly_one_holds_it(
    shared_home: Home, tmp_path: Path
) -> None:
    for round_number in range(2):
        contenders = [_contender(shared_home, tmp_path, f"host-{round_number}-{i}")
                      for i in range(6)]
        # All are started and waiting: "go" to each, back to back.
        for process in contenders:
            assert process.stdin is not None
            process.stdin.write("go\n")
            process.stdin.flush()
        answers = []
        for process in contenders:
            assert process.stdout is not None
            answers.append(json.loads(process.stdout.readline()))
        held = [p for p, a in zip(contenders, answers, strict=True) if a["held"]]
        assert len(held) == 1, answers
        assert Counter(a.get("code") for a in answers if not a["held"]) == {"JOB_RUNNING": 5}
        codes = [_finish(p) for p in contenders]
        assert sorted(codes) == [0, 4, 4, 4, 4, 4]
        assert lock_holder(shared_home, "j") is None  # let go: free for the next round


def test_a_live_holder_is_refused_to_others_and_named(shared_home: Home, tmp_path: Path) -> None:
    holder = _contender(shared_home, tmp_path, "machine-a")
    assert _say(holder, "go")["held"]
    try:
        expected = -1 if shared_home.remote else holder.pid
        assert lock_holder(shared_home, "j") == expected
        with pytest.raises(JobRunningError) as refused, job_lock(shared_home, "j"):
            pytest.fail("two holders of one job")
        assert ("machine-a" if shared_home.remote else f"pid {holder.pid}") in \
            refused.value.message
        assert _say(holder, "check") == {"checked": True}  # the holder still holds it
    finally:
        assert _finish(holder) == 0
    with job_lock(shared_home, "j"):
        assert lock_holder(shared_home, "j") == os.getpid()


def test_a_holder_killed_outright_frees_a_local_job_at_once(tmp_path: Path) -> None:
    home = Home.resolve(str(tmp_path / "home"))
    holder = _contender(home, tmp_path, "here")
    assert _say(holder, "go")["held"]
    holder.kill()  # no chance to let go: the kernel does
    holder.wait(timeout=60)
    assert lock_holder(home, "j") is None
    with job_lock(home, "j"):
        assert lock_holder(home, "j") == os.getpid()


def _write_lease(home: Home, generation: int, holder: ProcessIdentity, length: float,
                 token: str = "t") -> None:
    store = lease_store(home, "j")
    record = LeaseRecord(generation=generation, token=token, holder=holder, length=length)
    store.io.write_bytes(store._url(generation), record.to_bytes())


def _elsewhere(host: str = "dead-machine", pid: int = 4242) -> ProcessIdentity:
    """A process on another machine: nothing about it can be told from here."""
    return ProcessIdentity(host, pid, "another-boot", "pid:[1]", 1)


def _gone_here() -> ProcessIdentity:
    """A process of this machine and pid namespace that has ended."""
    ended = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                           capture_output=True, text=True, check=True)
    return ProcessIdentity.current().__class__(
        ProcessIdentity.current().host, int(ended.stdout), boot_id(), pid_namespace(), 1)


def test_an_expired_lease_of_a_dead_machine_is_taken_over_and_the_job_shows_stopped(
    remote_home: Home, monkeypatch: pytest.MonkeyPatch
) -> None:
    _write_lease(remote_home, 7, _elsewhere(), length=0.5)
    # Expired only once its age on the store's clock is past its length and the clock's
    # resolution: the dead machine's clock, and this one's, play no part.
    wait_for(lambda: lock_holder(remote_home, "j") is None,
             0.5 + STORE_CLOCK_RESOLUTION_S + 5, "the lease to expire")
    said: list[str] = []
    with job_lock(remote_home, "j", echo=said.append):
        lease = held_lease(remote_home, "j")
        assert lease is not None and lease.record.generation == 8
        # The older generation was tidied.
        assert lease_store(remote_home, "j")._generations() == [8]
    assert said and "took over the lease left by pid 4242 on dead-machine" in said[0]
    assert "not renewed for" in said[0]
    # A job never recorded (nothing but its lease in the home) leaves no trace once let go.
    assert lease_store(remote_home, "j").current() == (0, None)


def test_a_lease_of_a_process_gone_from_this_machine_is_taken_at_once(
    remote_home: Home
) -> None:
    _write_lease(remote_home, 3, _gone_here(), length=3600)
    said: list[str] = []
    with job_lock(remote_home, "j", echo=said.append):
        lease = held_lease(remote_home, "j")
        assert lease is not None and lease.record.generation == 4
    assert said and "whose process is gone" in said[0]


def test_a_live_lease_of_another_pid_namespace_on_this_host_is_not_taken(
    remote_home: Home
) -> None:
    """A container sharing the host's network (and so its host name) holds the job: its pid
    is not visible from this pid namespace, which proves nothing. On main the lease was
    taken because that pid looked free here."""
    me = ProcessIdentity.current()
    other = ProcessIdentity(me.host, _gone_here().pid, boot_id(), "pid:[4026500000]", 77)
    _write_lease(remote_home, 5, other, length=3600)
    assert lock_holder(remote_home, "j") == -1
    with pytest.raises(JobRunningError, match=f"pid {other.pid} on {me.host}"), \
            job_lock(remote_home, "j"):
        pytest.fail("a live lease was taken")
    assert lease_store(remote_home, "j")._generations() == [5]


def test_a_lease_whose_pid_was_reused_by_a_later_process_is_free(remote_home: Home) -> None:
    """A restarted container's process gets the dead run's pid: the start time tells them
    apart. On main the record counted as held while any process had its pid."""
    me = ProcessIdentity.current()
    dead_run = ProcessIdentity(me.host, os.getpid(), me.boot_id, me.pid_namespace,
                               (me.start_ticks or 0) - 1)
    _write_lease(remote_home, 2, dead_run, length=3600)
    assert lock_holder(remote_home, "j") is None
    with job_lock(remote_home, "j"):
        lease = held_lease(remote_home, "j")
        assert lease is not None and lease.record.generation == 3


def test_a_takeover_cut_off_after_taking_the_lease_holds_it_until_it_expires(
    remote_home: Home, tmp_path: Path
) -> None:
    """Crash point lease.taken: a taker that dies right after its conditional create leaves
    its generation beside the older ones; it holds the job (it may have begun to work) until
    it expires, then the next taker takes over and removes every older generation."""
    _write_lease(remote_home, 3, _elsewhere(), length=0.1)
    wait_for(lambda: lock_holder(remote_home, "j") is None, 10, "the lease to expire")
    cut = subprocess.run([sys.executable, "-c", CONTENDER, remote_home.location], input="go\n",
                         capture_output=True, text=True, timeout=120,
                         env=dict(os.environ, SPARKPOINT_HOST="machine-a",
                                  SPARKPOINT_LEASE_SECONDS="6", **{CRASH_ENV: "lease.taken"}))
    assert cut.returncode == CRASH_EXIT_CODE, cut.stderr
    store = lease_store(remote_home, "j")
    assert store._generations() == [3, 4]
    generation, record = store.current()
    assert generation == 4 and record is not None and record.host == "machine-a"
    # The cut-off taker's lease lasts its length: the job is held by machine-a until then
    # (another machine's view: its pid cannot be seen from there).
    os.environ["SPARKPOINT_HOST"] = "machine-b"
    try:
        with pytest.raises(JobRunningError, match="machine-a"), job_lock(remote_home, "j"):
            pytest.fail("a live lease was taken")
        wait_for(lambda: lock_holder(remote_home, "j") is None, 30, "the lease to expire")
    finally:
        del os.environ["SPARKPOINT_HOST"]
    said: list[str] = []
    with job_lock(remote_home, "j", echo=said.append):
        lease = held_lease(remote_home, "j")
        assert lease is not None and lease.record.generation == 5
        assert store._generations() == [5]
        lease.check()
    assert said and "took over the lease left by pid" in said[0] and "machine-a" in said[0]


def test_a_lease_renewed_by_its_holder_outlives_its_length(
    remote_home: Home, tmp_path: Path
) -> None:
    holder = _contender(remote_home, tmp_path, "machine-a", lease_seconds=2.0)
    assert _say(holder, "go")["held"]
    try:
        # The scenario is time itself: hold for three lease lengths.
        time.sleep(6.0)
        assert lock_holder(remote_home, "j") == -1
        with pytest.raises(JobRunningError, match="machine-a"), job_lock(remote_home, "j"):
            pytest.fail("a renewed lease was taken")
        assert _say(holder, "check") == {"checked": True}
    finally:
        assert _finish(holder) == 0


def test_a_holder_frozen_past_its_lease_is_fenced_out_and_writes_nothing(
    remote_home: Home, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    holder = _contender(remote_home, tmp_path, "machine-a", lease_seconds=1.5)
    first = _say(holder, "go")
    assert first["held"]
    os.kill(holder.pid, signal.SIGSTOP)
    try:
        monkeypatch.setenv("SPARKPOINT_HOST", "machine-b")
        monkeypatch.setenv("SPARKPOINT_SCRATCH", str(tmp_path / "copy-b"))
        # The scenario: frozen for longer than its lease, as the store's clock tells.
        wait_for(lambda: lock_holder(remote_home, "j") is None, 30, "the lease to expire")
        said: list[str] = []
        with job_lock(remote_home, "j", echo=said.append):
            mine = held_lease(remote_home, "j")
            assert mine is not None
            os.kill(holder.pid, signal.SIGCONT)
            answer = _say(holder, "check")
            assert answer == {"held": False, "code": "LEASE_LOST"}
            assert _finish(holder) == LeaseLostError.exit_code == 4
            mine.check()  # still ours: the fenced-out holder wrote nothing over it
        assert "took over the lease left by" in said[0] and "machine-a" in said[0]
    finally:
        if holder.poll() is None:
            os.kill(holder.pid, signal.SIGCONT)
            holder.kill()


def test_the_lease_log_has_each_holding_from_taken_to_let_go(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SPARKPOINT_LEASE_LOG: one line when a lease is taken and one when it is let go,
    released or found lost to a taker, with its token and times (what the torture test checks
    for overlaps); without the variable nothing is logged."""
    store = LeaseStore(file_io(str(tmp_path)), str(tmp_path / "lease"), "j")
    store.acquire(echo=print, length=60).release()
    log = tmp_path / "leases.jsonl"
    monkeypatch.setenv(LEASE_LOG_ENV, str(log))
    first = store.acquire(echo=print, length=60)
    first.release()
    second = store.acquire(echo=print, length=60)
    # A taker wins the next generation behind the holder's back (as after it froze).
    taker = LeaseRecord(generation=second.record.generation + 1, token="taker",
                        holder=_elsewhere("other", 1), length=60)
    assert store.io.create_exclusive(store._url(taker.generation), taker.to_bytes())
    second.release()

    lines = [json.loads(text) for text in log.read_text().splitlines()]
    assert [(line["event"], line["token"], line.get("outcome")) for line in lines] == [
        ("acquired", first.record.token, None), ("released", first.record.token, "released"),
        ("acquired", second.record.token, None), ("released", second.record.token, "lost")]
    assert [line["generation"] for line in lines] == [3, 3, 5, 5]
    assert all(line["job"] == "j" and line["pid"] == os.getpid() for line in lines)
    assert lines[0]["wall"] <= lines[1]["held_until"] <= lines[2]["wall"] \
        <= lines[3]["held_until"] <= time.time()


def test_a_refusal_is_not_preceded_by_a_takeover_notice(remote_home: Home) -> None:
    """This machine's kernel lock file was left by a run that died, while another machine
    holds the job's lease: the one line said is the refusal, naming that machine. On main
    "took over the lock left by an interrupted run" was printed first."""
    path = lock_path(remote_home, "j")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(_gone_here().to_record()))
    _write_lease(remote_home, 4, _elsewhere("machine-b", 77), length=3600)
    said: list[str] = []
    with pytest.raises(JobRunningError, match="pid 77 on machine-b") as refused, \
            job_lock(remote_home, "j", echo=said.append):
        pytest.fail("a live lease was taken")
    assert said == [], said
    assert "took over" not in refused.value.message


def test_a_take_that_recreates_a_generation_tidied_away_meanwhile_does_not_hold(
    remote_home: Home,
) -> None:
    """Between a taker's listing (generation N let go) and its create of N+1, another
    process takes N+1, lets go with N+2 and tidies N+1 away: the create of N+1 then succeeds,
    beneath N+2. Found by the torture on HDFS under load: the late taker believed it held the
    job while a third process took the lease over the let-go N+2 (two holders at once)."""
    lease_dir = join(remote_home.job_url("j"), "lease")
    io = file_io(lease_dir)
    LeaseStore(io, lease_dir, "j").acquire(print).release()  # N let go

    class ListsThenWaits(LeaseStore):
        """A taker whose first listing is followed, before its create, by another process's
        whole holding: taken, let go, tidied."""

        interleaved = False

        def view(self):  # type: ignore[no-untyped-def]
            seen = super().view()
            if not self.interleaved:
                self.interleaved = True
                LeaseStore(io, lease_dir, "j").acquire(print).release()
            return seen

    late = ListsThenWaits(io, lease_dir, "j").acquire(print)
    try:
        # It holds the newest generation, as every other process sees it.
        view = LeaseStore(io, lease_dir, "j").view()
        assert view.generation == late.record.generation
        assert not view.free() and view.record is not None
        assert view.record.token == late.record.token
        late.check()
    finally:
        late.release()
