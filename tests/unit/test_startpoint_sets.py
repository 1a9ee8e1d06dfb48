"""Pending startpoints in a home on S3 (moto), HDFS (a MiniDFSCluster) and local disk: one
file per set, read and written at the home's URL. A start removes exactly the sets it
applied, so a set made on another machine while a start applies startpoints stays pending
for the next start, never lost.

On main before this change a remote home's apply compared against its own working copy,
removed the file there and uploaded the removal, deleting a set made meanwhile elsewhere.
Sets are ordered by the store (each takes the next number by a conditional create), not by
the setting machine's clock.
"""

from __future__ import annotations

import json
import os
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from sparkpoint.startpoints.store import WHOLE_SOURCE, Startpoint, StartpointStore
from sparkpoint.storage.fileio import join
from sparkpoint.storage.home import Home


@pytest.fixture(params=["local", "s3", "hdfs"])
def home_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "local":
        return str(tmp_path / "home")
    server: Any = request.getfixturevalue(f"{request.param}_server")
    for name, value in server.env.items():
        os.environ.setdefault(name, value)
    if request.param == "s3":
        return f"s3://{server.new_bucket()}/home"
    return join(server.new_dir(), "home")


def _machine(home_url: str, tmp_path: Path, name: str,
             monkeypatch: pytest.MonkeyPatch) -> StartpointStore:
    monkeypatch.setenv("SPARKPOINT_SCRATCH", str(tmp_path / name))
    return StartpointStore(Home.resolve(home_url))


def _at(kind: str, partition: str = WHOLE_SOURCE, value: str | None = None) -> Startpoint:
    return Startpoint(source="clicks", partition=partition, kind=kind,  # type: ignore[arg-type]
                      value=value, set_at="2026-11-24T00:00:00Z")


def _plain(entries: list[Startpoint]) -> list[tuple[str, str, str | None]]:
    return [(s.partition, s.kind, s.value) for s in entries]


