"""Snapshot create and delete in a store on S3 (moto) and on HDFS (a MiniDFSCluster), cut
off at each of their crash points (``SPARKPOINT_CRASH_AT``: the process ends at once, as
``kill -9`` would): nothing half-made is ever listed, and the next create or delete collects
what the cut-off one left. The job is Spark's own checkpoint (no JVM needed here)."""

from __future__ import annotations

from pathlib import Path

import pytest

from sparkpoint import api
from sparkpoint.crash_points import CRASH_ENV, CRASH_EXIT_CODE, CRASH_POINTS
from sparkpoint.snapshot.object_store import FILES_DIR, LEASES_DIR, blob_name
from sparkpoint.storage.fileio import join
from sparkpoint.storage.home import Home
from sparkpoint.storage.stores import file_io
from tests.support.cli import Result, sparkpoint
from tests.support.golden_job import JOB, home_with_snapshots_in

# A create's own collection announces nothing in a store without garbage: the collection's
# point is walked by test_collection_handshake.py.
CREATE_POINTS = [p for p in CRASH_POINTS if p.startswith("remote_snapshot.") and
                 "delete" not in p and "collection" not in p]


@pytest.fixture(params=["s3", "hdfs"])
def home(request: pytest.FixtureRequest, tmp_path: Path) -> Home:
    return home_with_snapshots_in(str(request.param), request, tmp_path)


def _cli(home: Home, *args: str, crash_at: str | None = None) -> Result:
    return sparkpoint(home, "--snapshots", str(home.snapshots), *args,
                      env={CRASH_ENV: crash_at} if crash_at else None)


def _held(home: Home, under: str) -> set[str]:
    assert home.snapshots is not None
    return set(file_io(home.snapshots).walk_sizes(join(home.snapshots, under)))


def _referenced(home: Home) -> set[str]:
    return {blob_name(entry) for m in api.snapshot_list(home) for entry in m.files}


def _ok(result: Result) -> Result:
    assert result.code == 0, result.err
    return result


def test_every_create_step_on_a_store_has_a_crash_point() -> None:
    assert CREATE_POINTS == ["remote_snapshot.lease_written", "remote_snapshot.files_uploaded",
                             "remote_snapshot.published"]


@pytest.mark.parametrize("point", CREATE_POINTS)
def test_a_create_cut_off_lists_nothing_partial_and_is_collected(home: Home, point: str) -> None:
    cut = _cli(home, "snapshot", "create", JOB, "s1", crash_at=point)
    assert cut.code == CRASH_EXIT_CODE, f"{point} did not fire: {cut.err}"
    published = point == "remote_snapshot.published"
    listed = _ok(_cli(home, "snapshot", "list", "--json")).json()
    assert [row["name"] for row in listed] == (["s1"] if published else [])
    if published:
        assert api.snapshot_verify(home, "s1") == []
    assert _held(home, LEASES_DIR), "the cut-off create left no lease"
    # The next create completes and collects what the cut-off one left (its lease is of a
    # process that died on this machine: over at once).
    _ok(_cli(home, "snapshot", "create", JOB, "s2"))
    assert api.snapshot_verify(home, "s2") == []
    assert [m.name for m in api.snapshot_list(home)] == (["s1", "s2"] if published else ["s2"])
    assert _held(home, FILES_DIR) == _referenced(home)
    assert _held(home, LEASES_DIR) == set(), "a dead create's lease stayed"


def test_a_delete_cut_off_is_unlisted_and_collected_by_the_next_command(home: Home) -> None:
    _ok(_cli(home, "snapshot", "create", JOB, "s1"))
    cut = _cli(home, "snapshot", "delete", "s1", "--yes",
               crash_at="remote_snapshot.delete_unlisted")
    assert cut.code == CRASH_EXIT_CODE, cut.err
    assert api.snapshot_list(home) == []
    assert _held(home, FILES_DIR), "the crash left no files to collect"
    _ok(_cli(home, "snapshot", "create", JOB, "s2"))
    assert _held(home, FILES_DIR) == _referenced(home)
    _ok(_cli(home, "snapshot", "delete", "s2", "--yes"))
    assert _held(home, FILES_DIR) == set()
