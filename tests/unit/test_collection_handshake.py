"""A delete's collection and a create sharing the same files, in a snapshot store on S3
(moto's server) and on HDFS (a MiniDFSCluster), interleaved step by step: each process is
stopped at a named point (``SPARKPOINT_FREEZE_AT``: it stops itself as a long pause of its
machine would) while the other runs, then continued.

Whatever the order, a published snapshot keeps every file it lists (it verifies), and a
collection frozen past its announcement's length deletes nothing when it wakes. A create
never waits for a collection and compares no clock: it stores copies of its own of what a
collection announced.

On main before the handshake, a create waited about 4 s after registering before it
published, whether a collection ran or not (the collection window); a collection frozen
between its check of that window and its delete could still delete a shared file. On main
before the copies of its own, a create waited for an announcement to end or to expire by
the collector's clock (2 s of margin): a collector paused between its check and its delete
for longer than that deleted a file a published snapshot shared.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from sparkpoint import api
from sparkpoint.crash_points import CRASH_ENV, CRASH_EXIT_CODE, FREEZE_ENV
from sparkpoint.snapshot.collection import COLLECTIONS_DIR, announcements
from sparkpoint.snapshot.object_store import FILES_DIR, blob_name
from sparkpoint.storage.fileio import join
from sparkpoint.storage.home import Home
from sparkpoint.storage.stores import file_io
from tests.support.cli import _env, command, sparkpoint, wait_for
from tests.support.golden_job import JOB, home_with_snapshots_in


@pytest.fixture(params=["s3", "hdfs"])
def home(request: pytest.FixtureRequest, tmp_path: Path) -> Home:
    return home_with_snapshots_in(str(request.param), request, tmp_path)


class Frozen:
    """A CLI process that stops itself at a freeze point, then is continued."""

    def __init__(self, home: Home, point: str, *args: str, env: dict[str, str] | None = None,
                 log: Path) -> None:
        self.log = log
        with open(log, "wb") as err:
            self.process = subprocess.Popen(
                command(home, "--snapshots", str(home.snapshots), *args),
                stdout=subprocess.DEVNULL, stderr=err,
                env=_env(extra={FREEZE_ENV: point, **(env or {})}))
        wait_for(self.stopped, 120, f"the process to stop at {point}", log)

    def stopped(self) -> bool:
        if self.process.poll() is not None:
            raise AssertionError(f"ended with {self.process.returncode} before its freeze "
                                 f"point:\n{self.log.read_text()[-3000:]}")
        state = Path(f"/proc/{self.process.pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        return state == "T"

    def said(self, text: str) -> bool:
        return text in self.log.read_text()

    def resume(self) -> int:
        """Continue it until it ends: a process that reaches its freeze point again (a
        collection with another file to delete, woken within its time) is continued again."""

        def state() -> str:
            """'T' while stopped, 'ended' once it ended, else its other state."""
            if self.process.poll() is not None:
                return "ended"
            try:
                stat = Path(f"/proc/{self.process.pid}/stat").read_text()
            except OSError:
                return "ended"
            return stat.rsplit(")", 1)[1].split()[0]

        def arrivals() -> int:  # each says so on stderr before it stops
            return self.log.read_text().count("freeze point ")

        for _arrival in range(100):
            before = arrivals()
            os.kill(self.process.pid, signal.SIGCONT)
            wait_for(lambda before=before: state() == "ended"  # type: ignore[misc]
                     or (state() == "T" and arrivals() > before),
                     120, "the process to end", self.log)
            if self.process.poll() is not None:
                return self.process.returncode
        raise AssertionError(f"stopped at its freeze point 100 times:\n{self.log.read_text()}")


def _cli(home: Home, *args: str, **env: str) -> Any:
    return sparkpoint(home, "--snapshots", str(home.snapshots), *args, env=env)


def _blobs(home: Home) -> set[str]:
    assert home.snapshots is not None
    return set(file_io(home.snapshots).walk_sizes(join(home.snapshots, FILES_DIR)))


def _assert_whole(home: Home, *names: str) -> None:
    """Exactly these snapshots are listed, each verifies and the store holds their files;
    no collection is left announced."""
    assert [m.name for m in api.snapshot_list(home)] == sorted(names)
    for name in names:
        assert api.snapshot_verify(home, name) == [], name
    held = _blobs(home)
    for manifest in api.snapshot_list(home):
        assert {blob_name(entry) for entry in manifest.files} <= held
    assert home.snapshots is not None
    assert announcements(file_io(home.snapshots), home.snapshots) == []


def _created(home: Home, name: str) -> None:
    created = _cli(home, "snapshot", "create", JOB, name)
    assert created.code == 0, created.err


OWN_COPIES = "storing copies of its own"


def test_a_create_during_a_collection_that_named_its_files_stores_copies_of_its_own(
    home: Home, tmp_path: Path
) -> None:
    _created(home, "a")
    announced = _blobs(home)
    # The delete's collection has announced every file of 'a' (no snapshot refers to them
    # any more) and listed the creates again: none. It is frozen before deleting.
    collector = Frozen(home, "remote_snapshot.collection_announced", "snapshot", "delete",
                       "a", "--yes", log=tmp_path / "collector.log")
    # A create of the same files finds the announcement and publishes at once, relying on
    # none of the announced files.
    created = _cli(home, "snapshot", "create", JOB, "b")
    assert created.code == 0, created.err
    assert OWN_COPIES in created.err
    manifest = api.snapshot_show(home, "b")
    assert not {blob_name(entry) for entry in manifest.files} & announced
    assert collector.resume() == 0, collector.log.read_text()
    # The collection deleted what it announced; 'b' holds its own.
    assert not _blobs(home) & announced
    _assert_whole(home, "b")


def test_a_collector_paused_between_its_check_and_its_delete_breaks_no_snapshot(
    home: Home, tmp_path: Path
) -> None:
    """The collector (another machine, a 2-second announcement) has checked that it may
    still delete and is paused before its DELETE; a create publishes meanwhile, then the
    collector wakes and deletes. On main the create waited out the announcement by the
    collector's clock, then shared the very file the collector was about to delete."""
    _created(home, "a")
    collector = Frozen(home, "remote_snapshot.collection_deleting", "snapshot", "delete",
                       "a", "--yes", log=tmp_path / "collector.log",
                       env={"SPARKPOINT_LEASE_SECONDS": "2", "SPARKPOINT_HOST": "machine-b"})
    created = _cli(home, "snapshot", "create", JOB, "b")
    assert created.code == 0, created.err
    assert collector.resume() == 0, collector.log.read_text()
    _assert_whole(home, "b")


