"""The error a command gives when its Spark tasks cannot read the copy it keeps on the
driver's disk (spark/driver_disk.py), from a task's own failure; the probe itself runs on a
cluster whose executors cannot read it (tests/integration/test_other_host_executors.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from sparkpoint.errors import EXIT_PRECONDITION, DriverDiskUnreachableError, SnapshotDamagedError
from sparkpoint.spark.driver_disk import NOT_ON_THIS_DISK, check_here, failed_for_want_of_disk
from sparkpoint.storage.file_cache import SCRATCH_ENV
from sparkpoint.upgrade.hdfs_repartition import run_tasks


def _task_fails_on(directory: Path) -> None:
    """A job whose task, on an executor without ``directory``, fails as Spark reports it."""
    from pyspark.errors import PySparkException

    try:
        check_here(directory)
    except FileNotFoundError as exc:
        # Spark's report of a Python task's failure ends with the exception's own line.
        raise PySparkException(f"Job aborted due to stage failure: ...\n"
                               f"FileNotFoundError: {exc}\n") from exc


def test_a_task_without_the_directory_gives_the_typed_error_naming_the_remedy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(SCRATCH_ENV, str(tmp_path / "machine"))
    staging = tmp_path / "machine" / "scratch" / "prune" / "1.new.abcd"
    check_here(tmp_path)  # there: nothing raised
    with pytest.raises(DriverDiskUnreachableError) as raised:
        run_tasks(staging, lambda: _task_fails_on(staging))
    error = raised.value
    assert error.exit_code == EXIT_PRECONDITION
    assert error.message.startswith(f"{staging}: expected the application's executors")
    assert NOT_ON_THIS_DISK in error.message
    assert f"set {SCRATCH_ENV} to a directory every executor reads" in error.message
    assert "\n" not in error.message


def test_other_task_failures_are_not_taken_for_a_missing_disk(tmp_path: Path) -> None:
    assert failed_for_want_of_disk(tmp_path, "FileNotFoundError: state/0/1.zip") is None
    home = tmp_path / "home" / "jobs" / ".j.ab12cd34.tmp"
    error = failed_for_want_of_disk(home, f"x\nFileNotFoundError: {home} {NOT_ON_THIS_DISK}")
    assert error is not None and "put the home in a directory" in error.message
    built = tmp_path / "sparkpoint-build-x1y2" / ".j.tmp"
    error = failed_for_want_of_disk(built, f"FileNotFoundError: {built} {NOT_ON_THIS_DISK}")
    assert error is not None and "set TMPDIR to a directory" in error.message


def test_a_task_that_fetched_a_damaged_snapshot_file_gives_the_refusal_a_fetch_here_gives(
    tmp_path: Path,
) -> None:
    """A task of a move in the store checks each file it fetched against the manifest
    (snapshot/placement.check_fetched); its refusal reaches the user as the same typed line
    as a damaged file fetched by this process, not as a failed move."""
    from pyspark.errors import PySparkException

    from sparkpoint.snapshot.manifest import FileEntry
    from sparkpoint.snapshot.placement import check_fetched

    fetched = tmp_path / "1.delta"
    fetched.write_bytes(b"changed")
    entry = FileEntry(path="checkpoint/state/0/0/1.delta", bytes=7, etag="e1", sha256="AAAA")

    def job() -> None:
        try:
            check_fetched(fetched, "s3://b/snapshots/.files/x", entry, "state/0/0/1.delta")
        except SnapshotDamagedError as exc:
            raise PySparkException(
                "Job aborted due to stage failure: ...\nTraceback (most recent call last):\n"
                f"  ...\nsparkpoint.errors.SnapshotDamagedError: {exc}\n") from exc

    with pytest.raises(SnapshotDamagedError) as raised:
        run_tasks(tmp_path, job)
    message = raised.value.message
    assert message.startswith("s3://b/snapshots/.files/x: state/0/0/1.delta: ")
    assert message.endswith("delete the snapshot and create it again")
