"""Snapshots of a job that is running in another process: the job keeps running, the
snapshot is a consistent committed batch, and --cancel stops the job right after the
batch it snapshots."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from sparkpoint import api
from sparkpoint.storage.home import Home
from sparkpoint.testing import expected_hourly_counts, output_rows, sink_files_up_to, write_clicks
from tests.conftest import EXAMPLES, SHUFFLE_PARTITIONS
from tests.support.cli import files_committed, sparkpoint, start, wait_for

JOB = EXAMPLES / "clicks_job.py"
pytestmark = pytest.mark.spark
# Keep the file sink log uncompacted so the test can tell which batch wrote which file.
CONF = ["--conf", f"spark.sql.shuffle.partitions={SHUFFLE_PARTITIONS}",
        "--conf", "spark.sql.streaming.fileSink.log.compactInterval=1000"]


def test_snapshot_of_running_job_then_cancel(spark: object, home: Home, tmp_path: Path) -> None:
    inp, out = tmp_path / "in", tmp_path / "out"
    events = write_clicks(inp, range(0, 3))
    log = tmp_path / "live.log"
    proc = start(home, "run", str(JOB), "--job", "live", "--param", f"input={inp}",
                 "--param", f"output={out}", "--param", "files_per_batch=1", *CONF, log=log)
    try:
        wait_for(lambda: files_committed(home, "live", "clicks") == 3, 180, "3 files", log)
        live = sparkpoint(home, "snapshot", "create", "live", "s-live", "--json")
        assert live.code == 0, live.err
        live_batch = live.json()["batch_id"]
        shown = sparkpoint(home, "jobs", "show", "live", "--json").json()
        assert shown["status"] == "running" and proc.poll() is None

        events += write_clicks(inp, range(3, 5))
        wait_for(lambda: files_committed(home, "live", "clicks") == 5, 180, "5 files", log)
        cancel = sparkpoint(home, "snapshot", "create", "live", "s-stop", "--cancel", "--json")
        assert cancel.code == 0, cancel.err
        assert proc.wait(timeout=120) == 0
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
    stopped = sparkpoint(home, "jobs", "show", "live", "--json").json()
    assert stopped["status"] == "stopped"
    assert cancel.json()["batch_id"] == stopped["batch"]
    assert live_batch < cancel.json()["batch_id"]

    # A new job from the live snapshot redoes what the old job did after it, and no more.
    events += write_clicks(inp, range(5, 7))
    api.run(home, JOB, "from-live", params={"input": str(inp), "output": str(tmp_path / "o2"),
                                              "files_per_batch": "1"},
            from_snapshot="s-live", until_caught_up=True, spark=spark)  # type: ignore[arg-type]
    before = output_rows(spark, out, sink_files_up_to(out, live_batch))  # type: ignore[arg-type]
    after = output_rows(spark, tmp_path / "o2")  # type: ignore[arg-type]
    assert before + after == expected_hourly_counts(events)


def test_ctrl_c_stops_a_running_job_cleanly(home: Home, tmp_path: Path) -> None:
    inp = tmp_path / "in"
    write_clicks(inp, range(0, 2))
    log = tmp_path / "job.log"
    proc = start(home, "run", str(JOB), "--job", "ctrlc", "--param", f"input={inp}",
                 "--param", f"output={tmp_path / 'out'}", *CONF, log=log)
    try:
        wait_for(lambda: files_committed(home, "ctrlc", "clicks") == 2, 180, "2 files", log)
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=120) == 0, log.read_text()[-2000:]
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
    shown = sparkpoint(home, "jobs", "show", "ctrlc", "--json").json()
    assert shown["status"] == "stopped"
    assert shown["pid"] is None


def test_second_run_of_a_running_job_is_refused(home: Home, tmp_path: Path) -> None:
    inp = tmp_path / "in"
    write_clicks(inp, range(0, 1))
    params = ["--param", f"input={inp}", "--param", f"output={tmp_path / 'out'}"]
    log = tmp_path / "job.log"
    proc = start(home, "run", str(JOB), "--job", "once", *params, *CONF, log=log)
    try:
        wait_for(lambda: files_committed(home, "once", "clicks") == 1, 180, "1 file", log)
        second = sparkpoint(home, "run", str(JOB), "--job", "once", *params, *CONF)
        assert second.code == 4
        assert "already running" in second.err
        assert "Traceback" not in second.err
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=120)


def test_killed_job_shows_failed_and_runs_again(home: Home, tmp_path: Path) -> None:
    inp, out = tmp_path / "in", tmp_path / "out"
    events = write_clicks(inp, range(0, 2))
    params = ["--param", f"input={inp}", "--param", f"output={out}"]
    log = tmp_path / "job.log"
    proc = start(home, "run", str(JOB), "--job", "killed", *params, *CONF, log=log)
    try:
        wait_for(lambda: files_committed(home, "killed", "clicks") == 2, 180, "2 files", log)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=60)
    shown = sparkpoint(home, "jobs", "show", "killed", "--json").json()
    assert shown["status"] == "failed"
    # The run's history says so too, with the batch the killed run got to.
    [killed] = shown["runs"]
    assert (killed["status"], killed["last_batch"]) == ("failed", shown["batch"]), killed
    assert "killed" in killed["error"]
    events += write_clicks(inp, range(2, 4))
    again = sparkpoint(home, "run", str(JOB), "--job", "killed", *params, *CONF,
                       "--until-caught-up")
    assert again.code == 0, again.err[-2000:]
    shown = sparkpoint(home, "jobs", "show", "killed", "--json").json()
    assert shown["status"] == "stopped"
    # Recorded by the next run: the killed one failed at the batch the next one started after.
    killed, rerun = shown["runs"]
    assert (killed["status"], rerun["status"]) == ("failed", "stopped"), shown["runs"]
    assert killed["last_batch"] == rerun["first_batch"] is not None, shown["runs"]
    from sparkpoint.runtime.registry import JobRegistry

    assert JobRegistry(home).get("killed").runs[0].status == "failed"
    from sparkpoint.checkpoint.sink_log import committed_files

    assert committed_files(out)  # the output is readable and was continued


def test_max_batches_stops_after_that_many_committed_batches(
    spark: object, home: Home, tmp_path: Path
) -> None:
    inp, out = tmp_path / "in", tmp_path / "out"
    events = write_clicks(inp, range(0, 6))
    params = {"input": str(inp), "output": str(out), "files_per_batch": "1"}
    first = api.run(home, JOB, "limited", params=params, max_batches=2,
                    spark=spark)  # type: ignore[arg-type]
    assert first.last_batch == 1
    assert files_committed(home, "limited", "clicks") == 2
    api.run(home, JOB, "limited", params=params, until_caught_up=True,
            spark=spark)  # type: ignore[arg-type]
    assert output_rows(spark, out) == expected_hourly_counts(events)  # type: ignore[arg-type]