def test_a_collection_after_a_create_registered_keeps_its_files(
    home: Home, tmp_path: Path
) -> None:
    _created(home, "a")
    shared = _blobs(home)
    create = Frozen(home, "remote_snapshot.lease_written", "snapshot", "create", JOB, "b",
                    log=tmp_path / "create.log")
    deleted = _cli(home, "snapshot", "delete", "a", "--yes")
    assert deleted.code == 0, deleted.err
    assert _blobs(home) == shared, "the collection removed files a registered create names"
    assert create.resume() == 0, create.log.read_text()
    assert not create.said(OWN_COPIES)
    _assert_whole(home, "b")


def test_a_collection_frozen_past_its_length_deletes_nothing_when_it_wakes(
    home: Home, tmp_path: Path
) -> None:
    _created(home, "a")
    shared = _blobs(home)
    # A collector on another machine, with a 2-second announcement.
    collector = Frozen(home, "remote_snapshot.collection_announced", "snapshot", "delete",
                       "a", "--yes", log=tmp_path / "collector.log",
                       env={"SPARKPOINT_LEASE_SECONDS": "2", "SPARKPOINT_HOST": "machine-b"})
    # The create does not wait: it stores copies of its own of the announced files.
    created = _cli(home, "snapshot", "create", JOB, "b")
    assert created.code == 0, created.err
    assert OWN_COPIES in created.err
    time.sleep(3)  # the scenario: frozen for longer than its 2-second length
    assert collector.resume() == 0, collector.log.read_text()
    assert shared <= _blobs(home), "a collection past its length deleted files"
    assert [m.name for m in api.snapshot_list(home)] == ["b"]
    assert api.snapshot_verify(home, "b") == []


def test_a_collection_cut_off_after_announcing_holds_up_nothing(
    home: Home, tmp_path: Path
) -> None:
    """Crash point remote_snapshot.collection_announced: the announcement of a collector
    that died on this machine is over at once; the next create removes it and the next
    delete collects what the cut-off one left."""
    _created(home, "a")
    cut = _cli(home, "snapshot", "delete", "a", "--yes",
               **{CRASH_ENV: "remote_snapshot.collection_announced"})
    assert cut.code == CRASH_EXIT_CODE, cut.err
    assert home.snapshots is not None
    assert file_io(home.snapshots).list_names(join(home.snapshots, COLLECTIONS_DIR))
    _created(home, "b")
    _assert_whole(home, "b")
    deleted = _cli(home, "snapshot", "delete", "b", "--yes")
    assert deleted.code == 0, deleted.err
    assert _blobs(home) == set()
    assert api.snapshot_list(home) == []


def test_a_create_registered_after_a_collection_listed_the_creates_keeps_its_files(
    home: Home, tmp_path: Path
) -> None:
    """The collection has listed the creates (none) and chosen what to delete; before it
    announces, a create registers, finds no announcement, decides to share the files and
    stops before publishing. The collection's second read of the creates, after its
    announcement, sees that registration: it deletes none of those files, and the create
    publishes a whole snapshot. With that second read left out (the review's mutation) the
    shared files went and the snapshot was published without them."""
    _created(home, "a")
    shared = _blobs(home)
    collector = Frozen(home, "remote_snapshot.collection_planned", "snapshot", "delete", "a",
                       "--yes", log=tmp_path / "collector.log")
    create = Frozen(home, "remote_snapshot.files_uploaded", "snapshot", "create", JOB, "b",
                    log=tmp_path / "create.log")
    assert not create.said(OWN_COPIES)  # no announcement yet: it shares the stored files
    assert collector.resume() == 0, collector.log.read_text()
    assert _blobs(home) == shared, "the collection removed files a registered create shares"
    assert create.resume() == 0, create.log.read_text()
    _assert_whole(home, "b")
