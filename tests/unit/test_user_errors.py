"""Errors in the user's terms: resume point mistakes name their entry without pydantic's
words, syntax errors give line and column, Spark failures become one short line, and
--json errors are JSON objects with the exit code."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from sparkpoint.cli.render import plan_text
from sparkpoint.errors import ValidationError
from sparkpoint.snapshot.manifest import OperatorEntry, StoreEntry
from sparkpoint.spark.errors import failure_summary
from sparkpoint.upgrade.resume_point import (
    flow_mapping,
    load_resume_point,
    parse_resume_point,
    read_resume_point,
)
from sparkpoint.upgrade.validate import (
    JobShape,
    NewOperator,
    NewSource,
    NewStore,
    OperatorRow,
    UpgradePlan,
    default_resume_point,
    validate,
)
from sparkpoint.windows import WindowSpec

LIBRARY_WORDS = ("Input tag", "discriminator", "TimestampStart", "OffsetStart",
                 "valid dictionary", "Field required", "Extra inputs", "literal[")


def _problems(data: dict[str, Any]) -> list[str]:
    with pytest.raises(ValidationError) as info:
        parse_resume_point({"version": 1, **data}, "rp.yaml")
    problems: list[str] = info.value.details["problems"]
    for problem in problems:
        assert not any(word in problem for word in LIBRARY_WORDS), problem
    return problems


@pytest.mark.parametrize(("data", "expected"), [
    ({"state": {"word_counts": {"mode": "initialise"}}},
     ["state.word_counts.mode: 'initialise' is not one of resume, initialize, seed"]),
    ({"state": {"word_counts": {"snapshot": "s"}}},
     ["state.word_counts: no mode; expected mode: resume, initialize or seed"]),
    ({"state": {"w": "resume"}}, ["state.w: expected a mapping, found 'resume'"]),
    ({"sources": {"c": {"mode": "initialize", "start": "earlist"}}},
     ["sources.c.start: expected earliest, latest, {timestamp: ISO8601} or {offset: ...}, "
      "found 'earlist'"]),
    ({"sources": {"c": {"mode": "initialize", "start": {"timestamp": 5}}}},
     ["sources.c.start.timestamp: expected text, found 5 (put it in quotes)"]),
    ({"sources": {"c": {"mode": "initialize", "start": {"timestmp": "x"}}}},
     ["sources.c.start: expected earliest, latest, {timestamp: ISO8601} or {offset: ...}, "
      "found {timestmp: x}"]),
    ({"drop": [{"snapshot": "s"}], "extra": 1},
     ["drop[0].operator: required but missing",
      "extra: unknown key; expected one of version, sources, state, drop"]),
    ({"state": {"a": {"mode": "resume", "snapshot": "s", "operatr": "x"}}, "drop": {"a": 1}},
     ["state.a.operatr: unknown key; expected one of mode, snapshot, operator, set",
      "drop: expected a list, found {a: 1}"]),
])
def test_resume_point_mistakes_in_the_users_terms(data: dict[str, Any],
                                                  expected: list[str]) -> None:
    assert sorted(_problems(data)) == sorted(expected)


def test_every_problem_is_one_line_naming_its_entry() -> None:
    with pytest.raises(ValidationError) as info:
        parse_resume_point({"version": 1, "state": {"a": {"mode": "initialise"},
                                                    "b": {"mode": "resume"}}}, "rp.yaml")
    assert info.value.message.splitlines() == [
        "rp.yaml: 2 problems in the resume point:",
        "  state.a.mode: 'initialise' is not one of resume, initialize, seed",
        "  state.b.snapshot: required but missing"]
    assert info.value.exit_code == 3


@pytest.mark.parametrize(("name", "text", "line", "column"), [
    ("rp.yaml", "version: 1\nstate:\n  a: {mode: resume\n  b: x\n", 4, 4),
    ("rp.yaml", "version: 1\nstate:\n\ta: {mode: initialize}\n", 3, 1),
    ("rp.json", '{"version": 1,\n "state": {"a": }}', 2, 17),
])
def test_syntax_errors_give_line_and_column(tmp_path: Path, name: str, text: str, line: int,
                                            column: int) -> None:
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(ValidationError) as info:
        load_resume_point(path)
    assert info.value.message.startswith(f"{path} line {line}, column {column}: expected ")
    assert "syntax error" in info.value.message and "\n" not in info.value.message
    assert (info.value.details["line"], info.value.details["column"]) == (line, column)


@pytest.mark.parametrize("name", ["stateStoreSave(window,word)", "dedupe(event_id,ts)",
                                  "symmetricHashJoin(id,(id + 1))", "123", "a: b", "#x"])
def test_flow_mappings_parse_whatever_the_names(name: str) -> None:
    text = flow_mapping(snapshot="123", operator=name)
    assert yaml.safe_load(text) == {"snapshot": "123", "operator": name}
    assert yaml.safe_load(f"drop:\n  - {text}  # a comment\n") == {
        "drop": [{"snapshot": "123", "operator": name}]}


class _Failure(Exception):
    pass


def test_failure_summary_of_a_python_error_in_a_batch() -> None:
    text = ("[PYTHON_EXCEPTION] An exception was thrown from the Python worker: Traceback "
            "(most recent call last):\n  File \"/jobs/job.py\", line 4, in _boom\n    raise "
            "ValueError(\"bad user \" + str(user))\nValueError: bad user bo\n SQLSTATE: 38000\n"
            "=== Streaming Query ===\nIdentifier: q [id = 1]\n" + "x" * 5000)
    assert failure_summary(_Failure(text)) == (
        "a Python function raised ValueError: bad user bo (job.py line 4, in _boom)")


def test_failure_summary_cuts_plans_frames_and_length() -> None:
    analysis = ("[UNRESOLVED_COLUMN.WITH_SUGGESTION] A column with name `nope` cannot be "
                "resolved. SQLSTATE: 42703;\n'Project ['nope]\n+- StreamingRelation x\n")
    assert failure_summary(_Failure(analysis)) == (
        "[UNRESOLVED_COLUMN.WITH_SUGGESTION] A column with name `nope` cannot be resolved.")
    framed = "java.lang.IllegalStateException: broken\n\tat org.apache.spark.X.y(X.scala:1)"
    assert failure_summary(_Failure(framed)) == "java.lang.IllegalStateException: broken"
    long = failure_summary(_Failure("word " * 400))
    assert len(long) <= 300 and long.endswith("...")


MINUTE = 60_000_000
AGG_KEY = {"type": "struct", "fields": [{"name": "user", "type": "string", "nullable": True,
                                         "metadata": {}}]}
COUNT = {"type": "struct", "fields": [{"name": "count", "type": "long", "nullable": True,
                                       "metadata": {}}]}


def _time(minutes: int) -> WindowSpec:
    return WindowSpec(kind="time", duration_us=minutes * MINUTE, slide_us=minutes * MINUTE,
                      start_us=0)


def _plan(old: WindowSpec | None, new: WindowSpec | None, rows: int = 5) -> UpgradePlan:
    from sparkpoint.snapshot.manifest import Manifest, SourceEntry

    entry = OperatorEntry(name="counts", operator_id=0, kind="aggregation",
                          spark_operator_name="stateStoreSave",
                          stores=[StoreEntry(name="default", key_schema=AGG_KEY,
                                             value_schema=COUNT)],
                          partitions=2, rows=rows, bytes=10, window=old)
    manifest = Manifest(name="s1", job="j", created_at="t", batch_id=1, spark_version="4.3.0",
                        state_store_provider="p", shuffle_partitions=2, query_id="q",
                        watermark_ms=0, job_file=None, params={},
                        sources=[SourceEntry(name="clicks", offset={"logOffset": 0})],
                        operators=[entry], files=[], total_bytes=0)
    job = JobShape((NewSource("clicks"),), (NewOperator(
        "counts", 0, "stateStoreSave", (NewStore("default", AGG_KEY, COUNT),), window=new),), 2)
    return validate(job, default_resume_point(job, "s1", manifest), {"s1": manifest})


def test_window_changes_are_problems_naming_old_and_new() -> None:
    plan = _plan(_time(10), _time(15))
    [problem] = plan.problems
    assert problem.startswith("state.counts: cannot resume from s1/counts: the window changed")
    assert "windows of 10 minutes" in problem and "windows of 15 minutes" in problem
    assert "initialize" in problem and "drain" in problem and "keep the old window" in problem
    gap = _plan(WindowSpec(kind="session", gap_us=5 * MINUTE),
                WindowSpec(kind="session", gap_us=7 * MINUTE)).problems
    assert len(gap) == 1 and "gap of 5 minutes" in gap[0] and "gap of 7 minutes" in gap[0]
    slide = _plan(_time(10), WindowSpec(kind="time", duration_us=10 * MINUTE,
                                        slide_us=5 * MINUTE, start_us=0)).problems
    assert len(slide) == 1 and "sliding every 5 minutes" in slide[0]


def test_same_window_passes_and_unknown_windows_warn() -> None:
    assert _plan(_time(10), _time(10)).ok
    drained = _plan(_time(10), _time(15), rows=0)  # no old windows left to overlap
    assert drained.ok
    old_manifest = _plan(None, _time(10))
    assert old_manifest.ok
    assert any("could not check" in w and "windows of 10 minutes" in w
               for w in old_manifest.warnings)


def test_plan_columns_align_with_long_names() -> None:
    plan = UpgradePlan(operators=[
        OperatorRow("short", "resume", {"snapshot": "s1", "operator": "short"}, True, "ok"),
        OperatorRow("symmetricHashJoin(impression_id,campaign_id,region)", "initialize", None,
                    True, "new operator: starts with empty state"),
        OperatorRow("dedupe(event_id,ts)", "drop", {"snapshot": "a-very-long-snapshot-name",
                    "operator": "dedupe(event_id,ts,user,url)"}, True, "left behind"),
    ])
    rows = plan_text(plan).splitlines()[2:5]
    for column in ("resume", "s1/short"):
        positions = {row.index(word) for row, word in zip(
            rows, [column, "initialize" if column == "resume" else "-",
                   "drop" if column == "resume" else "a-very"], strict=True)}
        assert len(positions) == 1, rows
    reasons = {row.index(text) for row, text in zip(
        rows, ["ok", "new operator", "left behind"], strict=True)}
    assert len(reasons) == 1, rows


def _cli(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "sparkpoint.cli.main", "--home", str(home),
                           *args], capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize(("args", "code", "error_code"), [
    (["jobs", "show", "nope", "--json"], 4, "UNKNOWN_JOB"),
    (["snapshot", "show", "nope", "--json"], 4, "UNKNOWN_SNAPSHOT"),
    (["snapshot", "create", "job", "a/b", "--json"], 2, "INVALID_NAME"),
    (["snapshot", "show", "--json"], 2, "USAGE"),
    (["snapshot", "list", "--json", "--bogus"], 2, "USAGE"),
    (["startpoint", "set", "job", "src", "--json"], 2, "USAGE"),
    (["plan", "job.py", "--json"], 2, "USAGE"),
])
def test_json_errors_are_json_objects_with_the_exit_code(
    tmp_path: Path, args: list[str], code: int, error_code: str
) -> None:
    done = _cli(tmp_path / "home", *args)
    assert done.returncode == code, done.stderr
    error = json.loads(done.stdout)["error"]
    assert error["code"] == error_code and error["exit_code"] == code and error["message"]


def test_bad_resume_point_entries_are_listed_and_the_good_ones_kept(tmp_path: Path) -> None:
    point = tmp_path / "rp.yaml"
    point.write_text("version: 1\nstate:\n  a: {mode: initialise}\n  b: {mode: resume}\n"
                     "  c: {mode: initialize}\n")
    # plan's reading: the problems, plus what is well-formed, to check against the job.
    read = read_resume_point(point)
    assert list(read.problems) == [
        f"{point}: state.a.mode: 'initialise' is not one of resume, initialize, seed",
        f"{point}: state.b.snapshot: required but missing"]
    assert list(read.point.state) == ["c"] and read.broken == {"state.a", "state.b"}
    # run refuses a malformed resume point before it starts Spark.
    job = tmp_path / "job.py"
    job.write_text("def build(spark, ctx):\n    raise AssertionError('never built')\n")
    text = _cli(tmp_path / "home", "run", str(job), "--job", "j", "--resume-point", str(point))
    assert text.returncode == 3 and text.stdout == ""
    assert text.stderr.splitlines()[1:] == [
        "  state.a.mode: 'initialise' is not one of resume, initialize, seed",
        "  state.b.snapshot: required but missing"]


def test_a_missing_param_of_plan_names_the_job_file_not_a_job(tmp_path: Path) -> None:
    """plan reads a job file without any job being involved: the message must not call the
    command a job ("job 'plan' needs ...")."""
    point = tmp_path / "rp.yaml"
    point.write_text("version: 1\n")
    job = tmp_path / "clicks.py"
    job.write_text("def build(spark, ctx):\n    return ctx.require_param('input')\n")
    done = _cli(tmp_path / "home", "plan", str(job), "--resume-point", str(point))
    assert done.returncode == 3, done.stderr
    assert done.stderr.strip() == (
        "error: [JOB_FILE] clicks.py (read by 'plan'; no job is involved) needs --param "
        "input=... (clicks.py calls ctx.require_param); pass it on the command line")
    assert "job 'plan'" not in done.stderr
