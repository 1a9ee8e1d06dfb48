"""What a new user does in the first hour, through the CLI: pandas jobs with no
PYSPARK_PYTHON set, re-runs without their params, a new output for an existing job,
--max-batches, watching, stopping and deleting jobs."""

from __future__ import annotations

import signal
from collections import Counter
from pathlib import Path

import pytest
import yaml

from sparkpoint.crash_points import CRASH_ENV, CRASH_EXIT_CODE
from sparkpoint.storage.home import Home
from sparkpoint.testing import expected_hourly_counts, output_rows, write_clicks
from tests.conftest import EXAMPLES, SHUFFLE_PARTITIONS
from tests.support.cli import (
    committed_log_offset,
    files_committed,
    sparkpoint,
    sparkpoint_on_terminal,
    start,
    wait_for,
)

JOBS = Path(__file__).resolve().parent.parent / "data" / "jobs"
CLICKS = EXAMPLES / "clicks_job.py"
CONF = ["--conf", f"spark.sql.shuffle.partitions={SHUFFLE_PARTITIONS}"]


def _error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if " ERROR " in line or "Exception" in line]


def test_missing_param_and_broken_file_fail_before_spark_starts(home: Home,
                                                                tmp_path: Path) -> None:
    missing = sparkpoint(home, "run", str(CLICKS), "--job", "c", "--param", "input=x")
    assert missing.code == 3, missing.err
    assert missing.err.strip().splitlines() == [
        "error: [JOB_FILE] job 'c' needs --param output=... (clicks_job.py calls "
        "ctx.require_param); pass it on the command line"]
    broken = tmp_path / "broken.py"
    broken.write_text("def build(spark, ctx):\n    return (\n")
    bad = sparkpoint(home, "run", str(broken), "--job", "b")
    assert bad.code == 3 and "not valid Python (line 2)" in bad.err, bad.err
    # No JVM started (Spark's own start-up lines are absent) and nothing was recorded.
    assert "log level" not in missing.err + bad.err
    assert not home.jobs_dir.exists() or not any(home.jobs_dir.iterdir())


@pytest.mark.spark
def test_module_level_pandas_udfs_run_with_sparkpoints_python(
    spark: object, home: Home, tmp_path: Path
) -> None:
    inp, out = tmp_path / "in", tmp_path / "out"
    events = write_clicks(inp, range(2))
    job = str(JOBS / "pandas_udf.py")
    ran = sparkpoint(home, "run", job, "--job", "udf", "--param", f"input={inp}",
                     "--param", f"output={out}", *CONF, "--until-caught-up", "--ui",
                     worker_python=False)
    assert ran.code == 0, ran.err[-3000:]
    assert "Spark UI: http://" in ran.err
    expected = Counter((c.event_id, c.user.upper(), len(c.url)) for c in events)
    assert output_rows(spark, out) == expected  # type: ignore[arg-type]

    # Every command that loads the job file imports its module-level UDFs.
    assert sparkpoint(home, "snapshot", "create", "udf", "s-udf").code == 0
    point = sparkpoint(home, "resume-point", "build", job, "s-udf", "--param", f"input={inp}",
                       "--param", f"output={tmp_path / 'o2'}", worker_python=False)
    assert point.code == 0, point.err[-3000:]
    assert yaml.safe_load(point.out)


@pytest.mark.spark
def test_pandas_state_job_reruns_without_its_params(
    spark: object, home: Home, tmp_path: Path
) -> None:
    inp, out = tmp_path / "in", tmp_path / "out"
    events = write_clicks(inp, range(2))
    job = str(JOBS / "pandas_state.py")
    first = sparkpoint(home, "run", job, "--job", "counts", "--param", f"input={inp}",
                       "--param", f"output={out}", *CONF, "--until-caught-up",
                       worker_python=False)
    assert first.code == 0, first.err[-3000:]
    assert "(2 batches in this run)" in first.err
    stored = sparkpoint(home, "jobs", "show", "counts", "--json").json()

    events += write_clicks(inp, range(2, 5))
    again = sparkpoint(home, "run", job, "--job", "counts", "--until-caught-up",
                       worker_python=False)
    assert again.code == 0, again.err[-3000:]
    assert "starting at batch 2" in again.err and "(3 batches in this run)" in again.err
    assert "param " not in again.err and "conf " not in again.err  # nothing changed
    shown = sparkpoint(home, "jobs", "show", "counts", "--json").json()
    assert (shown["params"], shown["conf"]) == (stored["params"], stored["conf"])

    per_user = Counter(c.user for c in events)
    summed: Counter[str] = Counter()
    last_total: dict[str, int] = {}
    for (user, batch_clicks, total), times in output_rows(
            spark, out).items():  # type: ignore[arg-type]
        summed[user] += batch_clicks * times
        last_total[user] = max(total, last_total.get(user, 0))
    assert summed == per_user
    assert last_total == dict(per_user)


