"""A job started from a snapshot with the other state store provider asked for: `plan` says
every resumed operator is migrated, `run` moves its state into that provider's files, Spark
opens them with it, and the output continues exactly as an uninterrupted job's would.

Spark itself takes the provider of a restarted query from its offsets log
(``OffsetSeqMetadata.setSessionConf``): without the move the new job silently stayed on the
snapshot's provider. The HDFS-backed to RocksDB way is also walked by
test_restore_crash.py (cut off at every point) and by Spark's sessionization example in
test_spark_examples_adopted.py (prefix-scan keys).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from sparkpoint import api
from sparkpoint.checkpoint.layout import PROVIDER_CONF, Checkpoint
from sparkpoint.checkpoint.rocksdb_state import HDFS_PROVIDER, ROCKSDB_PROVIDER
from sparkpoint.storage.home import Home
from sparkpoint.testing import expected_hourly_counts, output_rows, write_clicks
from tests.conftest import EXAMPLES

JOB = EXAMPLES / "clicks_job.py"
pytestmark = pytest.mark.spark

LABELS = {HDFS_PROVIDER: "HDFS-backed", ROCKSDB_PROVIDER: "RocksDB"}
# The files by which each provider's state versions are known in a partition directory.
STATE_FILES = {HDFS_PROVIDER: (".delta", ".snapshot"), ROCKSDB_PROVIDER: (".zip",)}


def _state_files(checkpoint: Path) -> set[str]:
    """The kinds of state file in every partition directory of the checkpoint."""
    return {path.suffix for path in (checkpoint / "state").rglob("*")
            if path.is_file() and path.parent.name.isdigit() and path.suffix
            in (".delta", ".snapshot", ".zip", ".changelog")}


@pytest.mark.parametrize(("old", "new"), [(HDFS_PROVIDER, ROCKSDB_PROVIDER),
                                          (ROCKSDB_PROVIDER, HDFS_PROVIDER)],
                         ids=["hdfs-to-rocksdb", "rocksdb-to-hdfs"])
def test_state_moves_to_the_provider_the_new_job_asks_for(
    old: str, new: str, spark: Any, tmp_path: Path
) -> None:
    home, inp = Home(tmp_path / "home"), tmp_path / "in"
    events = write_clicks(inp, range(0, 3))
    api.run(home, JOB, "v1", params={"input": str(inp), "output": str(tmp_path / "v1")},
            conf={PROVIDER_CONF: old}, until_caught_up=True, spark=spark)
    api.snapshot_create(home, "v1", "snap")
    events += write_clicks(inp, range(3, 6))
    params = {"input": str(inp), "output": str(tmp_path / "v2")}

    plan = api.plan(home, JOB, params=params, conf={PROVIDER_CONF: new},
                    from_snapshot="snap", spark=spark)
    assert plan.ok, plan.problems
    rows = plan.to_dict()["operators"]
    assert len(rows) >= 2  # the job's dedupe and its windowed count
    assert {row["action"] for row in rows} == {"migrate"}
    assert [row["changes"] for row in rows] == [[
        f"state store provider: {LABELS[old]} -> {LABELS[new]} (every key and value "
        "rewritten in the new provider's files)"]] * len(rows)
    # Keeping the snapshot's provider is a plain resume.
    kept = api.plan(home, JOB, params=params, from_snapshot="snap", spark=spark)
    assert {r["action"] for r in kept.to_dict()["operators"]} == {"resume"}

    said: list[str] = []
    api.run(home, JOB, "v2", params=params, conf={PROVIDER_CONF: new}, from_snapshot="snap",
            until_caught_up=True, spark=spark, echo=said.append)
    assert any(f"to {LABELS[new]}" in line for line in said), said
    checkpoint = home.checkpoint_dir("v2")
    latest = Checkpoint(checkpoint).require_latest_committed_batch()
    assert Checkpoint(checkpoint).provider(latest) == new
    assert _state_files(checkpoint) & set(STATE_FILES[old]) - set(STATE_FILES[new]) == set()
    assert _state_files(checkpoint) & set(STATE_FILES[new])
    # Nothing lost, nothing counted twice: the windows open at the switch went on counting
    # from the moved state.
    assert output_rows(spark, tmp_path / "v1") + output_rows(spark, tmp_path / "v2") \
        == expected_hourly_counts(events)
