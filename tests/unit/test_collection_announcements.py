"""What a create reads of the collections announced in a snapshot store
(snapshot/collection.py): every live announcement's files, whatever happens to the others
between the listing and the reads, and an announcement of a collector no one can see
honoured until it expires on the store's clock.

The handshake between creates and collections runs end to end, with processes frozen at
each step, in test_collection_handshake.py; these are the edges of reading the
announcements that a mutation run of collection.py (benchmarks/mutation.py) found no test
reached: a create that reads too few announced files shares a file a collection deletes.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from pathlib import Path

import pytest

from sparkpoint.snapshot.collection import (
    ANNOUNCEMENT_EXPIRY,
    COLLECTIONS_DIR,
    Collection,
    announced_blobs,
)
from sparkpoint.storage.fileio import FileIO
from sparkpoint.storage.processes import ProcessIdentity
from sparkpoint.storage.stores import file_io


@pytest.fixture
def store(tmp_path: Path) -> tuple[FileIO, str]:
    root = tmp_path / "snapshots"
    root.mkdir()
    return file_io(str(root)), str(root)


def test_every_live_collections_files_are_announced(store: tuple[FileIO, str]) -> None:
    io, root = store
    first = Collection(io, root, ["blob-a", "blob-b"], ["snap-x/part-0"])
    Collection(io, root, ["blob-c"], [])
    assert announced_blobs(io, root) == {"blob-a", "blob-b", "blob-c"}
    first.end()
    assert announced_blobs(io, root) == {"blob-c"}


def test_an_announcement_ended_between_listing_and_reading_hides_none_after_it(
    store: tuple[FileIO, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A collection that ended (its announcement deleted) after the create listed the
    announcements: the ones listed after it are still read."""
    io, root = store
    collections = [Collection(io, root, [f"blob-{n}"], []) for n in range(3)]
    ended = min(collections, key=lambda c: c.url)  # the first listed
    read = io.read_bytes

    def ended_meanwhile(location: str) -> bytes:
        if location == ended.url:
            raise FileNotFoundError(location)
        return read(location)

    monkeypatch.setattr(io, "read_bytes", ended_meanwhile)
    expected = {f"blob-{n}" for n, c in enumerate(collections) if c is not ended}
    assert announced_blobs(io, root) == expected


def _announced_elsewhere(io: FileIO, root: str, blobs: list[str], hours_ago: float) -> Path:
    """An announcement written that long ago, on the store's clock, by a collector on
    another machine (one this machine cannot see, let alone prove gone)."""
    collector = dataclasses.replace(ProcessIdentity.current(), host="another-machine")
    path = Path(root) / COLLECTIONS_DIR / f"elsewhere-{hours_ago}.json"
    path.parent.mkdir(exist_ok=True)
    path.write_text(json.dumps({**collector.to_record(), "blobs": blobs, "leftovers": []}))
    written = time.time() - hours_ago * 3600
    os.utime(path, (written, written))
    return path


def test_an_announcement_no_one_can_see_the_end_of_holds_until_it_expires(
    store: tuple[FileIO, str]
) -> None:
    """A collector on another machine may be paused, not dead: its announcement keeps
    creates off its files until it is older than ANNOUNCEMENT_EXPIRY on the store's clock;
    then it is over, and removed by the reader."""
    io, root = store
    expiry_h = ANNOUNCEMENT_EXPIRY.total_seconds() / 3600
    recent = _announced_elsewhere(io, root, ["blob-recent"], expiry_h - 1)
    expired = _announced_elsewhere(io, root, ["blob-expired"], expiry_h + 1)
    assert announced_blobs(io, root) == {"blob-recent"}
    assert recent.exists() and not expired.exists()