def test_a_set_made_while_another_machine_applies_stays_pending(
    home_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    applier = _machine(home_url, tmp_path, "machine_a", monkeypatch)
    applier.set("j", _at("earliest"))
    pending, consumed = applier.all_with_ids("j")
    assert {source: _plain(e) for source, e in pending.items()} == \
        {"clicks": [("*", "earliest", None)]}

    # Meanwhile, on another machine: a new set for the same source.
    other = _machine(home_url, tmp_path, "machine_b", monkeypatch)
    other.set("j", _at("latest"))

    # The apply finishes: it removes what it applied, and only that.
    applier.remove_applied("j", "clicks", consumed["clicks"])
    assert _plain(other.get("j", "clicks")) == [("*", "latest", None)]
    assert _plain(applier.get("j", "clicks")) == [("*", "latest", None)]


def test_sets_fold_in_order_and_clear_removes_them_all(
    home_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = _machine(home_url, tmp_path, "machine_a", monkeypatch)
    store.set("j", _at("offset", "0", "5"))
    store.set("j", _at("offset", "1", "7"))
    store.set("j", _at("offset", "0", "9"))  # replaces partition 0's
    assert _plain(store.get("j", "clicks")) == [("1", "offset", "7"), ("0", "offset", "9")]
    store.set("j", _at("timestamp", value="2026-11-24T00:00:00Z"))  # replaces all
    assert _plain(store.get("j", "clicks")) == [("*", "timestamp", "2026-11-24T00:00:00Z")]
    assert list(store.all("j")) == ["clicks"]
    assert store.clear("j", "clicks")
    assert store.all("j") == {} and not store.clear("j", "clicks")


def test_the_set_made_last_folds_last_whatever_the_machines_clocks(
    home_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Machine A's clock is a minute ahead. On main sets were ordered by the setting
    machine's clock: B's set, made after A's, folded before it and was replaced by it (and
    recorded as consumed at the next start)."""
    ahead = _machine(home_url, tmp_path, "machine_a", monkeypatch)
    real_ns, real = time.time_ns, time.time
    with monkeypatch.context() as clock:
        clock.setattr(time, "time_ns", lambda: real_ns() + 60 * 10**9)
        clock.setattr(time, "time", lambda: real() + 60)
        ahead.set("j", _at("earliest"))
    behind = _machine(home_url, tmp_path, "machine_b", monkeypatch)
    behind.set("j", _at("latest"))
    for store in (ahead, behind):
        assert _plain(store.get("j", "clicks")) == [("*", "latest", None)]


def test_set_ids_are_never_taken_twice(
    home_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Once every set was applied, the next one still numbers after them: a start cut off
    after removing its sets (its intent still names their ids) must never remove a new set
    when it is finished."""
    store = _machine(home_url, tmp_path, "machine_a", monkeypatch)
    first = store.set("j", _at("earliest"))
    second = store.set("j", _at("latest"))
    _pending, consumed = store.all_with_ids("j")
    assert consumed["clicks"] == [first.set_id, second.set_id]
    store.remove_applied("j", "clicks", consumed["clicks"])
    assert store.all("j") == {}
    third = store.set("j", _at("earliest"))
    assert third.set_id is not None and second.set_id is not None
    assert int(third.set_id) > int(second.set_id)
    # The cut-off start is finished: it removes what it applied, the new set stays.
    store.remove_applied("j", "clicks", consumed["clicks"])
    assert _plain(store.get("j", "clicks")) == [("*", "earliest", None)]


def test_two_machines_setting_at_once_each_get_a_place(
    home_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    stores = [_machine(home_url, tmp_path, f"machine_{i}", monkeypatch) for i in range(4)]
    with ThreadPoolExecutor(max_workers=4) as pool:
        made = list(pool.map(lambda s: s[1].set("j", _at("offset", str(s[0]), "1")),
                             enumerate(stores)))
    ids = sorted(int(entry.set_id or 0) for entry in made)
    assert ids == [1, 2, 3, 4]
    assert sorted(_plain(stores[0].get("j", "clicks"))) == \
        [(str(i), "offset", "1") for i in range(4)]


def test_a_set_whose_number_was_consumed_while_it_was_paused_is_not_lost(
    home_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A setter paused between its listing and its create: meanwhile another machine sets a
    set of the number it is about to take, and a start applies and removes it (its marker
    stands). The paused create then succeeds under that marker; without the marker's digest
    no start would ever apply it, while the setter reported it set."""
    other = _machine(home_url, tmp_path, "machine_b", monkeypatch)
    other.set("j", _at("earliest"))  # a number that is consumed: the markers begin
    other.remove_applied("j", "clicks", other.all_with_ids("j")[1]["clicks"])

    class PausedAfterListing(StartpointStore):
        paused = False

        def _listed(self, job: str, source: str) -> tuple[list[str], list[str]]:
            seen = super()._listed(job, source)
            if not self.paused:
                self.paused = True
                made = other.set("j", _at("latest"))
                other.remove_applied("j", "clicks", [str(made.set_id)])
            return seen

    monkeypatch.setenv("SPARKPOINT_SCRATCH", str(tmp_path / "machine_a"))
    paused = PausedAfterListing(Home.resolve(home_url))
    made = paused.set("j", _at("timestamp", value="2026-11-24T00:00:00Z"))
    # The set is pending, for the next start, under a number nobody consumed.
    pending, ids = other.all_with_ids("j")
    assert _plain(pending["clicks"]) == [("*", "timestamp", "2026-11-24T00:00:00Z")]
    assert ids["clicks"] == [made.set_id]
    other.remove_applied("j", "clicks", ids["clicks"])
    assert other.all("j") == {}


def test_a_list_an_earlier_version_wrote_is_applied_once_then_removed(
    home_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An earlier version kept a source's startpoints as one list, ``<source>.json``: it is
    read as the oldest set, folded before the sets made since, and removed with the start
    that applies it (else every later start would apply it again)."""
    store = _machine(home_url, tmp_path, "machine_a", monkeypatch)
    legacy = json.dumps([_at("earliest").model_dump(mode="json")])
    store.io.write_bytes(store._legacy_url("j", "clicks"), legacy.encode())
    store.set("j", _at("offset", partition="3", value='{"clicks": {"3": 7}}'))
    pending, ids = store.all_with_ids("j")
    assert _plain(pending["clicks"]) == [("*", "earliest", None),
                                         ("3", "offset", '{"clicks": {"3": 7}}')]
    store.remove_applied("j", "clicks", ids["clicks"])
    assert store.all("j") == {}
    assert not store.io.exists(store._legacy_url("j", "clicks"))


def test_applied_sets_leave_only_the_newest_marker(
    home_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A job whose startpoints are set and applied every day keeps one marker per source,
    not one per set ever made."""
    store = _machine(home_url, tmp_path, "machine_a", monkeypatch)
    for day in range(3):
        store.set("j", _at("latest"))
        store.set("j", _at("timestamp", value=f"2026-11-2{day}T00:00:00Z"))
        store.remove_applied("j", "clicks", store.all_with_ids("j")[1]["clicks"])
    names = store.io.list_names(store._source_url("j", "clicks"))
    assert names == ["00000000000000000006.done"]
