"""Bad input gets one clear line with the exit code of DESIGN.md, and changes nothing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sparkpoint import api
from sparkpoint.storage.home import Home
from sparkpoint.testing import write_clicks
from tests.conftest import EXAMPLES, SHUFFLE_PARTITIONS
from tests.support.cli import Result, sparkpoint

JOB = EXAMPLES / "clicks_job.py"
DATA = Path(__file__).resolve().parent.parent / "data"
CONF = ["--conf", f"spark.sql.shuffle.partitions={SHUFFLE_PARTITIONS}"]


def _one_clear_line(result: Result, code: int, *fragments: str) -> None:
    assert result.code == code, (result.code, result.err)
    assert "Traceback" not in result.err and "at org.apache" not in result.err
    message = [line for line in result.err.splitlines() if line.startswith("error:")]
    assert len(message) == 1, result.err
    for fragment in fragments:
        assert fragment in message[0], message[0]


def _tree(path: Path) -> list[tuple[str, int]]:
    if not path.exists():
        return []
    return sorted((str(p.relative_to(path)), p.stat().st_size) for p in path.rglob("*")
                  if p.is_file())


@pytest.fixture(scope="module")
def stopped_job(tmp_path_factory: pytest.TempPathFactory, spark: object) -> Home:
    """A home with one stopped job 'clicks' and its snapshot 'base'."""
    root = tmp_path_factory.mktemp("bad-input")
    home = Home(root / "home")
    write_clicks(root / "in", range(0, 3))
    api.run(home, JOB, "clicks", params={"input": str(root / "in"), "output": str(root / "out")},
            until_caught_up=True, spark=spark)  # type: ignore[arg-type]
    api.snapshot_create(home, "clicks", "base")
    return home


def test_unknown_job_and_snapshot(stopped_job: Home) -> None:
    _one_clear_line(sparkpoint(stopped_job, "snapshot", "create", "nojob", "s"), 4,
                    "job 'nojob' not found", "clicks")
    _one_clear_line(sparkpoint(stopped_job, "snapshot", "show", "nosnap"), 4,
                    "snapshot 'nosnap' not found", "base")
    _one_clear_line(sparkpoint(stopped_job, "jobs", "show", "nojob"), 4, "nojob")
    _one_clear_line(sparkpoint(stopped_job, "snapshot", "delete", "nosnap"), 4, "nosnap")


@pytest.mark.parametrize("name", ["../escape", "a/b", ".hidden", "x..y", ""])
def test_invalid_snapshot_names_are_refused(stopped_job: Home, name: str) -> None:
    before = _tree(stopped_job.root)
    _one_clear_line(sparkpoint(stopped_job, "snapshot", "create", "clicks", name), 2,
                    "not valid")
    assert _tree(stopped_job.root) == before


def test_taken_snapshot_name_is_refused(stopped_job: Home) -> None:
    before = _tree(stopped_job.root)
    _one_clear_line(sparkpoint(stopped_job, "snapshot", "create", "clicks", "base"), 4,
                    "already exists")
    assert _tree(stopped_job.root) == before


def test_job_file_without_build(stopped_job: Home, tmp_path: Path) -> None:
    result = sparkpoint(stopped_job, "run", str(DATA / "jobs" / "no_build.py"), "--job", "nb")
    _one_clear_line(result, 3, "no_build.py", "build(spark, ctx)")
    assert not stopped_job.job_dir("nb").exists()


def test_build_returning_a_dataframe(stopped_job: Home) -> None:
    result = sparkpoint(stopped_job, "run", str(DATA / "jobs" / "returns_frame.py"),
                        "--job", "rf", *CONF)
    _one_clear_line(result, 3, "returns_frame.py", "DataStreamWriter", "DataFrame")
    assert not stopped_job.job_dir("rf").exists()


def test_missing_job_file(stopped_job: Home, tmp_path: Path) -> None:
    result = sparkpoint(stopped_job, "run", str(tmp_path / "nope.py"), "--job", "x")
    _one_clear_line(result, 3, "nope.py", "not found")


def test_from_snapshot_into_an_existing_job_is_refused(stopped_job: Home) -> None:
    before = _tree(stopped_job.root)
    result = sparkpoint(stopped_job, "run", str(JOB), "--job", "clicks", "--from-snapshot", "base")
    _one_clear_line(result, 4, "already exists", "--job")
    assert _tree(stopped_job.root) == before


def test_an_output_spark_and_sparkpoint_would_read_apart_is_refused(
    stopped_job: Home, tmp_path: Path
) -> None:
    """Hadoop's Path keeps '#' in the name ('out#v2'), a URL parser cuts it ('out'): on main
    the sink-ahead check read the log of another directory than Spark's."""
    before = _tree(stopped_job.root)
    out = tmp_path / "out#v2"
    result = sparkpoint(stopped_job, "run", str(JOB), "--job", "hashed", "--param",
                        f"input={stopped_job.root.parent / 'in'}", "--param", f"output={out}",
                        "--until-caught-up", *CONF)
    _one_clear_line(result, 2, "[INVALID_LOCATION]", f"output {out}", "'#' in its path")
    assert _tree(stopped_job.root) == before
    assert not out.exists()


