"""Pending startpoints in a home on S3 (moto), HDFS (a MiniDFSCluster) and local disk: one
file per set, read and written at the home's URL. A start removes exactly the sets it
applied, so a set made on another machine while a start applies startpoints stays pending
for the next start, never lost.

On main before this change a remote home's apply compared against its own working copy,
removed the file there and uploaded the removal, deleting a set made meanwhile elsewhere.
"""

from __future__ import annotations

import os
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
