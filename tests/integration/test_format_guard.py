"""Snapshots sparkpoint cannot trust are refused by plan and run, naming what is wrong: state
written with settings sparkpoint does not decode, or a snapshot taken by another Spark."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from sparkpoint import api
from sparkpoint.snapshot.manifest import MANIFEST_FILE
from sparkpoint.storage.home import Home
from sparkpoint.testing import write_clicks
from tests.conftest import EXAMPLES, SHUFFLE_PARTITIONS
from tests.support.cli import Result, sparkpoint

JOB = EXAMPLES / "clicks_job.py"
CODEC = "spark.sql.streaming.stateStore.compression.codec"
ROW_CHECKSUM = "spark.sql.streaming.stateStore.rowChecksum.enabled"


def _tree(path: Path) -> list[tuple[str, bytes]]:
    return sorted((str(p.relative_to(path)), p.read_bytes()) for p in path.rglob("*")
                  if p.is_file())


@pytest.fixture(scope="module")
def snapshots(tmp_path_factory: pytest.TempPathFactory, spark: object) -> tuple[Home, Path]:
    """Snapshot 'packed' of a job whose state Spark wrote with zstd and row checksums, and
    snapshot 'plain' of a job run with Spark's defaults."""
    root = tmp_path_factory.mktemp("format-guard")
    home = Home(root / "home")
    write_clicks(root / "in", range(0, 3))
    for job, conf in (("packed", {CODEC: "zstd", ROW_CHECKSUM: "true"}), ("plain", {})):
        api.run(home, JOB, job, params={"input": str(root / "in"),
                                        "output": str(root / f"out-{job}")},
                conf=conf, until_caught_up=True, spark=spark)  # type: ignore[arg-type]
        api.snapshot_create(home, job, job)
    return home, root


def _plan(home: Home, root: Path, snapshot: str) -> Result:
    return sparkpoint(home, "plan", str(JOB), "--from-snapshot", snapshot, "--json",
                      "--param", f"input={root / 'in'}", "--param", f"output={root / 'new'}",
                      "--conf", f"spark.sql.shuffle.partitions={SHUFFLE_PARTITIONS}")


def test_state_with_settings_sparkpoint_does_not_decode_is_refused(
    snapshots: tuple[Home, Path]
) -> None:
    home, root = snapshots
    # What Spark recorded is what the guard reads: the snapshot's offsets conf map.
    offsets = sorted((home.snapshot_dir("packed") / "checkpoint" / "offsets").iterdir())[-1]
    recorded = json.loads(offsets.read_text().split("\n")[1])["conf"]
    assert recorded[CODEC] == "zstd" and recorded[ROW_CHECKSUM] == "true"

    planned = _plan(home, root, "packed")
    assert planned.code == 3, planned.err
    problems = planned.json()["problems"]
    assert any(f"{CODEC}=zstd" in p and f"decodes only {CODEC}=lz4" in p for p in problems)
    assert any(f"{ROW_CHECKSUM}=true" in p for p in problems)

    before = _tree(home.root)
    ran = sparkpoint(home, "run", str(JOB), "--job", "v2", "--from-snapshot", "packed",
                     "--until-caught-up", "--param", f"input={root / 'in'}",
                     "--param", f"output={root / 'new'}")
    assert ran.code == 3, ran.err
    assert f"{CODEC}=zstd" in ran.err and "Traceback" not in ran.err
    assert _tree(home.root) == before
    assert not home.job_dir("v2").exists() and not (root / "new").exists()


def test_snapshot_of_another_spark_version_is_refused(snapshots: tuple[Home, Path]) -> None:
    home, root = snapshots
    # The plain snapshot passes; its copy claiming another Spark does not. The manifest is not
    # in its own file list, so the copy still verifies.
    assert _plan(home, root, "plain").code == 0
    shutil.copytree(home.snapshot_dir("plain"), home.snapshot_dir("older"))
    manifest_path = home.snapshot_dir("older") / MANIFEST_FILE
    manifest = json.loads(manifest_path.read_text())
    manifest["name"], manifest["spark_version"] = "older", "4.2.0"
    manifest_path.write_text(json.dumps(manifest))
    assert sparkpoint(home, "snapshot", "verify", "older").code == 0

    planned = _plan(home, root, "older")
    assert planned.code == 3, planned.err
    problems = planned.json()["problems"]
    assert any("taken with Spark 4.2.0, this is Spark 4.3.0" in p for p in problems), problems