@pytest.mark.spark
def test_new_output_of_an_existing_job_then_delete(
    spark: object, home: Home, tmp_path: Path
) -> None:
    inp, out1, out2 = tmp_path / "in", tmp_path / "out1", tmp_path / "out2"
    events = write_clicks(inp, range(6))
    # A compaction every 2 batches: the new output must be able to compact at once.
    conf = [*CONF, "--conf", "spark.sql.streaming.fileSink.log.compactInterval=2"]
    first = sparkpoint(home, "run", str(CLICKS), "--job", "hourly", "--param", f"input={inp}",
                       "--param", f"output={out1}", "--param", "files_per_batch=1", *conf,
                       "--max-batches", "2")
    assert first.code == 0, first.err[-3000:]
    assert "stopped at batch 1 (2 batches in this run)" in first.err
    assert _error_lines(first.err) == []

    second = sparkpoint(home, "run", str(CLICKS), "--job", "hourly", "--param",
                        f"output={out2}", "--until-caught-up")
    assert second.code == 0, second.err[-3000:]
    assert f"param output: {out1} -> {out2}" in second.err
    assert f"gave the new output {out2} an empty sink history up to batch 1" in second.err
    rows = output_rows(spark, out1) + output_rows(spark, out2)  # type: ignore[arg-type]
    assert rows == expected_hourly_counts(events)

    # Back to the first output: its log ends at batch 1, the job is further on.
    offset = committed_log_offset(home, "hourly", "clicks")
    back = sparkpoint(home, "run", str(CLICKS), "--job", "hourly", "--param",
                      f"output={out1}", "--until-caught-up")
    assert back.code == 4, back.err[-3000:]
    assert f"output {out1} holds batches up to 1 of another run" in back.err
    assert committed_log_offset(home, "hourly", "clicks") == offset

    assert sparkpoint(home, "snapshot", "create", "hourly", "kept").code == 0
    deleted = sparkpoint(home, "jobs", "delete", "hourly", "--json")
    assert deleted.code == 0, deleted.err
    result = deleted.json()
    assert result["job"] == "hourly" and result["deleted"] is True
    assert result["checkpoint_bytes"] > 0
    assert not home.job_dir("hourly").exists()
    assert sparkpoint(home, "jobs", "show", "hourly").code == 4
    assert [s["name"] for s in sparkpoint(home, "snapshot", "list", "--json").json()] == ["kept"]
    assert sparkpoint(home, "snapshot", "verify", "kept").code == 0

    # On a terminal, snapshot delete asks; "no" keeps the snapshot, --yes does not ask.
    declined = sparkpoint_on_terminal(home, "snapshot", "delete", "kept", answer="n\n")
    assert declined.code == 4 and "delete snapshot 'kept' of job 'hourly'" in declined.err
    assert "snapshot 'kept' not deleted" in declined.err
    assert sparkpoint(home, "snapshot", "verify", "kept").code == 0
    forced = sparkpoint_on_terminal(home, "snapshot", "delete", "kept", "--yes", answer="")
    assert forced.code == 0 and "?" not in forced.err, forced.err
    assert sparkpoint(home, "snapshot", "list", "--json").json() == []


@pytest.mark.spark
def test_watch_stop_and_crash_safe_delete_of_a_running_job(home: Home, tmp_path: Path) -> None:
    inp = tmp_path / "in"
    write_clicks(inp, range(3))
    log = tmp_path / "live.log"
    proc = start(home, "run", str(CLICKS), "--job", "live", "--param", f"input={inp}",
                 "--param", f"output={tmp_path / 'out'}", "--param", "files_per_batch=1",
                 *CONF, log=log)
    try:
        wait_for(lambda: files_committed(home, "live", "clicks") == 3, 240, "3 files", log)
        refused = sparkpoint(home, "jobs", "delete", "live")
        assert refused.code == 4 and "is running" in refused.err, refused.err
        listing = sparkpoint(home, "jobs", "list")
        assert listing.out.split()[:7] == ["JOB", "STATE", "BATCH", "RATE", "LAG", "RUN",
                                           "ID"], listing.out
        assert "0 files" in listing.out and "rows/s" in listing.out
        shown = sparkpoint(home, "jobs", "show", "live", "--json").json()
        progress = shown["progress"]
        # The last batch that ran may be one without input that only moved the watermark.
        assert 0 <= progress["batch"] <= shown["batch"] + 1 and progress["input_rows"] >= 0
        assert shown["lag"] == {"clicks": {"unit": "files", "behind": 0}}
        assert progress["watermark"] is not None
        # The dedupe and the hourly windows hold state: no hour has closed yet.
        assert len(progress["operators"]) == 2 and sum(
            op["rows"] for op in progress["operators"]) > 0, progress

        stop = sparkpoint(home, "jobs", "stop", "live", "--wait", "--json")
        assert stop.code == 0, stop.err
        assert proc.wait(timeout=120) == 0
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
    batch = sparkpoint(home, "jobs", "show", "live", "--json").json()["batch"]
    assert stop.json() == {"job": "live", "status": "stopped", "stopped": True, "batch": batch}
    assert _error_lines(log.read_text()) == []
    again = sparkpoint(home, "jobs", "stop", "live")
    assert again.code == 4 and "not running (stopped)" in again.err

    write_clicks(inp, range(3, 5))
    text = sparkpoint(home, "jobs", "show", "live").out
    assert "lag       clicks: 2 files" in text, text

    crashed = sparkpoint(home, "jobs", "delete", "live", env={CRASH_ENV: "jobs.delete_renamed"})
    assert crashed.code == CRASH_EXIT_CODE, crashed.err
    assert sparkpoint(home, "jobs", "show", "live").code == 4
    assert sparkpoint(home, "jobs", "list").out.strip() == "no jobs"
    assert list(home.jobs_dir.iterdir()) == []  # the listing finished the deletion
