"""The startpoint store's records on a local home: where a set is written and under which
name, how the sets of an earlier version and stray files are read, what a damaged or
foreign record is refused with, and the edges of setting, listing and clearing.

The protocol under concurrent machines (S3, HDFS, local) is tested in
test_startpoint_sets.py; these are the details its tests do not reach, each found by a
mutation run of startpoints/store.py (benchmarks/mutation.py) that they now fail.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from sparkpoint.errors import CorruptRecordError, InvalidNameError, PreconditionError
from sparkpoint.startpoints.store import (
    DONE_SUFFIX,
    SET_ATTEMPTS,
    WHOLE_SOURCE,
    Startpoint,
    StartpointStore,
)
from sparkpoint.storage.home import Home

# An earlier version named each set by the setting machine's clock in nanoseconds.
EARLIER_SET_ID = "01795965606084535400-ab12cd34"


def _at(kind: str, partition: str = WHOLE_SOURCE, value: str | None = None,
        source: str = "clicks") -> Startpoint:
    return Startpoint(source=source, partition=partition, kind=kind,  # type: ignore[arg-type]
                      value=value, set_at="2026-11-24T00:00:00Z")


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return tmp_path / "home"


@pytest.fixture
def store(home: Path) -> StartpointStore:
    return StartpointStore(Home.resolve(str(home)))


def _source_dir(home: Path, source: str = "clicks") -> Path:
    return home / "jobs" / "j" / "startpoints" / source


def _kinds(entries: list[Startpoint]) -> list[tuple[str, str, str | None]]:
    return [(s.partition, s.kind, s.value) for s in entries]


def test_startpoints_describe_their_source_partition_and_position() -> None:
    assert _at("earliest").describe() == "clicks: earliest"
    assert _at("offset", "3", '{"clicks": {"3": 7}}').describe() == \
        'clicks partition 3: offset {"clicks": {"3": 7}}'
    assert _at("timestamp", value="2026-11-24T00:00:00Z").describe() == \
        "clicks: timestamp 2026-11-24T00:00:00Z"


def test_a_set_is_a_file_of_its_own_named_by_its_number_under_the_jobs_startpoints(
    home: Path, store: StartpointStore
) -> None:
    """The layout a user (and every earlier home) sees: jobs/<job>/startpoints/<source>/
    <20-digit number>.json, holding the startpoint with its set id."""
    first = store.set("j", _at("earliest"))
    second = store.set("j", _at("latest"))
    files = sorted(path.name for path in _source_dir(home).iterdir())
    assert files == [f"{1:020d}.json", f"{2:020d}.json"]
    assert (first.set_id, second.set_id) == (f"{1:020d}", f"{2:020d}")
    stored = json.loads((_source_dir(home) / f"{2:020d}.json").read_text())
    assert stored == second.model_dump(mode="json")


def test_a_set_made_after_an_earlier_versions_sets_takes_a_number_after_theirs(
    home: Path, store: StartpointStore
) -> None:
    """An earlier version's set ids began with a clock in nanoseconds: a set made now takes
    the next number after that clock, so that it folds last and its name sorts last in a
    plain listing of the directory too."""
    earlier = _source_dir(home) / f"{EARLIER_SET_ID}.json"
    earlier.parent.mkdir(parents=True)
    earlier.write_text(json.dumps(_at("earliest").model_copy(
        update={"set_id": EARLIER_SET_ID}).model_dump(mode="json")))
    made = store.set("j", _at("offset", "3", '{"clicks": {"3": 7}}'))
    assert made.set_id == f"{1795965606084535401:020d}"
    assert sorted(path.name for path in _source_dir(home).iterdir())[-1] == \
        f"{made.set_id}.json"
    pending, ids = store.pending("j", "clicks")
    assert ids == [EARLIER_SET_ID, made.set_id]
    assert _kinds(pending) == [("*", "earliest", None), ("3", "offset", '{"clicks": {"3": 7}}')]


def test_a_bad_source_name_is_refused_naming_it_as_a_source(store: StartpointStore) -> None:
    for call in (lambda: store.set("j", _at("earliest", source="a b")),
                 lambda: store.get("j", "a b")):
        with pytest.raises(InvalidNameError) as refused:
            call()
        assert refused.value.message.startswith("source name 'a b' is not valid")


def test_a_damaged_set_is_refused_naming_its_file_and_what_it_holds(
    home: Path, store: StartpointStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    made = store.set("j", _at("earliest"))
    path = _source_dir(home) / f"{made.set_id}.json"
    for content, found in [('"earliest"', "expected a JSON object or list, found str"),
                           ("{not json", "Expecting property name enclosed in double quotes"),
                           ("[1]", "1 validation error for Startpoint")]:
        path.write_text(content)
        with pytest.raises(CorruptRecordError) as refused:
            store.get("j", "clicks")
        message = refused.value.message
        assert message.startswith(f"{path}: expected a pending startpoint of source 'clicks' "
                                  f"(JSON), found unreadable content ({found}")
        assert message.endswith("remove them with 'sparkpoint startpoint clear JOB clicks' "
                                "and set them again")

    def unreadable(_location: str) -> bytes:
        raise OSError()  # a store's error that says nothing: named by its type

    monkeypatch.setattr(store.io, "read_bytes", unreadable)
    with pytest.raises(CorruptRecordError, match=r"found unreadable content \(OSError\)"):
        store.get("j", "clicks")


def test_a_set_holding_another_source_is_refused(home: Path, store: StartpointStore) -> None:
    made = store.set("j", _at("earliest"))
    path = _source_dir(home) / f"{made.set_id}.json"
    path.write_text(json.dumps(_at("latest", source="views").model_dump(mode="json")))
    with pytest.raises(CorruptRecordError) as refused:
        store.get("j", "clicks")
    assert refused.value.message == (
        f"{path}: holds startpoints of another source than 'clicks'; remove them with "
        "'sparkpoint startpoint clear JOB clicks' and set them again")


def test_hidden_files_beside_the_sets_are_neither_read_nor_removed(
    home: Path, store: StartpointStore
) -> None:
    """What a copy tool or an editor leaves in the directory (names starting with '.') is not
    a set or a marker: not read, not counted, not removed by a start."""
    store.set("j", _at("earliest"))
    hidden = [_source_dir(home) / ".draft.json",
              _source_dir(home) / f".{9:020d}{DONE_SUFFIX}"]
    for path in hidden:
        path.write_text("{not a startpoint")
    made = store.set("j", _at("latest"))
    assert made.set_id == f"{2:020d}"
    pending, ids = store.pending("j", "clicks")
    assert _kinds(pending) == [("*", "latest", None)]
    store.remove_applied("j", "clicks", ids)
    assert store.all("j") == {}
    assert all(path.read_text() == "{not a startpoint" for path in hidden)


def test_a_set_removed_by_a_start_between_listing_and_reading_leaves_the_later_sets(
    store: StartpointStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A start applied and removed the first listed set while this reader listed: the sets
    after it are still pending and read."""
    first = store.set("j", _at("earliest"))
    store.set("j", _at("offset", "3", '{"clicks": {"3": 7}}'))
    store.set("j", _at("offset", "4", '{"clicks": {"4": 1}}'))
    read = store.io.read_bytes

    def removed_meanwhile(location: str) -> bytes:
        if location.endswith(f"{first.set_id}.json"):
            raise FileNotFoundError(location)
        return read(location)

    monkeypatch.setattr(store.io, "read_bytes", removed_meanwhile)
    pending, ids = store.pending("j", "clicks")
    assert ids == [f"{2:020d}", f"{3:020d}"]
    assert [s.partition for s in pending] == ["3", "4"]


