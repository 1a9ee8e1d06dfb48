"""A lease's records and what is read from them (storage/lease.py): generation files among
other files, records an earlier version wrote, when a generation is free on the store's
clock, a listing that races a tidy, a holder's margin, the audit log's lines and the
messages a holder, a taker and a refused process get.

The protocol between processes is tested in test_job_lease.py and test_lease_renewal.py;
these are what a mutation run of lease.py (benchmarks/mutation.py) found no test reached.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from pathlib import Path

import pytest

from sparkpoint.errors import JobRunningError, LeaseLostError
from sparkpoint.storage.lease import (
    DEFAULT_LEASE_SECONDS,
    STORE_CLOCK_RESOLUTION_S,
    LeaseRecord,
    LeaseStore,
    LeaseView,
    _parse,
)
from sparkpoint.storage.processes import ProcessIdentity
from sparkpoint.storage.stores import file_io

ELSEWHERE = dataclasses.replace(ProcessIdentity.current(), host="another-machine", pid=4242)


@pytest.fixture
def directory(tmp_path: Path) -> str:
    return str(tmp_path / "jobs" / "j" / "lease")


def _store(directory: str) -> LeaseStore:
    return LeaseStore(file_io(directory), directory, "j")


def _write(directory: str, generation: int, record: dict[str, object]) -> Path:
    path = Path(directory) / f"{generation:012d}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record))
    return path


def _elsewhere(**fields: object) -> dict[str, object]:
    return {"token": "t", **ELSEWHERE.to_record(), "length": 60.0, "released": False,
            **fields}


def test_a_holder_stops_writing_a_sixth_of_the_length_before_the_lease_ends(
    directory: str
) -> None:
    """The margin the module's docs argue from (a write begun before the deadline lands
    within it): the deadline is the create's send plus five sixths of the length."""
    lease = _store(directory).acquire(print, length=60)
    assert lease.deadline == pytest.approx(lease.sent + 50.0)
    lease.release()


def test_a_generation_is_free_only_past_its_length_and_the_stores_clock_resolution() -> None:
    record = LeaseRecord(1, "t", ELSEWHERE, 60.0)
    live = 60.0 + STORE_CLOCK_RESOLUTION_S
    assert not LeaseView(1, record, live - 0.5).free()
    assert LeaseView(1, record, live + 0.5).free()
    assert not LeaseView(1, record, None).free()  # no age told: live
    assert LeaseView(1, dataclasses.replace(record, released=True), 0.0).free()
    assert LeaseView(0, None, None).free()
    assert LeaseView(1, record, live - 10.5).remaining() == pytest.approx(10.5)
    assert LeaseView(1, record, None).remaining() == 0.0


def test_only_generation_files_count_among_the_files_of_the_lease(directory: str) -> None:
    """A checksum file, a file without an extension and anything else beside the
    generations are not generations."""
    _write(directory, 3, _elsewhere(released=True))
    for stray in ("notes.txt", "000000000009", "000000000008.json.crc", "x.json"):
        (Path(directory) / stray).write_text("not a lease")
    store = _store(directory)
    assert store.newest() == 3
    lease = store.acquire(print, length=60)
    assert lease.record.generation == 4
    lease.release()


def test_a_record_of_an_earlier_version_holds_for_the_default_length() -> None:
    """An earlier version wrote no length and no 'released' for a live holding."""
    raw = {"token": "t", "host": "another-machine", "pid": 4242}
    record = _parse(json.dumps(raw).encode(), 7)
    assert record is not None
    assert (record.generation, record.length, record.released) == \
        (7, DEFAULT_LEASE_SECONDS, False)


def test_a_holder_whose_lease_files_were_all_removed_has_lost_it(directory: str) -> None:
    lease = _store(directory).acquire(print, length=60)
    (Path(directory) / f"{lease.record.generation:012d}.json").unlink()
    with pytest.raises(LeaseLostError, match=r"\(generation 0 now, held by nobody\)"):
        lease.check()


