"""`run --from-snapshot` killed at each of its crash points: the next run of the same command
rolls back what was left, says so, and produces exactly what an uninterrupted start does.

Every start repartitions HDFS state (2 -> 3 partitions) and moves it to the RocksDB provider
so that the repartition and provider move points fire.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from sparkpoint import api
from sparkpoint.checkpoint.layout import Checkpoint
from sparkpoint.checkpoint.rocksdb_state import HDFS_PROVIDER, ROCKSDB_PROVIDER
from sparkpoint.crash_points import CRASH_ENV, CRASH_EXIT_CODE, CRASH_POINTS
from sparkpoint.storage.home import Home
from sparkpoint.testing import expected_hourly_counts, output_rows, write_clicks
from tests.conftest import EXAMPLES
from tests.support.cli import sparkpoint

JOB = EXAMPLES / "clicks_job.py"
# restore.files_uploaded and restore.old_state_placed are a home in a store's
# (tests/integration/test_remote_crash_points.py), restore.state_migrated a start whose state
# changes schema's (test_state_migration.py, and in a store test_remote_crash_points.py).
RESTORE_POINTS = sorted(name for name in CRASH_POINTS if name.startswith("restore.")
                        and name not in ("restore.files_uploaded", "restore.state_migrated",
                                         "restore.old_state_placed"))
# Crash points after the new checkpoint is renamed into place.
PUBLISHED_AT = {"restore.published", "restore.sink_seeded"}
CONF = {"spark.sql.streaming.stateStore.providerClass": HDFS_PROVIDER}
# The new jobs ask for the other provider: their state is moved.
NEW_CONF = {"spark.sql.streaming.stateStore.providerClass": ROCKSDB_PROVIDER,
            "spark.sql.shuffle.partitions": "3"}
pytestmark = pytest.mark.spark


@dataclass(frozen=True)
class Snapshotted:
    home: Home
    root: Path
    inp: Path
    reference: Counter[Any]  # what an uninterrupted start from the snapshot writes
    everything: Counter[Any]  # every window of all input, computed without Spark


@pytest.fixture(scope="module")
def snapshotted(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Snapshotted:
    root = tmp_path_factory.mktemp("restore-crash")
    home, inp = Home(root / "home"), root / "in"
    events = write_clicks(inp, range(0, 3))
    api.run(home, JOB, "v1", params={"input": str(inp), "output": str(root / "v1")},
            conf=CONF, until_caught_up=True, spark=spark)
    manifest = api.snapshot_create(home, "v1", "snap")
    assert manifest.shuffle_partitions == 2
    events += write_clicks(inp, range(3, 6))
    api.run(home, JOB, "reference", params={"input": str(inp), "output": str(root / "ref")},
            conf=NEW_CONF, from_snapshot="snap", until_caught_up=True, spark=spark)
    reference = output_rows(spark, root / "ref")
    assert reference, "the start from the snapshot emitted nothing: the input is too small"
    assert output_rows(spark, root / "v1") + reference == expected_hourly_counts(events)
    return Snapshotted(home, root, inp, reference, expected_hourly_counts(events))


def test_every_restore_step_has_a_crash_point() -> None:
    assert {"restore.job_locked", "restore.assembled", "restore.repartitioned",
            "restore.provider_moved", "restore.published",
            "restore.hdfs_partition_moved"} <= set(RESTORE_POINTS)


@pytest.mark.parametrize("point", RESTORE_POINTS)
def test_crashed_start_from_snapshot_is_rolled_back_and_redone(
    spark: Any, snapshotted: Snapshotted, point: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    home, root = snapshotted.home, snapshotted.root
    job = "after_" + point.split(".", 1)[1]
    out = root / f"out_{job}"
    command = ["run", str(JOB), "--job", job, "--from-snapshot", "snap",
               "--param", f"input={snapshotted.inp}", "--param", f"output={out}",
               *[arg for key, value in NEW_CONF.items() for arg in ("--conf", f"{key}={value}")],
               "--until-caught-up"]

    monkeypatch.setenv(CRASH_ENV, point)
    crashed = sparkpoint(home, *command)
    monkeypatch.delenv(CRASH_ENV)
    assert crashed.code == CRASH_EXIT_CODE, crashed.err
    assert f"crash point {point}" in crashed.err
    assert job not in [view.record.name for view in api.jobs_list(home)]
    published = home.checkpoint_dir(job).exists()
    assert published == (point in PUBLISHED_AT)
    if published:
        # A plain run must not continue a checkpoint no job record owns.
        plain = sparkpoint(home, *[a for a in command if a not in ("--from-snapshot", "snap")])
        assert plain.code == 4 and "interrupted" in plain.err, plain.err

    # The same start again, in this process (as a notebook would: the code path is the
    # CLI's, and the suite spares a JVM's start per point).
    said: list[str] = []
    api.run(home, JOB, job, params={"input": str(snapshotted.inp), "output": str(out)},
            conf=NEW_CONF, from_snapshot="snap", until_caught_up=True, spark=spark,
            echo=said.append)
    assert any("interrupted" in line for line in said), said
    job_dir = home.job_dir(job)
    leftovers = [p.name for p in job_dir.iterdir() if p.name.endswith((".tmp", ".restoring"))]
    assert leftovers == []
    assert api.job_view(home, job).record.lineage.from_snapshot == "snap"
    rebuilt = Checkpoint(home.checkpoint_dir(job))
    assert rebuilt.provider(rebuilt.require_latest_committed_batch()) == ROCKSDB_PROVIDER
    rows = output_rows(spark, out)
    assert rows == snapshotted.reference  # nothing lost, nothing twice
    assert output_rows(spark, root / "v1") + rows == snapshotted.everything


def test_checkpoint_not_built_by_sparkpoint_keeps_the_name_taken(
    snapshotted: Snapshotted,
) -> None:
    """Only a checkpoint that the intent proves was built by an interrupted start is removed."""
    home = snapshotted.home
    foreign = home.checkpoint_dir("foreign")
    (foreign / "offsets").mkdir(parents=True)
    (foreign / "metadata").write_text('{"id":"00000000-0000-0000-0000-000000000000"}')
    (home.job_dir("foreign") / "checkpoint.restoring").write_text('{"query_id": "other"}')
    refused = sparkpoint(home, "run", str(JOB), "--job", "foreign", "--from-snapshot", "snap",
                         "--param", f"input={snapshotted.inp}",
                         "--param", f"output={snapshotted.root / 'foreign_out'}")
    assert refused.code == 4 and "already exists" in refused.err, refused.err
    assert (foreign / "metadata").is_file()
