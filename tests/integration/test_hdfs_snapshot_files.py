"""A snapshot of HDFS-provider state holds the files Spark wrote, byte for byte: the newest
snapshot file at or below the committed version and the deltas after it (here the whole delta
chain). A job started from it, also with its batches renumbered, continues exactly like the
uninterrupted run."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from sparkpoint import api
from sparkpoint.checkpoint.rocksdb_state import HDFS_PROVIDER
from sparkpoint.checkpoint.sink_log import committed_files
from sparkpoint.snapshot.store import open_snapshot_store
from sparkpoint.storage.home import Home
from sparkpoint.testing import expected_hourly_counts, output_rows, write_clicks
from tests.conftest import EXAMPLES

JOB = EXAMPLES / "clicks_job.py"
CONF = {"spark.sql.streaming.stateStore.providerClass": HDFS_PROVIDER}
STATE_FILE = re.compile(r"^(\d+)\.(delta|snapshot)$")
pytestmark = pytest.mark.spark


def _params(inp: Path, out: Path) -> dict[str, str]:
    return {"input": str(inp), "output": str(out), "files_per_batch": "1"}


def _versions(directory: Path) -> dict[str, Path]:
    return {p.name: p for p in directory.iterdir() if STATE_FILE.match(p.name)}


def _files_spark_loads(partition_dir: Path, version: int) -> set[str]:
    names = _versions(partition_dir)
    snapshots = [int(n.split(".")[0]) for n in names if n.endswith(".snapshot")]
    base = max((v for v in snapshots if v <= version), default=0)
    wanted = {f"{v}.delta" for v in range(base + 1, version + 1)}
    return wanted | ({f"{base}.snapshot"} if base else set())


def test_snapshot_links_sparks_files_unchanged_and_the_job_continues(
    spark: Any, home: Home, tmp_path: Path
) -> None:
    inp = tmp_path / "in"
    events = write_clicks(inp, range(0, 4))
    api.run(home, JOB, "reference", params=_params(inp, tmp_path / "ref"), conf=CONF,
            until_caught_up=True, spark=spark)
    first = api.run(home, JOB, "v1", params=_params(inp, tmp_path / "out1"), conf=CONF,
                    until_caught_up=True, spark=spark)
    manifest = api.snapshot_create(home, "v1", "s1")
    assert manifest.batch_id == first.last_batch and manifest.batch_id >= 3
    version = manifest.batch_id + 1

    checkpoint = home.checkpoint_dir("v1")
    snapshot_checkpoint = open_snapshot_store(home).checkpoint_path("s1")
    chains = 0
    for partition_dir in sorted(checkpoint.glob("state/*/*")):
        if not partition_dir.name.isdigit():
            continue
        held = _versions(snapshot_checkpoint / partition_dir.relative_to(checkpoint))
        assert set(held) == _files_spark_loads(partition_dir, version), partition_dir
        for name, path in held.items():
            assert path.read_bytes() == (partition_dir / name).read_bytes(), path
        chains += len(held) > 1
    assert chains, "no partition held a delta chain: the test would not exercise one"
    assert all(op.rows is not None and op.rows > 0 for op in manifest.operators)
    assert api.snapshot_verify(home, "s1") == []

    events += write_clicks(inp, range(4, 8))
    api.run(home, JOB, "reference", params=_params(inp, tmp_path / "ref"), conf=CONF,
            until_caught_up=True, spark=spark)
    api.run(home, JOB, "v2", params=_params(inp, tmp_path / "out2"), conf=CONF,
            from_snapshot="s1", until_caught_up=True, spark=spark)
    reference = output_rows(spark, tmp_path / "ref")
    combined = output_rows(spark, tmp_path / "out1") + output_rows(spark, tmp_path / "out2")
    assert reference, "the reference run emitted nothing: the test input is too small"
    assert combined == reference == expected_hourly_counts(events)
    assert api.snapshot_verify(home, "s1") == []

    # Renumbered: every file of the chain moves by the same shift, and Spark still loads it.
    shift = 7
    api.run(home, JOB, "v3", params=_params(inp, tmp_path / "out3"), conf=CONF,
            from_snapshot="s1", first_batch=manifest.batch_id + 1 + shift,
            until_caught_up=True, spark=spark)
    renumbered = output_rows(spark, tmp_path / "out3", committed_files(tmp_path / "out3"))
    assert output_rows(spark, tmp_path / "out1") + renumbered == reference
    v3_state = home.checkpoint_dir("v3") / "state"
    for partition_dir in sorted(checkpoint.glob("state/*/*")):
        if not partition_dir.name.isdigit():
            continue
        moved = v3_state / partition_dir.relative_to(checkpoint / "state")
        for name in _files_spark_loads(partition_dir, version):
            number, kind = name.split(".")
            shifted = moved / f"{int(number) + shift}.{kind}"
            assert shifted.read_bytes() == (partition_dir / name).read_bytes(), shifted
