"""Hostile names, arguments and files: never exit 1, never a traceback, nothing changed outside
the home, and the home unchanged whenever a command refuses.

The CLI is driven in-process (click's runner) on commands that start no JVM, against a small
home built once: job 'clicks' (stopped, a real Spark 4.3 checkpoint from tests/data), its
snapshot 'base' and a pending startpoint. A few dozen examples run the real CLI process.
"""

from __future__ import annotations

import json
import os
import shutil
import string
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sparkpoint.checkpoint.layout import Checkpoint
from sparkpoint.cli.main import cli
from sparkpoint.errors import SparkpointError
from sparkpoint.runtime.registry import JobRegistry, SourceRecord
from sparkpoint.snapshot.export import JobInfo
from sparkpoint.snapshot.manifest import MANIFEST_FILE
from sparkpoint.snapshot.store import open_snapshot_store
from sparkpoint.startpoints.store import Startpoint, StartpointStore
from sparkpoint.storage.home import Home, name_problem, operator_name_problem
from sparkpoint.testing import write_clicks
from sparkpoint.upgrade.resume_point import load_resume_point
from tests.support.golden_job import install_clicks_job

GOLDEN = Path(__file__).resolve().parent.parent / "data" / "golden-hdfs"
JOB, SNAPSHOT, SOURCE = "clicks", "base", "clicks"
FAST = settings(max_examples=200, deadline=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture,
                                       HealthCheck.too_slow])

# Names aimed at escaping the home, or at the files inside it.
HOSTILE = [
    "..", ".", "../x", "../../x", "../../../x", "../../../../outside/victim",
    "../../../../../outside/victim", "a/b", "/etc/passwd", "/tmp", "x\x00y", "\\x", "..\\x",
    ".hidden", ".staging", "x..y", "", " ", "-", "clicks/../clicks", "clicks\n", "a" * 201,
    "_ok", "ok.", "ok-1", JOB, SNAPSHOT, "jobs", "snapshots", "startpoints", "checkpoint",
    "job.json", "manifest.json", "é", "x y", "~", "$HOME", "*", "clicks.json", "0",
]
names = st.one_of(
    st.sampled_from(HOSTILE),
    st.text(st.characters(exclude_categories=["Cs"]), max_size=24),
    st.from_regex(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,12}", fullmatch=True),
    st.lists(st.sampled_from(["..", ".", "", "x", JOB, SNAPSHOT, "outside", "victim",
                              "victim.json", "jobs", "home"]),
             min_size=1, max_size=7).map("/".join),
)
values = st.one_of(st.text(max_size=40), st.sampled_from([
    "2026-01-01T00:00:00Z", "2026-01-01", "yesterday", '{"logOffset": 0}', '{"logOffset":-5}',
    "{}", "[]", "null", '{"clicks": {"0": 1}}', "1e999", "NaN", "-1", "0",
    "9999-12-31T23:59:59Z", "0001-01-01T00:00:00+14:00"]))


def _tree(root: Path, skip: Path | None = None) -> dict[str, tuple[int, int, int]]:
    """Every file and directory under ``root`` (but ``skip``) with its inode, size and
    modification time: any write, rename or replacement changes one of them."""
    found: dict[str, tuple[int, int, int]] = {}
    for dirpath, dirs, files in os.walk(root):
        here = Path(dirpath)
        if skip is not None and (here == skip or skip in here.parents):
            dirs[:] = []
            continue
        for name in dirs:
            found[str((here / name).relative_to(root)) + "/"] = (0, 0, 0)
        for name in files:
            path = here / name
            info = path.lstat()
            found[str(path.relative_to(root))] = (info.st_ino, info.st_size, info.st_mtime_ns)
    return found


def _build_template(root: Path) -> None:
    home = Home(root / "home")
    write_clicks(root / "in", range(2))
    install_clicks_job(home, GOLDEN, JOB, root / "job.py",
                       [SourceRecord(name=SOURCE, kind="file", path=str(root / "in"))])
    open_snapshot_store(home).create(SNAPSHOT, Checkpoint(home.checkpoint_dir(JOB)), JobInfo(
        job=JOB, operator_names={0: "hourly_counts", 1: "dedup_clicks"}, job_file=None,
        params={}, spark_version="4.3.0"))
    StartpointStore(home).set(JOB, Startpoint(source=SOURCE, kind="earliest",
                                              set_at="2026-01-01T00:00:00Z"))
    # Files a traversal would hit, outside the home.
    for directory in (root / "outside", root):
        directory.mkdir(exist_ok=True)
        for name in ("victim", "victim.json", "x.json", "x", "manifest.json"):
            (directory / name).write_text("do not touch\n")


