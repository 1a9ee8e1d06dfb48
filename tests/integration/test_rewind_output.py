"""Rolling a job back into its own output: `run --from-snapshot S --rewind-output` takes the
file sink's table back to S's batch (the later batches' files and log entries moved aside
under the output), then the new version continues it. Read the way users read a file sink:
spark.read of the output, through its _spark_metadata log; rows computed in plain Python.

The job is stateless and reads one input file per batch, so the rows of batches 0..b are the
rows of files 0..b, whatever version wrote them.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from sparkpoint import api
from sparkpoint.checkpoint.sink_log import latest_batch
from sparkpoint.crash_points import CRASH_ENV, CRASH_EXIT_CODE, CRASH_POINTS
from sparkpoint.errors import PreconditionError
from sparkpoint.sinks.rewind import INTENT_FILE, RECORD_FILE, REWOUND_DIR
from sparkpoint.storage.home import Home
from sparkpoint.testing import (
    Click,
    clicks_for_slice,
    expected_hourly_counts,
    output_rows,
    write_clicks,
)
from tests.conftest import EXAMPLES
from tests.support.cli import sparkpoint, start, wait_for
from tests.support.shared_start import SharedStart, build_once

JOB = Path(__file__).resolve().parent.parent / "data" / "jobs" / "filtered_clicks.py"
FILES = 6  # input files, one batch each: batches 0..5
SNAPSHOT_BATCH = 1
NEW_USERS = ("ana", "bo")  # the new version's filter
# Compactions at batches 2 and 5: the rewind to batch 1 crosses both.
COMPACT = "spark.sql.streaming.fileSink.log.compactInterval=3"
REWIND_POINTS = sorted(name for name in CRASH_POINTS if name.startswith("rewind."))
pytestmark = pytest.mark.spark


def _rows(clicks: Iterable[Click], users: Iterable[str] | None = None) -> Counter[Any]:
    """Rows the job writes for ``clicks`` (event_id, user, url, ts), computed without Spark."""
    wanted = set(users) if users is not None else None
    return Counter((c.event_id, c.user, c.url, c.ts.replace(tzinfo=None)) for c in clicks
                   if wanted is None or c.user in wanted)


def _file_rows(indexes: Iterable[int], users: Iterable[str] | None = None) -> Counter[Any]:
    return _rows([c for i in indexes for c in clicks_for_slice(i)], users)


@dataclass(frozen=True)
class Written:
    home: Home
    inp: Path
    out: Path

    def job_args(self) -> list[str]:
        return [str(JOB), "--from-snapshot", "old", "--param", f"input={self.inp}",
                "--param", f"output={self.out}", "--param", "users=" + ",".join(NEW_USERS),
                "--conf", COMPACT]

    def args(self, job: str, *extra: str) -> list[str]:
        return ["run", "--job", job, *self.job_args(), "--until-caught-up", *extra]


def _v1_then_snapshot(spark: Any, home: Home, root: Path) -> None:
    """v1 (every user) writes batches 0..5 into the output; snapshot 'old' is its batch 1."""
    inp, out = root / "in", root / "out"
    write_clicks(inp, range(FILES))
    result = api.run(home, JOB, "v1", params={"input": str(inp), "output": str(out)},
                     conf=dict([COMPACT.split("=", 1)]), until_caught_up=True, spark=spark)
    assert result.last_batch == FILES - 1
    manifest = api.snapshot_create(home, "v1", "old", batch=SNAPSHOT_BATCH)
    assert manifest.batch_id == SNAPSHOT_BATCH
    log = {p.name for p in (out / "_spark_metadata").iterdir() if not p.name.startswith(".")}
    assert {"2.compact", "5.compact"} <= log  # the rewind crosses compactions
    assert output_rows(spark, out) == _file_rows(range(FILES))


@pytest.fixture(scope="module")
def v1_written(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> SharedStart:
    return build_once(tmp_path_factory, "v1-written",
                      lambda root: _v1_then_snapshot(spark, Home(root / "home"), root))


@pytest.fixture
def written(v1_written: SharedStart) -> Written:
    """What _v1_then_snapshot leaves, the same for every test: built once, a fresh copy
    each (tests/support/shared_start.py)."""
    root = v1_written.fresh()
    return Written(Home(root / "home"), root / "in", root / "out")


def _expected_after_rewind() -> Counter[Any]:
    """v1's rows of batches 0..1, then the new version's rows of the files after them."""
    return _file_rows(range(SNAPSHOT_BATCH + 1)) + \
        _file_rows(range(SNAPSHOT_BATCH + 1, FILES), NEW_USERS)


def _rewound_dirs(out: Path) -> list[Path]:
    root = out / REWOUND_DIR
    return sorted(root.iterdir()) if root.is_dir() else []


def _check_moved_aside(spark: Any, out: Path) -> None:
    """One rewind record; every file it moved is there, and they hold v1's later rows.

    Spark's readers skip the directory they are in: a log-based read lists logged files only
    (FileStreamSinkLog.allFiles), a listing drops names starting with '_' and without '='
    (HadoopFSUtils.shouldFilterOutPathName); read by itself it is a table of its own."""
    [moved] = _rewound_dirs(out)
    assert not (moved / INTENT_FILE).exists()
    record = json.loads((moved / RECORD_FILE).read_text())
    assert (record["to_batch"], record["latest_batch"]) == (SNAPSHOT_BATCH, FILES - 1)
    assert sorted(record["log_entries"]) == ["2.compact", "3", "4", "5.compact"]
    assert record["files"]
    for relative in record["files"]:
        assert (moved / relative).is_file(), relative
        assert not (out / relative).exists(), relative
    for name in record["log_entries"]:
        assert (moved / "_spark_metadata_abandoned" / name).is_file()
    # The directory Spark's readers skip reads as a table of its own: the abandoned rows.
    abandoned = spark.read.parquet(str(moved)).collect()
    assert Counter(tuple(row) for row in abandoned) == \
        _file_rows(range(SNAPSHOT_BATCH + 1, FILES))


def test_rewind_takes_the_table_back_to_the_snapshot_then_continues(
    spark: Any, written: Written
) -> None:
    home = written.home
    out = written.out

    refused = sparkpoint(home, *written.args("v2"))
    assert refused.code == 4, refused.err
    assert "[SINK_AHEAD]" in refused.err
    for way in ("new output directory", "--rewind-output", "--renumber-batches",
                "keeps the old run's rows"):
        assert way in refused.err, way
    assert _rewound_dirs(out) == [] and latest_batch(out) == FILES - 1

    planned = sparkpoint(home, "plan", *written.job_args(), "--rewind-output", "--json")
    assert planned.code == 0, planned.err
    assert planned.json()["batches"] == {
        "snapshot_batch": SNAPSHOT_BATCH, "first_batch": SNAPSHOT_BATCH + 1,
        "renumbered": False, "sink_latest_batch": FILES - 1,
        "rewind_to_batch": SNAPSHOT_BATCH}
    assert _rewound_dirs(out) == []  # plan changes nothing

    ran = sparkpoint(home, *written.args("v2", "--rewind-output"))
    assert ran.code == 0, ran.err
    assert f"rewound the output {out} to batch {SNAPSHOT_BATCH}" in ran.err
    assert f"starting at batch {SNAPSHOT_BATCH + 1}" in ran.err
    assert latest_batch(out) == FILES - 1  # the new job's batches 2..5, accepted by the sink
    assert output_rows(spark, out) == _expected_after_rewind()
    _check_moved_aside(spark, out)
    # v1's batches after the snapshot were moved aside: it may not run on into v2's table,
    # though the log now ends at its last batch again.
    with pytest.raises(PreconditionError, match="moved aside"):
        api.run(home, JOB, "v1", params={"input": str(written.inp), "output": str(out)},
                conf=dict([COMPACT.split("=", 1)]), until_caught_up=True, spark=spark)
    assert output_rows(spark, out) == _expected_after_rewind()


def test_renumbered_batches_announce_the_rows_they_keep(
    spark: Any, written: Written
) -> None:
    """--renumber-batches leaves v1's batches after the snapshot in the table: both versions'
    rows of the same input. It stays possible, and now says so."""
    home = written.home
    ran = sparkpoint(home, *written.args("v2", "--renumber-batches"))
    assert ran.code == 0, ran.err
    assert f"keeps the old run's batches {SNAPSHOT_BATCH + 1}..{FILES - 1}" in ran.err, ran.err
    assert "--rewind-output" in ran.err
    doubled = _file_rows(range(FILES)) + _file_rows(range(SNAPSHOT_BATCH + 1, FILES), NEW_USERS)
    assert output_rows(spark, written.out) == doubled


def test_rewind_refused_while_the_writing_job_runs(
    spark: Any, written: Written, tmp_path: Path
) -> None:
    home = written.home
    log = tmp_path / "v1.log"
    running = start(home, "run", str(JOB), "--job", "v1", log=log)
    try:
        wait_for(lambda: api.job_view(home, "v1").record.effective_status() == "running"
                 and "starting at batch" in log.read_text(), 120, "v1 running", log)
        before = sorted(p.name for p in (written.out / "_spark_metadata").iterdir())
        refused = sparkpoint(home, *written.args("v2", "--rewind-output"))
        assert refused.code == 4, refused.err
        assert "[JOB_RUNNING]" in refused.err and "job 'v1' writes the output" in refused.err
        assert sorted(p.name for p in (written.out / "_spark_metadata").iterdir()) == before
        assert _rewound_dirs(written.out) == []
        assert not home.job_dir("v2").exists()
    finally:
        stopped = sparkpoint(home, "jobs", "stop", "v1", "--wait")
        running.wait(timeout=120)
    assert stopped.code == 0, stopped.err


def test_a_rewind_the_output_refuses_is_refused_before_spark_starts(
    spark: Any, written: Written, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The output's sink log names a file outside the output (a log not written by Spark's
    file sink alone): its files cannot be moved aside. The output is the one v1 wrote, and a
    --param of the new job names it: the files alone decide, so the refusal comes before
    any Spark session (the factory fails here if asked), with the one line the rewind
    itself gives and its exit code. Nothing is changed."""
    from sparkpoint.errors import SinkRewindError
    from sparkpoint.sinks.rewind import plan_rewind
    from tests.support.jvm import forbid_spark_sessions

    home = written.home
    entry = written.out / "_spark_metadata" / "3"
    foreign = (tmp_path / "elsewhere" / "part-00000.parquet").as_uri()
    entry.write_text(entry.read_text().rstrip("\n") + "\n" + json.dumps(
        {"path": foreign, "size": 10, "isDir": False, "modificationTime": 1,
         "blockReplication": 1, "blockSize": 33554432, "action": "add"},
        separators=(",", ":")))
    with pytest.raises(SinkRewindError) as by_the_rewind:
        plan_rewind(written.out, SNAPSHOT_BATCH, "what the rewind itself says")
    before = sorted(p.name for p in written.out.rglob("*"))

    forbid_spark_sessions(monkeypatch)
    with pytest.raises(SinkRewindError) as refused:
        api.run(home, JOB, "v2", params={"input": str(written.inp), "output": str(written.out),
                                         "users": ",".join(NEW_USERS)},
                from_snapshot="old", rewind_output=True, until_caught_up=True)
    assert refused.value.message == by_the_rewind.value.message
    assert f"names {foreign}, outside the output {written.out}" in refused.value.message
    assert refused.value.exit_code == by_the_rewind.value.exit_code == 4
    cli = sparkpoint(home, *written.args("v2", "--rewind-output"))
    assert cli.code == 4 and cli.err.strip() == \
        f"error: [{refused.value.code}] {refused.value.message}", cli.err
    assert sorted(p.name for p in written.out.rglob("*")) == before
    assert not home.job_dir("v2").exists()