def test_a_generation_tidied_between_listing_and_reading_is_looked_at_again(
    directory: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The newest listed generation is gone when read (a newer holder tidied it): the
    listing is read again and shows the newer holder, who is live."""
    _write(directory, 1, _elsewhere())
    store = _store(directory)
    read = store.io.read_bytes

    def tidied_meanwhile(location: str) -> bytes:
        first = Path(directory) / f"{1:012d}.json"
        if location.endswith(first.name) and first.exists():
            _write(directory, 2, _elsewhere(token="newer"))
            first.unlink()
            raise FileNotFoundError(location)
        return read(location)

    monkeypatch.setattr(store.io, "read_bytes", tidied_meanwhile)
    view = store.view()
    assert view.generation == 2 and view.record is not None
    assert view.record.token == "newer" and not view.free()


def test_a_listing_whose_newest_generation_can_never_be_read_holds_nobody(
    directory: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    _write(directory, 1, _elsewhere())
    store = _store(directory)

    def gone(location: str) -> bytes:
        raise FileNotFoundError(location)

    monkeypatch.setattr(store.io, "read_bytes", gone)
    assert store.view() == LeaseView(0, None, None)


def test_the_audit_log_names_each_holding_and_its_deadline(
    directory: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = tmp_path / "leases.jsonl"
    monkeypatch.setenv("SPARKPOINT_LEASE_LOG", str(log))
    before = time.time()
    lease = _store(directory).acquire(print, length=60)
    lease.deadline = time.monotonic() - 1  # as after a pause
    with pytest.raises(LeaseLostError):
        lease.check()
    lease.release()
    acquired, released = map(json.loads, log.read_text().splitlines())
    me = ProcessIdentity.current()
    assert (acquired["host"], acquired["pid"], acquired["length"]) == (me.host, me.pid, 60)
    assert acquired["expires_monotonic"] == lease.sent + 50.0
    assert lease.sent <= acquired["monotonic"] <= time.monotonic()  # stamped once taken
    assert before + 49 < acquired["expires_at"] < time.time() + 51
    # Let go at its own deadline (a second before the check found it lost), not now.
    assert released["held_until_monotonic"] == lease.deadline
    assert released["held_until"] <= time.time() - 0.5
    assert released["outcome"] == "lost"


def test_a_refused_taker_is_told_who_holds_the_job_and_for_how_long(directory: str) -> None:
    path = _write(directory, 1, _elsewhere())
    with pytest.raises(JobRunningError) as refused:
        _store(directory).acquire(print, length=60)
    message = refused.value.message
    assert message.startswith(f"job 'j' is already running (pid 4242 on another-machine: "
                              f"its lease {path} holds for up to ")
    holds = int(message.split("holds for up to ")[1].split(" s")[0])
    assert 55 <= holds <= 60 + STORE_CLOCK_RESOLUTION_S
    assert message.endswith("s more unless renewed); stop it there first, or snapshot it "
                            "with 'sparkpoint snapshot create'")


def test_a_holder_that_lost_is_told_why_and_by_whom(directory: str) -> None:
    store = _store(directory)
    lease = store.acquire(print, length=60)
    _write(directory, 2, _elsewhere())  # another process took it (as after an expiry)
    with pytest.raises(LeaseLostError) as lost:
        lease.check()
    assert lost.value.message == (
        f"job 'j': lost its lease at {directory} (generation 2 now, held by pid 4242 on "
        "another-machine); another process may run the job now, so this one stopped "
        "without writing more; see 'sparkpoint jobs show' for who holds it")
    with pytest.raises(LeaseLostError, match=r"\(lost earlier\)"):
        lease.fence()
    lease.release()

    renewing = _store(f"{directory}-2").acquire(print, length=60)
    _write(f"{directory}-2", 2, _elsewhere())
    with pytest.raises(LeaseLostError, match=r"\(generation 2 now, held by pid 4242 on "
                                             r"another-machine\)"):
        renewing.renew()

    late = _store(f"{directory}-3").acquire(print, length=60)
    late.deadline = time.monotonic() - 1
    with pytest.raises(LeaseLostError, match=r"\(not renewed within its 60 s\)"):
        late.fence()


def test_a_take_tells_whose_lease_it_took_over_and_why(directory: str) -> None:
    said: list[str] = []
    _write(directory, 1, _elsewhere())
    expired = Path(directory) / f"{1:012d}.json"
    long_ago = time.time() - 600
    os.utime(expired, (long_ago, long_ago))
    lease = _store(directory).acquire(said.append, length=60)
    assert said == ["job 'j': took over the lease left by pid 4242 on another-machine, "
                    "that was not renewed for 600 s"]
    lease.release()
    said.clear()
    _store(directory).acquire(said.append, length=60).release()  # let go: nothing to say
    assert said == []

    dead = dataclasses.replace(ProcessIdentity.current(), pid=2 ** 22 + 7, start_ticks=1)
    _write(f"{directory}-2", 1, {"token": "t", **dead.to_record(), "length": 60.0})
    _store(f"{directory}-2").acquire(said.append, length=60).release()
    assert said == [f"job 'j': took over the lease left by pid {2 ** 22 + 7} on "
                    f"{dead.host}, whose process is gone"]


def test_a_take_whose_creates_lose_twice_says_another_process_took_it(
    directory: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each create lost to another process (which let go at once, or still holds it by the
    time this one looks last): refused, naming the live holder when there is one."""
    store = _store(directory)
    create = store.io.create_exclusive
    takers = iter([_elsewhere(released=True), _elsewhere()])

    def others_first(location: str, data: bytes) -> bool:
        assert create(location, json.dumps(next(takers)).encode())
        return False

    monkeypatch.setattr(store.io, "create_exclusive", others_first)
    with pytest.raises(JobRunningError) as refused:
        store.acquire(print, length=60)
    assert refused.value.message.startswith("job 'j' is already running (pid 4242 on "
                                            "another-machine")

    other = _store(f"{directory}-2")
    create2 = other.io.create_exclusive
    let_go = iter([_elsewhere(released=True), _elsewhere(released=True)])
    monkeypatch.setattr(other.io, "create_exclusive", lambda location, data: (
        create2(location, json.dumps(next(let_go)).encode()) and False))
    with pytest.raises(JobRunningError) as meanwhile:
        other.acquire(print, length=60)
    assert meanwhile.value.message == (
        f"job 'j': another process took its lease at {directory}-2 meanwhile; stop it "
        "first, or snapshot it with 'sparkpoint snapshot create'")


def test_a_take_whose_first_create_lost_to_a_process_that_let_go_takes_the_next(
    directory: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = _store(directory)
    create = store.io.create_exclusive
    first = [True]

    def once_another(location: str, data: bytes) -> bool:
        if first.pop() if first else False:
            assert create(location, json.dumps(_elsewhere(released=True)).encode())
            return False
        return create(location, data)

    monkeypatch.setattr(store.io, "create_exclusive", once_another)
    lease = store.acquire(print, length=60)
    assert lease.record.generation == 2
    lease.release()


def test_the_holder_of_a_lease_is_its_live_record_or_nobody(directory: str) -> None:
    store = _store(directory)
    assert store.holder() is None
    _write(directory, 1, _elsewhere())
    live = store.holder()
    assert live is not None and (live.host, live.pid) == ("another-machine", 4242)
    _write(directory, 2, _elsewhere(released=True))
    assert store.holder() is None
