"""Edges of a held lease on a local home (storage/lease.py): the renewing thread's pace
(a third of the length between renewals, RETRY_S between tries after a store error, never a
storm of requests), a thread that does not keep a process alive, listeners that can be
unregistered and are told the truth when they register late, a late renewal's let-go that
fails at the store, and a lease that ended with its job.

The protocol between holders and takers (S3, HDFS, local, processes racing) is tested in
test_job_lease.py and test_lease_renewal.py; these are what a mutation run of lease.py
(benchmarks/mutation.py) found no test reached.
"""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from sparkpoint.errors import LeaseLostError
from sparkpoint.storage.lease import RETRY_S, Lease, LeaseRecord, LeaseStore, holder_margin
from sparkpoint.storage.stores import file_io
from tests.support.cli import wait_for


@pytest.fixture
def directory(tmp_path: Path) -> str:
    return str(tmp_path / "jobs" / "j" / "lease")


def _take(directory: str, length: float) -> Lease:
    return LeaseStore(file_io(directory), directory, "j").acquire(print, length=length)


def test_the_renewing_thread_keeps_the_lease_renewing_a_third_of_its_length_apart(
    directory: str
) -> None:
    """Held past three times its length by its thread alone, each renewal a third of the
    length after the one before (not sooner: a lease is not a storm of requests)."""
    length = 1.2  # the holder's deadline is 1.0 s after a renewal is sent
    lease = _take(directory, length)
    took = lease.sent
    sent: list[float] = []
    create = lease._create

    def recorded(record: LeaseRecord) -> bool:
        sent.append(time.monotonic())
        return create(record)

    lease._create = recorded  # type: ignore[method-assign]
    lease.start_renewing()
    wait_for(lambda: lease.record.generation >= 5, 30, "four renewals")
    lease.check()
    assert not lease.lost.is_set()
    starts = [took, *sent[:4]]
    assert all(later - earlier >= length / 3 - 0.01
               for earlier, later in itertools.pairwise(starts)), starts
    lease.release()


def test_renewals_that_fail_are_tried_again_every_retry_not_at_once(
    directory: str
) -> None:
    """A store that does not answer: the thread tries again every RETRY_S (or a third of
    the length, if shorter) until the deadline, then the lease is lost."""
    length = 3.0
    lease = _take(directory, length)
    tries: list[float] = []

    def unanswered(_record: LeaseRecord) -> bool:
        tries.append(time.monotonic())
        raise OSError("the store did not answer")

    lease._create = unanswered  # type: ignore[method-assign]
    lost = threading.Event()
    lease.on_lost(lost.set)
    lease.start_renewing()
    assert lost.wait(30), "the holder was never told"
    retry = min(RETRY_S, length / 3)
    # The first try a third of the length after the take, then one every retry until the
    # deadline: at most this many, however slow the machine.
    most = 1 + int((length - holder_margin(length) - length / 3) / retry) + 1
    assert 1 <= len(tries) <= most, tries
    assert all(later - earlier >= retry - 0.01
               for earlier, later in itertools.pairwise(tries)), tries
    lease.release()


