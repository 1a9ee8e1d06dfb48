"""kill -9 at any moment of `snapshot create` leaves no snapshot that `list` shows, and a
later create, of any name, works."""

from __future__ import annotations

import random
import signal
import subprocess
import time
from pathlib import Path

import pytest

from sparkpoint import api
from sparkpoint.checkpoint.rocksdb_state import HDFS_PROVIDER
from sparkpoint.storage.home import Home
from sparkpoint.testing import write_clicks
from tests.conftest import EXAMPLES
from tests.support.cli import command, sparkpoint

pytestmark = pytest.mark.spark
KILLS = 8


def _wait_for_progress(proc: subprocess.Popen[str], prefix: str) -> None:
    """Read the create's progress lines until one starts with ``prefix``."""
    assert proc.stderr is not None
    for line in proc.stderr:
        if line.startswith(prefix):
            return
    raise AssertionError(f"snapshot create ended without a progress line {prefix!r}")


@pytest.mark.parametrize("provider", ["rocksdb", HDFS_PROVIDER], ids=["rocksdb", "hdfs"])
def test_kill_9_during_create_leaves_no_partial_snapshot(
    spark: object, home: Home, tmp_path: Path, provider: str
) -> None:
    conf = {} if provider == "rocksdb" else {
        "spark.sql.streaming.stateStore.providerClass": provider}
    write_clicks(tmp_path / "in", range(0, 6), events=1000)
    api.run(home, EXAMPLES / "clicks_job.py", "big",
            params={"input": str(tmp_path / "in"), "output": str(tmp_path / "out")},
            conf=conf, until_caught_up=True, spark=spark)  # type: ignore[arg-type]

    started = time.monotonic()
    timing = subprocess.Popen(command(home, "--verbose", "snapshot", "create", "big", "timing"),
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    _wait_for_progress(timing, "copying ")
    copying = time.monotonic()
    assert timing.wait() == 0
    copy_s = time.monotonic() - copying
    rng = random.Random(2026)
    survivors = {"timing"}
    inside = 0
    for attempt in range(KILLS):
        name = f"k{attempt}"
        proc = subprocess.Popen(command(home, "--verbose", "snapshot", "create", "big", name),
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        # Even attempts are killed as the export reads its first operator (its staging
        # directory exists, nothing is copied yet); odd ones at a random moment of the copy
        # and checksumming that follow "copying N files".
        if attempt % 2 == 0:
            _wait_for_progress(proc, "operator ")
        else:
            _wait_for_progress(proc, "copying ")
            time.sleep(rng.uniform(0, copy_s))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        debris = [p for p in home.staging_dir.iterdir() if p.name.startswith(f"{proc.pid}.")]
        listed = {row["name"] for row in sparkpoint(home, "snapshot", "list", "--json").json()}
        assert listed - survivors <= {name}
        if name in listed:  # the kill came after the publishing rename
            assert attempt % 2 == 1, "killed as it began exporting, yet it was published"
            survivors.add(name)
            assert sparkpoint(home, "snapshot", "verify", name).code == 0
        else:
            assert debris, "killed before publishing, yet no staging directory was left"
            inside += 1
    # Proof that the kills hit the export itself, not the start-up before it.
    assert inside >= KILLS // 2, (inside, copy_s, time.monotonic() - started)
    for name in survivors:
        assert sparkpoint(home, "snapshot", "verify", name).code == 0
    # Any name works afterwards, including those whose create was killed.
    for name in ("after", "k0"):
        if name not in survivors:
            result = sparkpoint(home, "snapshot", "create", "big", name)
            assert result.code == 0, result.err
    staging = home.staging_dir
    assert not staging.exists() or not any(staging.iterdir())