@pytest.mark.parametrize("point", REWIND_POINTS)
def test_crashed_rewind_is_finished_by_the_next_run(
    spark: Any, written: Written, point: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = written.home
    out = written.out
    monkeypatch.setenv(CRASH_ENV, point)
    crashed = sparkpoint(home, *written.args("v2", "--rewind-output"))
    monkeypatch.delenv(CRASH_ENV)
    assert crashed.code == CRASH_EXIT_CODE, crashed.err
    assert f"crash point {point}" in crashed.err

    # Meanwhile a reader sees a whole prefix of v1's batches, never a broken table.
    logged = latest_batch(out)
    assert logged is not None and SNAPSHOT_BATCH <= logged <= FILES - 1
    assert output_rows(spark, out) == _file_rows(range(logged + 1))
    [moved] = _rewound_dirs(out)
    assert (moved / INTENT_FILE).is_file()

    # The same command again (in this process: the same code path as the CLI's).
    lines: list[str] = []
    api.run(home, JOB, "v2", params={"input": str(written.inp), "output": str(out),
                                     "users": ",".join(NEW_USERS)},
            conf=dict([COMPACT.split("=", 1)]), from_snapshot="old", until_caught_up=True,
            spark=spark, echo=lines.append, rewind_output=True)
    assert any("finished an interrupted rewind" in line for line in lines), lines
    assert output_rows(spark, out) == _expected_after_rewind()  # nothing lost, nothing twice
    _check_moved_aside(spark, out)
    assert api.job_view(home, "v2").record.lineage.from_snapshot == "old"


def test_stateful_rollback_into_its_own_output_equals_one_uninterrupted_run(
    spark: Any, home: Home, tmp_path: Path
) -> None:
    """The example job (dedupe, then hourly counts) rolled back to its batch 2 and run again
    into the same output: the windows in state at batch 2 are emitted once, by the new run,
    and none of the old run's later windows stays beside them."""
    job = EXAMPLES / "clicks_job.py"
    inp, out = tmp_path / "in", tmp_path / "out"
    events = write_clicks(inp, range(6))
    params = {"input": str(inp), "output": str(out), "files_per_batch": "1"}
    first = api.run(home, job, "v1", params=params, until_caught_up=True, spark=spark)
    assert first.last_batch is not None and first.last_batch > 2
    api.snapshot_create(home, "v1", "at2", batch=2)
    assert output_rows(spark, out) == expected_hourly_counts(events)
    lines: list[str] = []
    api.run(home, job, "v1-again", params=params, from_snapshot="at2", until_caught_up=True,
            spark=spark, echo=lines.append, rewind_output=True)
    assert any("rewound the output" in line for line in lines), lines
    assert output_rows(spark, out) == expected_hourly_counts(events)
    # The old run's windows after batch 2 left the table and the new run wrote them again.
    [moved] = _rewound_dirs(out)
    abandoned = Counter(tuple(row) for row in spark.read.parquet(str(moved)).collect())
    assert abandoned and abandoned <= expected_hourly_counts(events)


def test_every_rewind_step_has_a_crash_point() -> None:
    assert set(REWIND_POINTS) == {"rewind.intent_recorded", "rewind.log_entry_moved",
                                  "rewind.log_rewound", "rewind.file_moved",
                                  "rewind.files_moved"}