def test_a_process_holding_a_renewed_lease_exits_when_its_work_ends(directory: str) -> None:
    """The renewing thread is a daemon: a command that ends without letting go (an error
    on its way out) is not kept alive by it; its lease expires."""
    script = (
        "import sys, threading\n"
        "from sparkpoint.storage.lease import LeaseStore\n"
        "from sparkpoint.storage.stores import file_io\n"
        "d = sys.argv[1]\n"
        "lease = LeaseStore(file_io(d), d, 'j').acquire(print, length=60)\n"
        "lease.start_renewing()\n"
        "print(sorted(t.name for t in threading.enumerate() if t.daemon))\n")
    done = subprocess.run([sys.executable, "-c", script, directory], capture_output=True,
                          text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    assert "'sparkpoint-lease-j'" in done.stdout


def test_listeners_unregistered_are_told_nothing_more(directory: str) -> None:
    lease = _take(directory, 60)
    lost: list[str] = []
    told: list[float | None] = []
    stop_losing = lease.on_lost(lambda: lost.append("lost"))
    stop_telling = lease.on_deadline(told.append)
    stop_losing()
    stop_telling()
    lease.renew()
    lease.deadline = time.monotonic() - 1
    with pytest.raises(LeaseLostError):
        lease.fence()
    assert lost == [] and told == [told[0]]
    lease.release()


def test_a_listener_registered_after_the_end_is_told_it_is_not_held(directory: str) -> None:
    lost_lease = _take(directory, 60)
    lost_lease.deadline = time.monotonic() - 1
    with pytest.raises(LeaseLostError):
        lost_lease.fence()
    told_lost: list[float | None] = []
    lost_lease.on_deadline(told_lost.append)
    assert told_lost == [None]
    lost_lease.release()
    released = _take(f"{directory}-of-another-job", 60)
    released.release()
    told_released: list[float | None] = []
    released.on_deadline(told_released.append)
    assert told_released == [None]


def test_a_late_renewal_whose_let_go_fails_at_the_store_is_still_a_lost_lease(
    directory: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its renewal confirmed after the deadline, the holder lets that generation go; when
    the store refuses that too, the holder still learns only that it lost the lease (the
    generation then expires)."""
    lease = _take(directory, 60)
    io = lease.store.io
    create = io.create_exclusive

    def late_then_failing(location: str, data: bytes) -> bool:
        if json.loads(data)["released"]:
            raise OSError("the store did not answer")
        made = create(location, data)
        lease.deadline = time.monotonic() - 1  # the answer came after the deadline
        return made

    monkeypatch.setattr(io, "create_exclusive", late_then_failing)
    with pytest.raises(LeaseLostError, match="confirmed after"):
        lease.renew()
    assert lease.lost.is_set()


def test_a_lease_that_ended_with_its_job_writes_nothing_when_released(
    directory: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``jobs delete`` removes the lease's files after ``gone_with_job``: the release that
    follows (the lock's) writes no generation into the deleted job and reports no loss."""
    log = tmp_path / "leases.jsonl"
    monkeypatch.setenv("SPARKPOINT_LEASE_LOG", str(log))
    lease = _take(directory, 60)
    lost: list[Any] = []
    lease.on_lost(lambda: lost.append("lost"))
    lease.gone_with_job()
    io = lease.store.io
    for name in io.list_names(directory):
        io.delete(f"{directory}/{name}")
    lease.release()
    assert io.list_names(directory) == [] and lost == [] and not lease.lost.is_set()
    events = [(line["event"], line.get("outcome"))
              for line in map(json.loads, log.read_text().splitlines())]
    assert events == [("acquired", None), ("released", "deleted")]  # let go once


def test_listeners_that_fail_stop_neither_the_loss_nor_the_others(directory: str) -> None:
    """Stopping a query is best effort: a listener that raises does not keep the lease from
    being lost, nor the other listeners from hearing of it, nor a renewal from counting."""
    lease = _take(directory, 60)
    heard: list[Any] = []
    registered = False

    def failing(*_args: Any) -> None:
        if registered:
            raise RuntimeError("the query was already gone")

    lease.on_lost(failing)
    lease.on_deadline(failing)
    lease.on_lost(lambda: heard.append("lost"))
    lease.on_deadline(heard.append)
    registered = True
    lease.renew()
    assert heard[-1] == lease.deadline
    lease.deadline = time.monotonic() - 1
    with pytest.raises(LeaseLostError):
        lease.fence()
    assert heard[-2:] == ["lost", None]
    lease.release()


def test_a_renewal_tried_again_after_its_answer_was_lost_counts_from_its_first_send(
    directory: str
) -> None:
    """The create landed but its answer was lost (a store error): the renewal tried again
    finds its own generation, and the deadline runs from when it was first sent, not from
    the retry (later: past what the store's clock allows)."""
    lease = _take(directory, 60)
    create = lease._create
    sent: list[float] = []

    def answer_lost_once(record: LeaseRecord) -> bool:
        sent.append(time.monotonic())
        made = create(record)
        if len(sent) == 1:
            raise OSError("connection reset")
        return made

    lease._create = answer_lost_once  # type: ignore[method-assign]
    with pytest.raises(OSError):
        lease.renew()
    time.sleep(0.05)  # the retry is sent measurably later than the first attempt
    lease.renew()
    assert lease.record.generation == 2
    assert lease.deadline <= sent[0] + 60 - holder_margin(60)
    lease.release()


def test_a_release_does_not_wait_for_ever_on_a_renewal_stuck_in_a_request(
    directory: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A renewal hangs in a request that never answers: letting go waits for it at most a
    lease's length (by then the renewal can no longer count), then goes on; the audit log
    says the holding ended lost."""
    log = tmp_path / "leases.jsonl"
    monkeypatch.setenv("SPARKPOINT_LEASE_LOG", str(log))
    lease = _take(directory, 1.5)
    stuck, go = threading.Event(), threading.Event()
    create = lease._create

    def hanging(record: LeaseRecord) -> bool:
        stuck.set()
        go.wait(120)
        return create(record)

    lease._create = hanging  # type: ignore[method-assign]
    lease.start_renewing()
    assert stuck.wait(30)
    released = threading.Thread(target=lease.release)
    released.start()
    released.join(30)
    try:
        assert not released.is_alive(), "the release waited on the stuck renewal"
        assert lease.lost.is_set()
        let_go = [json.loads(line) for line in log.read_text().splitlines()][-1]
        assert (let_go["event"], let_go["outcome"]) == ("released", "lost")
    finally:
        go.set()
        released.join(60)
