"""Crash points of drain, startpoint application and snapshot create/delete, on real Spark.

Each test cuts a command off at one named step (``SPARKPOINT_CRASH_AT``: the process ends at
once, no cleanup, as ``kill -9`` would), runs the next ordinary command, and compares what
the user ends up with against an uninterrupted run: nothing lost, nothing twice.
"""

from __future__ import annotations

import datetime as dt
import os
import shutil
import subprocess
import sys
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from sparkpoint import api
from sparkpoint.crash_points import CRASH_ENV, CRASH_EXIT_CODE, CRASH_POINTS
from sparkpoint.runtime.registry import JobRegistry
from sparkpoint.storage.home import Home
from sparkpoint.testing import Click, output_rows, write_clicks
from tests.conftest import EXAMPLES
from tests.integration.test_drain import JOB as DRAIN_JOB
from tests.integration.test_drain import expected_all_windows
from tests.integration.test_startpoints import JOB as PASSTHROUGH_JOB
from tests.integration.test_startpoints import _rows
from tests.support.cli import Result, command
from tests.support.shared_start import SharedStart, build_once

pytestmark = pytest.mark.spark


def _points(prefix: str) -> list[str]:
    return [name for name in CRASH_POINTS if name.startswith(prefix)]


def crash(home: Home, point: str, *args: str) -> Result:
    """Run the CLI with the crash point set; it must end there."""
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, **{CRASH_ENV: point})
    done = subprocess.run(command(home, *args), capture_output=True, text=True, env=env,
                          timeout=300)
    assert done.returncode == CRASH_EXIT_CODE, (point, done.returncode, done.stderr[-2000:])
    assert f"crash point {point}" in done.stderr
    return Result(done.returncode, done.stdout, done.stderr)


def cli(home: Home, *args: str) -> Result:
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable)
    env.pop(CRASH_ENV, None)
    done = subprocess.run(command(home, *args), capture_output=True, text=True, env=env,
                          timeout=300)
    return Result(done.returncode, done.stdout, done.stderr)


def test_debug_crash_points_lists_every_name_with_its_command(home: Home) -> None:
    listed = cli(home, "debug", "crash-points")
    assert listed.code == 0, listed.err
    names = listed.out.split()
    assert names == list(CRASH_POINTS)
    prefixes = {name.split(".", 1)[0] for name in names}
    assert {"drain", "snapshot", "startpoint"} <= prefixes
    assert all("." in name for name in names)


@dataclass(frozen=True)
class JobOf3:
    """Job 'j' ran until caught up over slices 0-2 of ``root``/in into ``root``/out;
    ``clicks`` are their clicks."""

    home: Home
    root: Path
    clicks: list[Click]


def _built_once(factory: pytest.TempPathFactory, name: str,
                run: Callable[[Home, Path], None]) -> tuple[SharedStart, list[Click]]:
    clicks: list[Click] = []

    def build(root: Path) -> None:
        clicks.extend(write_clicks(root / "in", range(0, 3)))
        run(Home(root / "home"), root)

    return build_once(factory, name, build), clicks


def _fresh(built: tuple[SharedStart, list[Click]]) -> JobOf3:
    """The same start for every test that takes it (tests/support/shared_start.py)."""
    start, clicks = built
    root = start.fresh()
    return JobOf3(Home(root / "home"), root, list(clicks))


# -- drain ------------------------------------------------------------------------------

def _drain_params(tmp: Path) -> dict[str, str]:
    return {"kind": "tumbling", "input": str(tmp / "in"), "views_input": str(tmp / "views"),
            "output": str(tmp / "out")}


def _run_drain_job(spark: object, home: Home, tmp: Path, job: str = "j") -> None:
    api.run(home, DRAIN_JOB, job, params=_drain_params(tmp), until_caught_up=True,
            spark=spark)  # type: ignore[arg-type]


def _later_windows(tmp: Path) -> Counter[Any]:
    """Write later input; the windows a drained job emits for it (hour 1 only: the new
    watermark, max event time - 10 minutes, closes it; hour 2 stays open)."""
    later = write_clicks(tmp / "in", range(3, 9))
    closed = Counter({row: n for row, n in expected_all_windows("tumbling", later, []).items()
                      if row[1] == dt.datetime(2026, 1, 1, 1)})
    assert closed
    return closed


@pytest.fixture(scope="module")
def drain_job_built(spark: object, tmp_path_factory: pytest.TempPathFactory
                    ) -> tuple[SharedStart, list[Click]]:
    return _built_once(tmp_path_factory, "drain-job",
                       lambda home, root: _run_drain_job(spark, home, root))


@pytest.fixture
def drain_job(drain_job_built: tuple[SharedStart, list[Click]]) -> JobOf3:
    """The drain job (tumbling windows) over slices 0-2."""
    return _fresh(drain_job_built)