def _copy_of(home: Home, tmp_path: Path) -> Home:
    """A private copy of the shared home, for tests that damage or delete things."""
    import shutil

    copy = Home(tmp_path / "home")
    shutil.copytree(home.root, copy.root)
    return copy


def test_damaged_snapshot_is_reported_and_refused(stopped_job: Home, tmp_path: Path) -> None:
    copy = _copy_of(stopped_job, tmp_path)
    manifest = json.loads((copy.snapshot_dir("base") / "manifest.json").read_text())
    victim = next(f["path"] for f in manifest["files"] if f["path"].endswith(".zip"))
    target = copy.snapshot_dir("base") / victim
    data = bytearray(target.read_bytes())
    data[len(data) // 2] ^= 0xFF
    target.write_bytes(bytes(data))

    verify = sparkpoint(copy, "snapshot", "verify", "base")
    assert verify.code == 3
    assert victim in verify.out and "checksum mismatch" in verify.out
    as_json = sparkpoint(copy, "snapshot", "verify", "base", "--json")
    assert as_json.code == 3 and as_json.json()["ok"] is False

    before = _tree(copy.root)
    run = sparkpoint(copy, "run", str(JOB), "--job", "fresh", "--from-snapshot", "base",
                     "--param", "input=/nonexistent", "--param", "output=/nonexistent")
    _one_clear_line(run, 3, "damaged", "snapshot verify base")
    assert _tree(copy.root) == before


def test_missing_file_in_snapshot_is_named(stopped_job: Home, tmp_path: Path) -> None:
    copy = _copy_of(stopped_job, tmp_path)
    manifest = json.loads((copy.snapshot_dir("base") / "manifest.json").read_text())
    victim = next(f["path"] for f in manifest["files"] if "/offsets/" in f["path"])
    (copy.snapshot_dir("base") / victim).unlink()
    verify = sparkpoint(copy, "snapshot", "verify", "base", "--json")
    assert verify.code == 3
    assert any(victim in p["path"] and "missing" in p["message"]
               for p in verify.json()["problems"])


def test_reading_commands_json_shapes(stopped_job: Home) -> None:
    listed = sparkpoint(stopped_job, "snapshot", "list", "--json")
    assert listed.code == 0
    [row] = listed.json()
    assert {"name", "job", "created_at", "batch_id", "bytes"} <= row.keys()
    shown = sparkpoint(stopped_job, "snapshot", "show", "base", "--json").json()
    assert {op["name"] for op in shown["operators"]} == {"dedup_clicks", "hourly_counts"}
    for op in shown["operators"]:
        assert {"name", "kind", "partitions", "rows", "bytes", "operator_id"} <= op.keys()
        assert op["partitions"] == int(SHUFFLE_PARTITIONS)
    assert {s["name"] for s in shown["sources"]} == {"clicks"}
    jobs = sparkpoint(stopped_job, "jobs", "list", "--json").json()
    assert [(j["name"], j["status"]) for j in jobs] == [("clicks", "stopped")]
    assert sparkpoint(stopped_job, "snapshot", "list", "--job", "other", "--json").json() == []


def test_delete_removes_a_snapshot(stopped_job: Home, tmp_path: Path) -> None:
    copy = _copy_of(stopped_job, tmp_path)
    assert sparkpoint(copy, "snapshot", "delete", "base").code == 0
    assert sparkpoint(copy, "snapshot", "list", "--json").json() == []
    assert not copy.snapshot_dir("base").exists()