@dataclass
class World:
    root: Path
    template: Path

    @property
    def home(self) -> Path:
        return self.root / "home"

    def reset_home(self) -> None:
        shutil.rmtree(self.home)
        shutil.copytree(self.template / "home", self.home, symlinks=True)


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    template = tmp_path_factory.mktemp("hostile-template")
    _build_template(template)
    root = tmp_path_factory.mktemp("hostile") / "w"
    shutil.copytree(template, root, symlinks=True)
    cwd = Path.cwd()
    os.chdir(root)  # relative paths given to the CLI land here, where they are watched
    try:
        yield World(root, template)
    finally:
        os.chdir(cwd)


def _invoke(world: World, args: list[str]) -> int:
    """Run the CLI in-process and check every invariant; reset the home if it changed."""
    home_before = _tree(world.home)
    outside_before = _tree(world.root, skip=world.home)
    result = CliRunner().invoke(cli, ["--home", str(world.home), *args])
    shown = f"args={args!r} exit={result.exit_code}\nstdout={result.stdout}\n" \
            f"stderr={result.stderr}"
    assert result.exit_code in (0, 2, 3, 4), shown
    assert result.exception is None or isinstance(result.exception, SystemExit), shown
    assert "Traceback" not in result.stdout + result.stderr, shown
    assert _tree(world.root, skip=world.home) == outside_before, shown
    if result.exit_code != 0:
        assert _tree(world.home) == home_before, shown
        errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
        assert len(errors) <= 1, shown
    elif _tree(world.home) != home_before:
        world.reset_home()
    return result.exit_code


@FAST
@given(name=names, as_json=st.booleans())
def test_job_commands(world: World, name: str, as_json: bool) -> None:
    flag = ["--json"] if as_json else []
    # After '--', as a user passes a name that begins with '-' ('--help' alone shows help).
    code = _invoke(world, ["jobs", "show", *flag, "--", name])
    if name_problem(name, "job") is not None:
        assert code == 2
    _invoke(world, ["startpoint", "list", name, *flag])
    _invoke(world, ["snapshot", "list", "--job", name, *flag])
    _invoke(world, ["snapshot", "create", name, "fresh"])
    if name != JOB:  # refused or unknown: no JVM starts
        _invoke(world, ["drain", name])


@settings(FAST, max_examples=150)
@given(name=names, as_json=st.booleans())
def test_snapshot_commands(world: World, name: str, as_json: bool) -> None:
    flag = ["--json"] if as_json else []
    for command in ("show", "verify"):
        code = _invoke(world, ["snapshot", command, name, *flag])
        if name_problem(name, "snapshot") is not None:
            assert code == 2
    _invoke(world, ["snapshot", "create", JOB, name, *flag])
    _invoke(world, ["snapshot", "delete", name])


@settings(FAST, max_examples=300)
@given(job=st.one_of(st.just(JOB), names), source=st.one_of(st.just(SOURCE), names),
       position=st.sampled_from(["--earliest", "--latest", "--timestamp", "--offset"]),
       value=values, partition=st.none() | values, dry_run=st.booleans())
def test_startpoint_commands(world: World, job: str, source: str, position: str, value: str,
                             partition: str | None, dry_run: bool) -> None:
    args = ["startpoint", "set", job, source, position]
    if position in ("--timestamp", "--offset"):
        args.append(value)
    if partition is not None:
        args += ["--partition", partition]
    if dry_run:
        args.append("--dry-run")
    _invoke(world, args)
    code = _invoke(world, ["startpoint", "clear", job, source])
    if name_problem(source, "source") is not None and job == JOB:
        assert code == 2


# Damage aimed at the records sparkpoint reads back.
damage = st.one_of(
    st.binary(max_size=64),
    st.text(max_size=64).map(str.encode),
    st.sampled_from([b"", b"{", b"[]", b"null", b"{}", b'"x"', b"\xff\xfe", b"[{}]",
                     b'[{"source": "other", "kind": "earliest", "set_at": "x"}]',
                     b'{"format_version": 1}', b'{"format_version": 2, "name": "x"}',
                     b'{"name": "../../x", "job_file": "j"}', b"[" * 5000]),
)


