"""A lease's renewal is a conditional create of the next generation, counted only when it is
confirmed before the holder's deadline, and the deadline runs from when it was sent.

Each test holds the renewal's write at the store (a paused request: the holder's process goes
on, only that request waits) while another process acts, then lets it through.

On main before this change a renewal checked the store, then rewrote the holder's own
generation: a renewal paused between the two, landing after another machine took the lease,
still extended the old holder's deadline (its fence passed while the taker ran the job), and
a renewal confirmed late counted.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sparkpoint.errors import LeaseLostError
from sparkpoint.storage.fileio import FileIO
from sparkpoint.storage.lease import (
    STORE_CLOCK_RESOLUTION_S,
    Lease,
    LeaseStore,
    holder_margin,
)
from sparkpoint.storage.stores import file_io
from tests.support.cli import wait_for


class HeldWrites:
    """A FileIO whose next write into the lease's directory, once armed, waits at the store
    until the test lets it through (as a request stuck in a slow network would)."""

    def __init__(self, io: FileIO) -> None:
        self.io = io
        self.armed = False
        self.arrived = threading.Event()
        self.go = threading.Event()
        self.sent_at: float | None = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self.io, name)

    def _maybe_hold(self) -> None:
        if self.armed:
            self.armed = False
            self.sent_at = time.monotonic()
            self.arrived.set()
            assert self.go.wait(60), "the test never let the held write through"

    def create_exclusive(self, location: str, data: bytes) -> bool:
        self._maybe_hold()
        return self.io.create_exclusive(location, data)

    def write_bytes(self, location: str, data: bytes) -> None:
        self._maybe_hold()
        self.io.write_bytes(location, data)


@pytest.fixture(params=["local", "s3"])
def directory(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "local":
        yield str(tmp_path / "lease")
        return
    server: Any = request.getfixturevalue("s3_server")
    for name, value in server.env.items():
        os.environ.setdefault(name, value)
    yield f"s3://{server.new_bucket()}/jobs/j/lease"


def _renew_in_background(lease: Lease) -> tuple[threading.Thread, list[BaseException]]:
    failures: list[BaseException] = []

    def renew() -> None:
        try:
            lease.renew()
        except BaseException as exc:
            failures.append(exc)

    thread = threading.Thread(target=renew)
    thread.start()
    return thread, failures


def test_a_renewal_held_until_another_process_took_the_lease_does_not_extend_the_holder(
    directory: str
) -> None:
    io = file_io(directory)
    held = HeldWrites(io)
    holder = LeaseStore(held, directory, "j").acquire(print, length=1.0)  # type: ignore[arg-type]
    held.armed = True
    thread, failures = _renew_in_background(holder)
    assert held.arrived.wait(30)
    # Meanwhile the lease expires on the store's clock and another machine takes it.
    other = LeaseStore(io, directory, "j")
    wait_for(lambda: other.view().free(), 1.0 + STORE_CLOCK_RESOLUTION_S + 10,
             "the lease to expire")
    taker = other.acquire(print, length=60)
    held.go.set()
    thread.join(60)
    assert len(failures) == 1 and isinstance(failures[0], LeaseLostError), failures
    # The old holder's own fence refuses, without asking the store: its deadline was never
    # extended by the renewal that lost.
    with pytest.raises(LeaseLostError):
        holder.fence()
    taker.check()  # the taker still holds it, alone
    assert other.view().record is not None and other.view().record.token == taker.record.token


def test_a_renewal_confirmed_after_the_deadline_does_not_count_and_frees_the_lease(
    directory: str
) -> None:
    io = file_io(directory)
    held = HeldWrites(io)
    holder = LeaseStore(held, directory, "j").acquire(print, length=1.0)  # type: ignore[arg-type]
    deadline = holder.deadline
    held.armed = True
    thread, failures = _renew_in_background(holder)
    assert held.arrived.wait(30)
    wait_for(lambda: time.monotonic() > deadline, 10, "the holder's deadline to pass")
    held.go.set()  # the create lands now: nobody took the lease, but too late
    thread.join(60)
    assert len(failures) == 1 and isinstance(failures[0], LeaseLostError), failures
    with pytest.raises(LeaseLostError):
        holder.fence()
    # What it created too late was let go at once, by the very next generation: another
    # process takes the lease now.
    view = LeaseStore(io, directory, "j").view()
    assert view.record is not None and view.record.released and view.free()
    assert view.generation == holder.record.generation + 2


def test_the_deadline_runs_from_when_the_renewal_was_sent(directory: str) -> None:
    io = file_io(directory)
    held = HeldWrites(io)
    holder = LeaseStore(held, directory, "j").acquire(print, length=3.0)  # type: ignore[arg-type]
    held.armed = True
    thread, failures = _renew_in_background(holder)
    assert held.arrived.wait(30)
    time.sleep(0.5)  # the scenario: a renewal whose request is slow
    held.go.set()
    thread.join(60)
    assert failures == []
    assert held.sent_at is not None
    # Never later than the send plus the length less the margin, however long it took.
    assert holder.deadline <= held.sent_at + 3.0 - holder_margin(3.0)
    generations = [name for name in io.list_names(directory) if name.endswith(".json")]
    assert generations == ["000000000002.json"]  # the older one tidied
    holder.check()
    holder.release()


def test_every_change_of_the_lease_is_a_new_generation(directory: str) -> None:
    """Taken, renewed twice, let go: four generations, each created once; no file is ever
    written twice (a conditional create is the only write)."""
    io = file_io(directory)
    writes: list[str] = []

    class Recording(HeldWrites):
        def write_bytes(self, location: str, data: bytes) -> None:
            writes.append(location)
            super().write_bytes(location, data)

    recording = Recording(io)
    store = LeaseStore(recording, directory, "j")  # type: ignore[arg-type]
    lease = store.acquire(print, length=60)
    lease.renew()
    lease.renew()
    lease.release()
    assert writes == []
    assert store.current()[0] == 4 and store.view().record is not None
    assert store.view().record.released  # type: ignore[union-attr]
    assert io.list_names(directory) == ["000000000004.json"]


def test_a_holder_past_its_deadline_is_lost_even_while_its_generation_is_the_newest(
    directory: str,
) -> None:
    """The holder's own clock decides first: past its deadline it holds nothing, whatever the
    store still shows (a taker may act as soon as the store's clock says it expired)."""
    store = LeaseStore(file_io(directory), directory, "j")
    lease = store.acquire(print, length=60)
    lease.deadline = time.monotonic() - 1  # as after a pause of its process
    with pytest.raises(LeaseLostError):
        lease.check()
    assert store.view().generation == lease.record.generation  # nobody took it
    lease.release()


def test_a_renewal_tells_the_new_deadline_to_those_who_fence_by_it(directory: str) -> None:
    """Spark's own checkpoint writes are fenced by the deadline the lease tells them
    (spark/lease_fence.py): a renewal that did not tell it would stop the query at the first
    deadline though the lease was renewed."""
    lease = LeaseStore(file_io(directory), directory, "j").acquire(print, length=60)
    told: list[float | None] = []
    lease.on_deadline(told.append)
    first = lease.deadline
    lease.renew()
    assert told == [first, lease.deadline] and lease.deadline > first
    lease.release()
    assert told[-1] is None


def test_a_holder_whose_renewals_keep_failing_is_told_it_lost_the_lease_by_its_deadline(
    directory: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A store that stops answering: the renewing thread retries until the holder's
    deadline, then says the lease is lost (a running query is stopped at once)."""
    lease = LeaseStore(file_io(directory), directory, "j").acquire(print, length=1.5)

    def unanswered(_record: Any) -> bool:
        raise OSError("the store did not answer")

    monkeypatch.setattr(lease, "_create", unanswered)
    lost = threading.Event()
    lease.on_lost(lost.set)
    lease.start_renewing()
    assert lost.wait(30), "the holder was never told"
    assert time.monotonic() >= lease.deadline
    with pytest.raises(LeaseLostError):
        lease.fence()
    lease.release()


def test_the_lease_log_has_the_end_of_a_holding_that_was_lost(
    directory: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The audit of who held a job when: a holding that ended lost is let go in the log at
    the holder's deadline, as one let go by its holder."""
    log = tmp_path / "leases.jsonl"
    monkeypatch.setenv("SPARKPOINT_LEASE_LOG", str(log))
    lease = LeaseStore(file_io(directory), directory, "j").acquire(print, length=60)
    lease.deadline = time.monotonic() - 1
    with pytest.raises(LeaseLostError):
        lease.check()
    lease.release()
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    assert [(line["event"], line["token"]) for line in lines] == \
        [("acquired", lease.record.token), ("released", lease.record.token)]
    assert lines[1]["outcome"] == "lost"
    assert lines[1]["held_until_monotonic"] <= lease.deadline


def test_the_lease_log_has_the_end_of_a_holding_that_ended_with_its_job(
    directory: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A holding that ends because its holder deleted the job (``jobs delete``, or a
    cut-off one finished by a listing) is let go in the audit log when it ends: the lock
    releases no lease that ended with its job, and the torture test found the holding of a
    listing that finished a cut-off deletion never let go in the log."""
    log = tmp_path / "leases.jsonl"
    monkeypatch.setenv("SPARKPOINT_LEASE_LOG", str(log))
    lease = LeaseStore(file_io(directory), directory, "j").acquire(print, length=60)
    lease.gone_with_job()
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    assert [(line["event"], line["token"], line.get("outcome")) for line in lines] == \
        [("acquired", lease.record.token, None), ("released", lease.record.token, "deleted")]
    assert lines[1]["held_until_monotonic"] <= time.monotonic()
