"""Every write a holder of a job's lease makes in a home on S3 (moto's server) is fenced: once
the lease is lost (or its holder is past its deadline), the drain's cleanup, intents,
checkpoint files, pending startpoints, the job record and the output's sink log are left as
the new holder has them, and the writer gets LEASE_LOST.

On main before this change only the job record and the intents' saves asked the lease: a
drain that lost its lease still deleted ``offsets/N+1`` and the drain intent in its cleanup,
which by then could be the new holder's, and a startpoint application still moved offsets.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from sparkpoint.drain import protocol as draining
from sparkpoint.drain.protocol import DrainIntent
from sparkpoint.drain.synthetic import DrainBatch, remove_unrun_drain_offsets
from sparkpoint.errors import LeaseLostError
from sparkpoint.runtime.lock import held_lease, job_lock
from sparkpoint.runtime.registry import JobRecord, JobRegistry
from sparkpoint.startpoints.store import Startpoint, StartpointStore
from sparkpoint.storage import fencing
from sparkpoint.storage.fileio import join
from sparkpoint.storage.home import Home
from sparkpoint.storage.location import replace_file
from sparkpoint.storage.stores import file_io


@pytest.fixture
def home(s3_server: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Home:
    for name, value in s3_server.env.items():
        os.environ.setdefault(name, value)
    monkeypatch.setenv("SPARKPOINT_SCRATCH", str(tmp_path / "machine"))
    home = Home.resolve(f"s3://{s3_server.new_bucket()}/home")
    registry = JobRegistry(home)
    registry.save(JobRecord(name="j", job_file="job.py", status="stopped"))
    offsets = home.checkpoint_dir("j") / "offsets"
    for batch in (0, 1, 2):
        (offsets / str(batch)).write_text("v1\n{}\n{\"logOffset\":0}")
    (home.checkpoint_dir("j") / "commits" / "0").write_text("v1\n{}")
    (home.checkpoint_dir("j") / "commits" / "1").write_text("v1\n{}")
    draining.save_intent(home, "j", DrainIntent(drain=DrainBatch(batch_id=2, watermark_before_ms=0,
                                                         timestamp_before_ms=0),
                                        started_at="2026-11-29T00:00:00Z"))
    StartpointStore(home).set("j", Startpoint(source="clicks", kind="earliest",
                                              set_at="2026-11-29T00:00:00Z"))
    return home


def _files(home: Home) -> dict[str, int]:
    job = home.job_url("j")
    return file_io(job).walk_sizes(job)


WRITES: dict[str, Callable[[Home], object]] = {
    "drain cleanup: the unrun drain batch's offsets": lambda home: remove_unrun_drain_offsets(
        JobRegistry(home).checkpoint("j"), DrainBatch(batch_id=2, watermark_before_ms=0,
                                                      timestamp_before_ms=0)),
    "drain cleanup: the drain intent": lambda home: draining.remove_intent(home, "j"),
    "an intent recorded": lambda home: draining.save_intent(
        home, "j", DrainIntent(drain=DrainBatch(batch_id=3, watermark_before_ms=0,
                                                timestamp_before_ms=0),
                               started_at="2026-11-29T00:00:01Z")),
    "a checkpoint file rewritten (startpoints applied)": lambda home: replace_file(
        JobRegistry(home).checkpoint("j").root / "offsets" / "1", b"v1\n{}\n{}"),
    "pending startpoints removed": lambda home: StartpointStore(home).clear("j", "clicks"),
    "the job record": lambda home: JobRegistry(home).save(
        JobRecord(name="j", job_file="other.py", status="stopped")),
}


@pytest.mark.parametrize("write", list(WRITES))
def test_a_holder_that_lost_its_lease_writes_nothing_more(home: Home, write: str) -> None:
    before = _files(home)
    with pytest.raises(LeaseLostError), job_lock(home, "j"):
        lease = held_lease(home, "j")
        assert lease is not None
        with pytest.raises(LeaseLostError):
            lease._lose("taken by another machine, in this test")
            lease.fence()
        WRITES[write](home)
    after = {rel: size for rel, size in _files(home).items() if not rel.startswith("lease/")}
    assert after == {rel: size for rel, size in before.items() if not rel.startswith("lease/")}


def test_the_output_is_fenced_while_a_run_holds_the_lease(home: Home, tmp_path: Path) -> None:
    """The output a run writes (its sink log, a rewind's moves) is guarded like the job's
    directory while the run holds the lease; writes elsewhere are not."""
    out = str(tmp_path / "out")
    with pytest.raises(LeaseLostError), job_lock(home, "j"):
        lease = held_lease(home, "j")
        assert lease is not None
        end = fencing.add_guarded([out], lease.fence)
        try:
            file_io(out).write_bytes(join(out, "_spark_metadata", "0"), b"v1\n")
            with pytest.raises(LeaseLostError):
                lease._lose("taken by another machine, in this test")
                lease.fence()
            with pytest.raises(LeaseLostError):
                file_io(out).write_bytes(join(out, "_spark_metadata", "1"), b"v1\n")
            file_io(str(tmp_path)).write_bytes(str(tmp_path / "elsewhere"), b"x")
        finally:
            end()
    assert sorted(p.name for p in (tmp_path / "out" / "_spark_metadata").iterdir()) == ["0"]
    assert (tmp_path / "elsewhere").is_file()