@settings(FAST, max_examples=150)
@given(record=st.sampled_from(["job", "startpoint", "manifest"]), content=damage)
def test_corrupt_records_are_exit_3_naming_the_file(world: World, record: str,
                                                    content: bytes) -> None:
    home = Home(world.home)
    target = {
        "job": JobRegistry(home).record_path(JOB),
        "startpoint": next((home.job_dir(JOB) / "startpoints" / SOURCE).glob("*.json")),
        "manifest": home.snapshot_dir(SNAPSHOT) / MANIFEST_FILE,
    }[record]
    original = target.read_bytes()
    target.write_bytes(content)
    try:
        commands = {
            "job": [["jobs", "show", JOB], ["jobs", "list"], ["startpoint", "list", JOB]],
            # clear removes a damaged file without reading it.
            "startpoint": [["startpoint", "list", JOB], ["startpoint", "clear", JOB, SOURCE]],
            "manifest": [["snapshot", "show", SNAPSHOT], ["snapshot", "list"],
                         ["snapshot", "verify", SNAPSHOT]],
        }[record]
        for args in commands:
            result = CliRunner().invoke(cli, ["--home", str(world.home), *args])
            shown = f"{args} -> {result.exit_code}: {result.stderr}"
            assert result.exit_code in (0, 3), shown
            assert "Traceback" not in result.stderr, shown
            if result.exit_code == 3 and args[1] != "verify":
                assert str(target) in result.stderr, shown
    finally:
        world.reset_home()
    assert target.read_bytes() == original


# Resume point files: structures with hostile names, arbitrary JSON-like trees, raw text.
json_like = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner,
                                                                 max_size=3),
    max_leaves=12)
starts = st.one_of(st.sampled_from(["earliest", "latest", "soon", None, 5]),
                   st.fixed_dictionaries({"timestamp": values}),
                   st.fixed_dictionaries({"offset": json_like}), json_like)
source_entries = st.one_of(
    st.fixed_dictionaries({"mode": st.just("resume"), "snapshot": names},
                          optional={"source": names}),
    st.fixed_dictionaries({"mode": st.just("initialize")}, optional={"start": starts}),
    json_like)
state_entries = st.one_of(
    st.fixed_dictionaries({"mode": st.just("resume"), "snapshot": names},
                          optional={"operator": names}),
    st.fixed_dictionaries({"mode": st.just("initialize")}), json_like)
resume_points = st.fixed_dictionaries(
    {"version": st.sampled_from([1, 1, 1, 2, "1", None])},
    optional={"sources": st.dictionaries(names, source_entries, max_size=3) | json_like,
              "state": st.dictionaries(names, state_entries, max_size=3) | json_like,
              "drop": st.lists(st.fixed_dictionaries({"snapshot": names, "operator": names}),
                               max_size=2) | json_like})


def _as_text(point: object, form: str) -> str:
    if form == "json":
        return json.dumps(point)
    return yaml.safe_dump(point, default_flow_style=form == "flow", allow_unicode=True)


def _check_parse(world: World, text: str, suffix: str) -> None:
    path = world.root / f"point{suffix}"
    path.write_text(text, "utf-8")
    outside_before = _tree(world.root)
    try:
        point = load_resume_point(path)
    except SparkpointError as exc:
        # One line, or a header naming the file and one indented line per problem.
        first, *rest = exc.message.split("\n")
        assert exc.exit_code == 3 and str(path) in first, exc.message
        assert all(line.startswith("  ") and "\n" not in line and line.strip()
                   for line in rest), exc.message
    else:
        # Whatever was accepted names nothing that could become a path outside the home.
        for name in point.snapshots():
            assert name_problem(name, "snapshot") is None
        for name, entry in point.sources.items():
            assert name_problem(name, "source") is None
            assert name_problem(getattr(entry, "source", None) or name, "source") is None
        for name, state in point.state.items():
            assert operator_name_problem(getattr(state, "operator", None) or name) is None
        for drop in point.drop:
            assert operator_name_problem(drop.operator) is None
    assert _tree(world.root) == outside_before