@pytest.mark.parametrize("point", _points("drain."))
def test_drain_cut_off_is_finished_by_the_next_drain(
    spark: object, drain_job: JobOf3, point: str
) -> None:
    home, root, clicks = drain_job.home, drain_job.root, drain_job.clicks
    crash(home, point, "drain", "j", "--snapshot", "d1")
    said: list[str] = []
    record = api.drain(home, "j", snapshot="d1", spark=spark,  # type: ignore[arg-type]
                       echo=said.append)
    text = "\n".join(said)
    finished = point in ("drain.batch_committed", "drain.watermark_restored", "drain.recorded")
    assert ("finishing the drain interrupted" in text) == finished, text
    if point == "drain.offsets_written":
        assert "rolled back an interrupted drain" in text, text
    assert record.residual == [] and record.snapshot == "d1"
    drained = output_rows(spark, root / "out")  # type: ignore[arg-type]
    assert drained == expected_all_windows("tumbling", clicks, [])
    shown = cli(home, "snapshot", "show", "d1", "--json")
    assert shown.code == 0, shown.err
    assert {op["rows"] for op in shown.json()["operators"]} == {0}
    assert shown.json()["watermark_ms"] < 253402300799000
    # The watermark is the job's own again: later input is not dropped as late.
    later = _later_windows(root)
    _run_drain_job(spark, home, root)
    assert output_rows(spark, root / "out") == drained + later  # type: ignore[arg-type]
    assert not (home.job_dir("j") / "drain-intent.json").exists()


def test_run_after_a_drain_cut_off_before_its_batch_runs_no_drain_batch(
    spark: object, home: Home, tmp_path: Path
) -> None:
    reference = tmp_path / "reference"
    write_clicks(reference / "in", range(0, 3))
    _run_drain_job(spark, home, reference, "ref")
    write_clicks(tmp_path / "in", range(0, 3))
    _run_drain_job(spark, home, tmp_path)
    crash(home, "drain.offsets_written", "drain", "j")
    said: list[str] = []
    write_clicks(tmp_path / "in", range(3, 9))
    write_clicks(reference / "in", range(3, 9))
    api.run(home, DRAIN_JOB, "j", params=_drain_params(tmp_path), until_caught_up=True,
            spark=spark, echo=said.append)  # type: ignore[arg-type]
    assert any("rolled back an interrupted drain" in line for line in said), said
    _run_drain_job(spark, home, reference, "ref")
    # As if the drain had never been asked for: no window fired early, none lost.
    assert output_rows(spark, tmp_path / "out") == \
        output_rows(spark, reference / "out")  # type: ignore[arg-type]
    assert JobRegistry(home).get("j").status == "stopped"


def test_run_after_a_drain_cut_off_after_its_batch_finishes_the_drain(
    spark: object, drain_job: JobOf3
) -> None:
    home, root, clicks = drain_job.home, drain_job.root, drain_job.clicks
    crash(home, "drain.batch_committed", "drain", "j")
    later = _later_windows(root)
    said: list[str] = []
    api.run(home, DRAIN_JOB, "j", params=_drain_params(root), until_caught_up=True,
            spark=spark, echo=said.append)  # type: ignore[arg-type]
    assert any("finishing the drain interrupted" in line for line in said), said
    assert output_rows(spark, root / "out") == \
        expected_all_windows("tumbling", clicks, []) + later  # type: ignore[arg-type]
    record = JobRegistry(home).get("j")
    assert record.drain is not None and record.drain.batch == record.runs[-1].first_batch


# -- startpoints ------------------------------------------------------------------------

def _passthrough(spark: object, home: Home, tmp: Path, echo: Any = None) -> None:
    api.run(home, PASSTHROUGH_JOB, "j",
            params={"input": str(tmp / "in"), "output": str(tmp / "out")},
            until_caught_up=True, spark=spark,  # type: ignore[arg-type]
            **({"echo": echo} if echo else {}))


@pytest.fixture(scope="module")
def passthrough_job_built(spark: object, tmp_path_factory: pytest.TempPathFactory
                          ) -> tuple[SharedStart, list[Click]]:
    return _built_once(tmp_path_factory, "passthrough-job",
                       lambda home, root: _passthrough(spark, home, root))


@pytest.fixture
def passthrough_job(passthrough_job_built: tuple[SharedStart, list[Click]]) -> JobOf3:
    """The passthrough job over slices 0-2."""
    return _fresh(passthrough_job_built)


