"""A resumed windowed operator whose window changed is refused by name with old and new
values; everything plan and resume-point build suggest parses when pasted back."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from sparkpoint import api
from sparkpoint.cli.render import plan_text
from sparkpoint.storage.home import Home
from sparkpoint.testing import write_clicks
from sparkpoint.upgrade.resume_point import load_resume_point
from tests.conftest import SHUFFLE_PARTITIONS
from tests.support.cli import sparkpoint

pytestmark = pytest.mark.spark
JOB = Path(__file__).resolve().parent.parent / "data" / "jobs" / "windowed_counts.py"
CONF = ["--conf", f"spark.sql.shuffle.partitions={SHUFFLE_PARTITIONS}"]
OLD_NAME = "stateStoreSave(window,user)"


def _params(tmp: Path, out: str, **extra: str) -> dict[str, str]:
    return {"input": str(tmp / "in"), "output": str(tmp / out), **extra}


def _cli_params(params: dict[str, str]) -> list[str]:
    return [arg for key, value in params.items() for arg in ("--param", f"{key}={value}")]


@pytest.fixture(scope="module")
def snapshot_home(spark: object, tmp_path_factory: pytest.TempPathFactory) -> tuple[Home, Path]:
    """Job v1 (10-minute windows per user, unnamed) ran over three slices; snapshot 's1'."""
    tmp = tmp_path_factory.mktemp("windows")
    home = Home(tmp / "home")
    write_clicks(tmp / "in", range(0, 3))
    api.run(home, JOB, "v1", params=_params(tmp, "out1", minutes="10"), until_caught_up=True,
            spark=spark)  # type: ignore[arg-type]
    api.snapshot_create(home, "v1", "s1")
    return home, tmp


def test_snapshot_records_the_window(snapshot_home: tuple[Home, Path]) -> None:
    home, _tmp = snapshot_home
    manifest = api.snapshot_show(home, "s1")
    [op] = manifest.operators
    assert op.name == OLD_NAME
    assert op.window is not None and op.window.kind == "time"
    assert op.window.duration_us == op.window.slide_us == 10 * 60 * 1_000_000
    assert op.rows  # the old windows are in the state: resuming them would mix shapes


def test_changed_window_length_is_refused_by_plan_and_run(
    snapshot_home: tuple[Home, Path],
) -> None:
    home, tmp = snapshot_home
    params = _cli_params(_params(tmp, "out2", minutes="15"))
    plan = sparkpoint(home, "plan", str(JOB), "--from-snapshot", "s1", *params, *CONF)
    assert plan.code == 3, (plan.out, plan.err)
    [problem] = [line for line in plan.out.splitlines() if line.startswith("  - ")]
    assert f"state.{OLD_NAME}" in problem
    assert "windows of 10 minutes" in problem and "windows of 15 minutes" in problem
    for way_out in ("initialize", "drain", "keep the old window"):
        assert way_out in problem
    as_json = sparkpoint(home, "plan", str(JOB), "--from-snapshot", "s1", *params, *CONF,
                         "--json")
    assert as_json.code == 3 and not as_json.json()["ok"]

    run = sparkpoint(home, "run", str(JOB), "--job", "v2", "--from-snapshot", "s1", *params,
                     *CONF, "--until-caught-up")
    assert run.code == 3, run.err
    assert "windows of 15 minutes" in run.err
    assert not home.job_dir("v2").exists() and not (tmp / "out2").exists()


def test_same_window_passes_and_another_window_kind_is_refused(
    spark: object, snapshot_home: tuple[Home, Path]
) -> None:
    home, tmp = snapshot_home
    same = api.plan(home, JOB, params=_params(tmp, "out3", minutes="10"), from_snapshot="s1",
                    spark=spark)  # type: ignore[arg-type]
    assert same.ok, same.problems
    assert not [w for w in same.warnings if "could not check" in w]
    sessions = api.plan(home, JOB, params=_params(tmp, "out3", minutes="10", session="yes"),
                        from_snapshot="s1", spark=spark)  # type: ignore[arg-type]
    # Session windows are another operator kind altogether: refused for that reason.
    assert not sessions.ok


def test_session_gap_change_is_refused_unless_drained_first(
    spark: object, snapshot_home: tuple[Home, Path]
) -> None:
    home, tmp = snapshot_home
    session = _params(tmp, "out5", minutes="10", session="yes")
    api.run(home, JOB, "sessions", params=session, until_caught_up=True,
            spark=spark)  # type: ignore[arg-type]
    api.snapshot_create(home, "sessions", "live")
    wider = _params(tmp, "out6", minutes="15", session="yes")
    refused = api.plan(home, JOB, params=wider, from_snapshot="live",
                       spark=spark)  # type: ignore[arg-type]
    [problem] = refused.problems
    assert "gap of 10 minutes" in problem and "gap of 15 minutes" in problem
    # A drained operator holds no sessions: nothing can overlap, the new gap may start.
    api.drain(home, "sessions", snapshot="drained", spark=spark)  # type: ignore[arg-type]
    assert [op.rows for op in api.snapshot_show(home, "drained").operators] == [0]
    accepted = api.plan(home, JOB, params=wider, from_snapshot="drained",
                        spark=spark)  # type: ignore[arg-type]
    assert accepted.ok, accepted.problems


def test_every_suggestion_parses_when_pasted(
    spark: object, snapshot_home: tuple[Home, Path], tmp_path: Path
) -> None:
    """v3 groups by url: the snapshot's operator (a derived name with a comma) is left over,
    and both commands say how to drop it; pasting either suggestion gives a valid plan."""
    home, tmp = snapshot_home
    params = _params(tmp, "out4", key="url")
    plan = api.plan(home, JOB, params=params, from_snapshot="s1",
                    spark=spark)  # type: ignore[arg-type]
    assert not plan.ok
    # Every {...} fragment plan prints before "to drop" is a suggestion to paste.
    from_plan = re.findall(r"(\{snapshot: .*\}) to drop", plan_text(plan))
    assert len(from_plan) == 1, plan_text(plan)

    built = api.resume_point_build(home, JOB, "s1", params=params,
                                   spark=spark)  # type: ignore[arg-type]
    point_file = tmp_path / "built.yaml"
    point_file.write_text(built)
    assert load_resume_point(point_file).state  # the file itself parses
    commented = [line for line in built.splitlines() if line.startswith("#   - ")]
    assert len(commented) == 1 and "# drop:" in built

    uncommented = built.replace("# drop:\n", "drop:\n").replace("#   - ", "  - ")
    pasted_from_plan = built.replace("# drop:\n", f"drop:\n  - {from_plan[0]}\n")
    for name, text in (("uncommented", uncommented), ("from_plan", pasted_from_plan)):
        target = tmp_path / f"{name}.yaml"
        target.write_text(text)
        assert yaml.safe_load(text)["drop"] == [{"snapshot": "s1", "operator": OLD_NAME}]
        point = load_resume_point(target)
        assert [(d.snapshot, d.operator) for d in point.drop] == [("s1", OLD_NAME)]
        result = api.plan(home, JOB, params=params, resume_point=target,
                          spark=spark)  # type: ignore[arg-type]
        assert result.ok, (name, result.problems)