@settings(FAST, max_examples=800)
@given(point=resume_points, form=st.sampled_from(["json", "flow", "block"]))
def test_resume_point_files(world: World, point: dict[str, object], form: str) -> None:
    _check_parse(world, _as_text(point, form), ".json" if form == "json" else ".yaml")


@settings(FAST, max_examples=300)
@given(text=st.one_of(
    st.text(max_size=200),
    st.text(alphabet=string.printable + "{}[]:-'\"&*!|>%@`", max_size=200),
    st.sampled_from(["version: 1\nsources:\n  ? [a]\n  : 1\n", "version: 1\n" + "[" * 3000,
                     "version: 1\nsources: {x: {mode: initialize, start: {timestamp: "
                     "2026-13-45}}}\n", "version: 1\nsources: &a [*a]\n",
                     "!!python/object/apply:os.system ['touch pwned']\n",
                     "version: 1\nstate: {x: {mode: initialize}}\nstate: {}\n"])),
    suffix=st.sampled_from([".yaml", ".json"]))
def test_resume_point_raw_text(world: World, text: str, suffix: str) -> None:
    _check_parse(world, text, suffix)


@pytest.mark.parametrize("stamp", ["2026-01-01T00:00:00Z", "'2026-01-01T00:00:00Z'",
                                   '"2026-01-01T00:00:00Z"'])
def test_timestamps_in_either_form(world: World, stamp: str) -> None:
    path = world.root / "stamp.yaml"
    path.write_text(f"version: 1\nsources:\n  clicks: {{mode: initialize, start: "
                    f"{{timestamp: {stamp}}}}}\n")
    point = load_resume_point(path)
    assert point.to_dict()["sources"]["clicks"]["start"] == {"timestamp": "2026-01-01T00:00:00Z"}


def test_a_bad_start_is_one_readable_problem(world: World) -> None:
    path = world.root / "bad-start.yaml"
    path.write_text("version: 1\nsources:\n  clicks: {mode: initialize, start: {time: 5}}\n")
    with pytest.raises(SparkpointError) as caught:
        load_resume_point(path)
    assert caught.value.message.endswith(
        ": sources.clicks.start: expected earliest, latest, {timestamp: ISO8601} or "
        "{offset: ...}, found {time: 5}")


def _process(world: World, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "sparkpoint.cli.main", "--home",
                           str(world.home), *args], capture_output=True, text=True,
                          timeout=120, cwd=world.root)


def test_startpoint_clear_cannot_delete_outside_the_home(world: World) -> None:
    before = _tree(world.root)
    for hostile in ("../../../x", "../../../../outside/victim", "../../../../x"):
        done = _process(world, "startpoint", "clear", JOB, hostile)
        assert done.returncode == 2, done.stderr
        assert done.stderr.count("\n") == 1 and "[INVALID_NAME] source name" in done.stderr
    assert _tree(world.root) == before


@settings(FAST, max_examples=12)
@given(name=names.filter(lambda n: "\x00" not in n),
       command=st.sampled_from([["startpoint", "clear", JOB], ["snapshot", "show"],
                                ["jobs", "show"], ["snapshot", "delete"],
                                ["snapshot", "create", JOB]]))
def test_cli_process_smoke(world: World, name: str, command: list[str]) -> None:
    before = _tree(world.root, skip=world.home)
    home_before = _tree(world.home)
    done = _process(world, *command, name)
    assert done.returncode in (0, 2, 3, 4), done.stderr
    assert "Traceback" not in done.stderr
    assert _tree(world.root, skip=world.home) == before
    if done.returncode != 0:
        assert _tree(world.home) == home_before
    elif _tree(world.home) != home_before:
        world.reset_home()


@pytest.mark.parametrize("name", ["a/b", "..", ".hidden", "x\x00", "tab\there", ""])
def test_operator_names_that_could_traverse_are_refused_in_the_job(name: str) -> None:
    from sparkpoint.errors import JobFileError
    from sparkpoint.runtime.context import JobContext

    with pytest.raises(JobFileError, match=r"operator name .* is not valid"):
        JobContext("j").stateful(name, None)  # type: ignore[arg-type]


def test_a_mapping_whose_key_holds_a_line_break_is_named_on_one_line(world: World) -> None:
    """Found by the test above: YAML writes such a key ('? "\\n" : null') over several lines,
    and the problem's line was broken in two."""
    _check_parse(world, json.dumps({"version": 1, "sources": {}, "drop": {"\n": None}}),
                 ".json")