@pytest.mark.parametrize("point", _points("startpoint."))
def test_startpoint_apply_cut_off_is_applied_exactly_once(
    spark: object, passthrough_job: JobOf3, point: str
) -> None:
    home, root, first = passthrough_job.home, passthrough_job.root, passthrough_job.clicks
    assert cli(home, "startpoint", "set", "j", "clicks", "--earliest").code == 0
    later = write_clicks(root / "in", range(3, 4))
    crash(home, point, "run", str(PASSTHROUGH_JOB), "--job", "j", "--param",
          f"input={root / 'in'}", "--param", f"output={root / 'out'}",
          "--until-caught-up")
    said: list[str] = []
    _passthrough(spark, home, root, said.append)
    assert any("finishing the startpoints interrupted" in line for line in said), said
    # Every file read again exactly once, as an uninterrupted apply reads them.
    expected = _rows(first + first + later)
    assert output_rows(spark, root / "out") == expected  # type: ignore[arg-type]
    _passthrough(spark, home, root)
    assert output_rows(spark, root / "out") == expected  # type: ignore[arg-type]
    record = JobRegistry(home).get("j")
    assert [a.source for a in record.startpoints_applied] == ["clicks"]
    assert cli(home, "startpoint", "list", "j", "--json").json() == []
    assert not (home.job_dir("j") / "startpoint-intent.json").exists()


def test_startpoint_set_after_an_interrupted_apply_is_applied_after_it(
    spark: object, home: Home, tmp_path: Path
) -> None:
    first = write_clicks(tmp_path / "in", range(0, 2))
    _passthrough(spark, home, tmp_path)
    assert cli(home, "startpoint", "set", "j", "clicks", "--earliest").code == 0
    crash(home, "startpoint.offsets_moved", "run", str(PASSTHROUGH_JOB), "--job", "j",
          "--param", f"input={tmp_path / 'in'}", "--param", f"output={tmp_path / 'out'}")
    # Set while the interrupted application still waits to be finished: the newer one wins.
    assert cli(home, "startpoint", "set", "j", "clicks", "--latest").code == 0
    write_clicks(tmp_path / "in", range(2, 3))
    _passthrough(spark, home, tmp_path)
    applied = JobRegistry(home).get("j").startpoints_applied
    assert [a.startpoints[0]["kind"] for a in applied] == ["earliest", "latest"]
    assert cli(home, "startpoint", "list", "j", "--json").json() == []
    # Latest skipped everything the earliest would have read again, and the new file.
    assert output_rows(spark, tmp_path / "out") == _rows(first)  # type: ignore[arg-type]


# -- snapshot create and delete ---------------------------------------------------------

@pytest.fixture(scope="module")
def stopped_job(tmp_path_factory: pytest.TempPathFactory, spark: object) -> Iterator[Path]:
    """A stopped job with state, whose home tests copy."""
    root = tmp_path_factory.mktemp("crash-snapshots")
    write_clicks(root / "in", range(0, 3))
    api.run(Home(root / "home"), EXAMPLES / "clicks_job.py", "big",
            params={"input": str(root / "in"), "output": str(root / "out")},
            until_caught_up=True, spark=spark)  # type: ignore[arg-type]
    yield root / "home"


def _listed(home: Home) -> set[str]:
    result = cli(home, "snapshot", "list", "--json")
    assert result.code == 0, result.err
    return {row["name"] for row in result.json()}


@pytest.mark.parametrize("point", [p for p in _points("snapshot.") if "delete" not in p])
def test_snapshot_create_cut_off_leaves_nothing_half_listed(
    stopped_job: Path, tmp_path: Path, point: str
) -> None:
    home = Home(tmp_path / "home")
    shutil.copytree(stopped_job, home.root)
    crash(home, point, "snapshot", "create", "big", "s1")
    published = point == "snapshot.published"
    assert _listed(home) == ({"s1"} if published else set())
    if not published:
        assert any(home.staging_dir.iterdir()), "the crash left no debris to clean"
        again = cli(home, "snapshot", "create", "big", "s1")
        assert again.code == 0, again.err
    assert cli(home, "snapshot", "verify", "s1").code == 0
    assert not home.staging_dir.exists() or not any(home.staging_dir.iterdir()) or published
    # A job started from it continues like one started from an uninterrupted snapshot.
    assert cli(home, "snapshot", "create", "big", "ref").code == 0
    ours = cli(home, "snapshot", "show", "s1", "--json").json()
    ref = cli(home, "snapshot", "show", "ref", "--json").json()
    for key in ("batch_id", "sources", "watermark_ms"):
        assert ours[key] == ref[key]
    assert [(o["name"], o["rows"]) for o in ours["operators"]] == \
        [(o["name"], o["rows"]) for o in ref["operators"]]


def test_snapshot_delete_cut_off_is_not_listed_and_is_cleaned_up(
    stopped_job: Path, tmp_path: Path
) -> None:
    home = Home(tmp_path / "home")
    shutil.copytree(stopped_job, home.root)
    assert cli(home, "snapshot", "create", "big", "s1").code == 0
    crash(home, "snapshot.delete_renamed", "snapshot", "delete", "s1")
    assert _listed(home) == set()
    assert any(home.staging_dir.iterdir())
    assert cli(home, "snapshot", "create", "big", "s2").code == 0
    assert [p.name for p in home.staging_dir.iterdir()] == []
    # The name is free again.
    assert cli(home, "snapshot", "create", "big", "s1").code == 0
    assert _listed(home) == {"s1", "s2"}
