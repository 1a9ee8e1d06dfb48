"""A new output's empty history (sinks/history.py) on a local directory, S3 and HDFS: a start
cut off while writing it is finished by the job's next start. Spark running into such an
output after a real crash: tests/integration/test_remote_sink_outputs.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from sparkpoint.checkpoint.sink_log import SinkLog, latest_batch
from sparkpoint.crash_points import CRASH_POINTS
from sparkpoint.sinks import history
from sparkpoint.sinks.history import SEEDING_FILE, finish_seeding, pending_seeding, seed_history
from sparkpoint.storage.stores import file_io

SEED_POINTS = [name for name in CRASH_POINTS if name.startswith("sink_seed.")]


@pytest.fixture(params=["file", "s3", "hdfs"])
def output(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A new output directory, named as a job's writer names it."""
    if request.param == "file":
        return str(tmp_path / "out")
    if request.param == "hdfs":
        return f"{request.getfixturevalue('hdfs_server').new_dir()}/out"
    return f"s3a://{request.getfixturevalue('s3_server').new_bucket()}/out"


def _log(output: str) -> dict[str, bytes]:
    log = SinkLog(output)
    return {name: log.io.read_bytes(log.location(name)) for name in log.names()}


@pytest.mark.parametrize("point", SEED_POINTS)
def test_a_seeding_cut_off_is_finished_by_the_jobs_next_start(
    output: str, point: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    class Crash(Exception):
        pass

    def crash_at(name: str) -> None:
        if name == point:
            raise Crash(name)

    monkeypatch.setattr(history, "crash_point", crash_at)
    with pytest.raises(Crash):
        seed_history(output, "v1", 4, 3)
    monkeypatch.undo()
    cut_off = _log(output)
    # What the cut-off left is a log that ends before the job's batch 4: only the record
    # tells it from another run's output.
    assert latest_batch(output) in (None, 2)
    recorded = pending_seeding(output)
    assert recorded is not None and (recorded.job, recorded.through) == ("v1", 4)

    assert finish_seeding(output, "v2") is None  # another job's start leaves it alone
    assert _log(output) == cut_off

    finished = finish_seeding(output, "v1")
    assert finished is not None and finished.names == ["2.compact", "3", "4"]
    assert _log(output) == {"2.compact": b"v1", "3": b"v1", "4": b"v1"}
    assert pending_seeding(output) is None
    assert SEEDING_FILE not in file_io(output).list_names(output)
    assert finish_seeding(output, "v1") is None


def test_an_uncut_seeding_leaves_no_record_and_a_log_spark_continues(output: str) -> None:
    gap = seed_history(output, "v1", 12, 10)
    assert gap is not None and gap.names == ["9.compact", "10", "11", "12"]
    assert pending_seeding(output) is None
    assert latest_batch(output) == 12
    assert SinkLog(output).committed_files() == []
    assert seed_history(output, "v1", 12, 10) is None  # the log reaches the batch: nothing
