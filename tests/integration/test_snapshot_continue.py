"""A job snapshotted mid-stream and continued as a new job from the snapshot produces exactly
what the same job produces uninterrupted: no lost rows, no duplicates, state intact."""

from __future__ import annotations

from pathlib import Path

import pytest

from sparkpoint import api
from sparkpoint.checkpoint.rocksdb_state import HDFS_PROVIDER, ROCKSDB_PROVIDER
from sparkpoint.storage.home import Home
from sparkpoint.testing import expected_hourly_counts, output_rows, write_clicks
from tests.conftest import EXAMPLES

JOB = EXAMPLES / "clicks_job.py"
pytestmark = pytest.mark.spark


def _params(inp: Path, out: Path) -> dict[str, str]:
    return {"input": str(inp), "output": str(out), "files_per_batch": "1"}


@pytest.mark.parametrize("provider", [ROCKSDB_PROVIDER, HDFS_PROVIDER], ids=["rocksdb", "hdfs"])
def test_continue_from_snapshot_equals_uninterrupted_run(
    spark: object, home: Home, tmp_path: Path, provider: str
) -> None:
    conf = {"spark.sql.streaming.stateStore.providerClass": provider}
    inp = tmp_path / "in"
    events = write_clicks(inp, range(0, 4))

    def run(job: str, out: Path, **kwargs: object) -> api.RunResult:
        return api.run(home, JOB, job, params=_params(inp, out), conf=conf,
                       until_caught_up=True, spark=spark, **kwargs)  # type: ignore[arg-type]

    run("reference", tmp_path / "ref")
    first = run("v1", tmp_path / "out1")
    manifest = api.snapshot_create(home, "v1", "s1")
    assert manifest.batch_id == first.last_batch
    assert {op.name for op in manifest.operators} == {"dedup_clicks", "hourly_counts"}
    assert all(op.rows is not None and op.rows > 0 for op in manifest.operators)
    assert api.snapshot_verify(home, "s1") == []

    events += write_clicks(inp, range(4, 9))
    run("reference", tmp_path / "ref")
    second = run("v2", tmp_path / "out2", from_snapshot="s1")
    assert second.first_batch == manifest.batch_id

    reference = output_rows(spark, tmp_path / "ref")  # type: ignore[arg-type]
    combined = output_rows(spark, tmp_path / "out1") + output_rows(spark, tmp_path / "out2")  # type: ignore[arg-type]
    assert reference, "the reference run emitted nothing: the test input is too small"
    assert combined == reference
    assert combined == expected_hourly_counts(events)
    # The snapshot is untouched by the job started from it.
    assert api.snapshot_verify(home, "s1") == []
    assert api.job_view(home, "v2").record.lineage.from_snapshot == "s1"


def test_one_snapshot_starts_several_jobs_and_is_relocatable(
    spark: object, home: Home, tmp_path: Path
) -> None:
    import shutil

    inp = tmp_path / "in"
    events = write_clicks(inp, range(0, 3))
    api.run(home, JOB, "origin", params=_params(inp, tmp_path / "o"), until_caught_up=True,
            spark=spark)  # type: ignore[arg-type]
    api.snapshot_create(home, "origin", "base")
    events += write_clicks(inp, range(3, 6))
    # The same snapshot, moved with its home to another place after the job is gone.
    moved = Home(tmp_path / "elsewhere" / "home")
    shutil.copytree(home.snapshots_dir, moved.snapshots_dir)
    outputs = []
    for name, where in (("copy_a", home), ("copy_b", home), ("copy_c", moved)):
        api.run(where, JOB, name, params=_params(inp, tmp_path / name), from_snapshot="base",
                until_caught_up=True, spark=spark)  # type: ignore[arg-type]
        outputs.append(output_rows(spark, tmp_path / name))  # type: ignore[arg-type]
    assert outputs[0] == outputs[2]
    assert outputs[0] == outputs[1]
    assert outputs[0] + output_rows(spark, tmp_path / "o") == expected_hourly_counts(events)  # type: ignore[arg-type]