def test_a_set_that_never_finds_a_free_number_gives_up_saying_so(
    store: StartpointStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    tries: list[str] = []

    def always_taken(location: str, _data: bytes) -> bool:
        tries.append(location)
        return False

    monkeypatch.setattr(store.io, "create_exclusive", always_taken)
    with pytest.raises(PreconditionError) as refused:
        store.set("j", _at("earliest"))
    assert refused.value.message == (
        "job 'j': startpoints of source 'clicks' are being set by other processes faster "
        f"than this one could take a place after them ({SET_ATTEMPTS} tries); set it again")
    assert len(tries) == SET_ATTEMPTS


def test_a_damaged_marker_under_the_number_taken_counts_as_another_sets(
    home: Path, store: StartpointStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A marker that appeared under the number this set took, between its listing and its
    create, and holds bytes that are no digest at all: not this set's, so the set takes a
    later number (and is applied by the next start), rather than failing or being lost."""
    listed = store._listed
    marker = _source_dir(home) / f"{1:020d}{DONE_SUFFIX}"

    def marker_appears(job: str, source: str) -> tuple[list[str], list[str]]:
        seen = listed(job, source)
        if not marker.parent.exists():  # once: after the first listing
            marker.parent.mkdir(parents=True)
            marker.write_bytes(b"\xff\xfe damaged")
        return seen

    monkeypatch.setattr(store, "_listed", marker_appears)
    made = store.set("j", _at("earliest"))
    assert made.set_id == f"{2:020d}"
    monkeypatch.undo()
    assert store.pending("j", "clicks")[1] == [made.set_id]


def test_a_list_an_earlier_version_wrote_alone_is_listed_and_cleared(
    home: Path, store: StartpointStore
) -> None:
    """A job whose only startpoints are an earlier version's list (``<source>.json``, no
    directory of sets): listed under its source, and removed by a clear."""
    legacy = home / "jobs" / "j" / "startpoints" / "clicks.json"
    legacy.parent.mkdir(parents=True)
    legacy.write_text(json.dumps([_at("earliest").model_dump(mode="json")]))
    assert list(store.all("j")) == ["clicks"]
    assert _kinds(store.all("j")["clicks"]) == [("*", "earliest", None)]
    assert store.clear("j", "clicks") is True
    assert not legacy.exists() and store.all("j") == {}
    assert store.clear("j", "clicks") is False


def test_clearing_what_an_earlier_versions_start_applied_keeps_what_was_set_since(
    store: StartpointStore
) -> None:
    """A start recorded by an earlier version names what it applied without set ids: its
    recovery clears the source only when the pending startpoints are exactly those."""
    store.set("j", _at("earliest"))
    applied = [_at("earliest")]
    store.set("j", _at("offset", "3", '{"clicks": {"3": 7}}'))  # set since
    store.clear_if_unchanged("j", "clicks", applied)
    assert _kinds(store.get("j", "clicks")) == [("*", "earliest", None),
                                                ("3", "offset", '{"clicks": {"3": 7}}')]
    store.clear_if_unchanged("j", "clicks", [_at("earliest"),
                                             _at("offset", "3", '{"clicks": {"3": 7}}')])
    assert store.get("j", "clicks") == []
    assert re.fullmatch(r"\d{20}" + re.escape(DONE_SUFFIX),
                        "".join(store.io.list_names(store._source_url("j", "clicks"))))


def test_a_stray_file_not_named_by_a_number_is_refused_as_a_damaged_set(
    home: Path, store: StartpointStore
) -> None:
    """A file no version of ``set`` names (a copy made by hand, 'notes.json') is read as a
    set, so that a damaged one is refused naming it, never skipped or failing the listing."""
    store.set("j", _at("earliest"))
    stray = _source_dir(home) / "notes.json"
    stray.write_text("remember to set the offsets")
    with pytest.raises(CorruptRecordError) as refused:
        store.get("j", "clicks")
    assert refused.value.message.startswith(f"{stray}: expected a pending startpoint")
