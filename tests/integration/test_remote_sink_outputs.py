"""File sinks on S3 (moto's server, Spark through s3a) and on HDFS (a MiniDFSCluster) get every
rule a local output gets: a new, empty output of a job that ran batches gets the empty history
Spark's sink log compaction reads; a start from a snapshot behind the output's sink log is
refused, --renumber-batches continues it with every row written, and --rewind-output takes
the table back to the snapshot (completed after a crash); a new job's mistyped name is
refused the output.

On main before sinks at any URL: ``file_sink_path`` gave None for any URL but file:, so such
an output was "a sink sparkpoint cannot read": the job given a new output on S3 or HDFS
failed at its first sink log compaction (BATCH_METADATA_NOT_FOUND), and the rollback into the
same output ran with a warning only, its batches skipped by Spark's sink, their rows lost.

The jobs run in this process's Spark session (local home, remote output): s3a's jars are on
its class path (tests/conftest.py), its endpoint and keys set below from the AWS variables
sparkpoint's own S3 I/O reads.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from sparkpoint import api
from sparkpoint.checkpoint.sink_log import SinkLog
from sparkpoint.crash_points import CRASH_ENV, CRASH_EXIT_CODE
from sparkpoint.errors import OutputHasHistoryError, SinkAheadError
from sparkpoint.sinks.history import pending_seeding
from sparkpoint.sinks.rewind import finished as finished_rewinds
from sparkpoint.sinks.rewind import pending as pending_rewinds
from sparkpoint.storage.home import Home
from sparkpoint.testing import expected_hourly_counts, output_rows, write_clicks
from tests.conftest import EXAMPLES
from tests.support.cli import sparkpoint
from tests.support.s3a_reads import read_bucket_with

JOB = EXAMPLES / "clicks_job.py"
# Small, so that the runs below cross compactions of the sink log.
COMPACT = {"spark.sql.streaming.fileSink.log.compactInterval": "3"}
HADOOP_PREFIX = "spark.hadoop."
pytestmark = pytest.mark.spark


def _remote_dir(store: str, request: pytest.FixtureRequest, spark: Any) -> str:
    """A new directory on the store, as a job's writer names it."""
    if store == "hdfs":
        return str(request.getfixturevalue("hdfs_server").new_dir())
    bucket = request.getfixturevalue("s3_server").new_bucket()
    request.addfinalizer(read_bucket_with(spark, f"s3://{bucket}"))
    return f"s3a://{bucket}"


def _table(spark: Any, output: str) -> Counter[Any]:
    """The output's rows as Spark's readers see them: through its sink log."""
    return Counter(tuple(row) for row in spark.read.parquet(output).collect())


def _conf_args(conf: dict[str, str]) -> list[str]:
    return [arg for key, value in conf.items() for arg in ("--conf", f"{key}={value}")]


def _assert_no_hole(output: str) -> list[int]:
    ids = sorted(SinkLog(output).entries())
    assert ids == list(range(ids[0], ids[-1] + 1)), ids
    return ids


@pytest.mark.parametrize("store", ["s3", "hdfs"])
def test_a_job_moved_to_a_remote_output_compacts_and_a_rollback_into_it_is_refused_or_renumbered(
    spark: Any, home: Home, tmp_path: Path, store: str, request: pytest.FixtureRequest
) -> None:
    inp, out = tmp_path / "in", f"{_remote_dir(store, request, spark)}/out"
    params = {"input": str(inp), "output": str(tmp_path / "local"), "files_per_batch": "2"}
    first = write_clicks(inp, range(0, 4))
    api.run(home, JOB, "v1", params=params, until_caught_up=True, spark=spark, conf=COMPACT)
    snap = api.snapshot_create(home, "v1", "old")

    # A new, empty output on the store: its history up to the job's batch first, then Spark's
    # batches, past a compaction of the sink log.
    events = first + write_clicks(inp, range(4, 10))
    lines: list[str] = []
    moved = api.run(home, JOB, "v1", params={**params, "output": out}, until_caught_up=True,
                    spark=spark, echo=lines.append)
    assert f"gave the new output {out} an empty sink history up to batch {snap.batch_id}" \
        in lines
    log = SinkLog(out)
    ids = _assert_no_hole(out)
    assert ids[0] <= snap.batch_id and ids[-1] == moved.last_batch
    assert any(log.entries()[b].endswith(".compact") for b in ids if b > snap.batch_id)
    after_snapshot = expected_hourly_counts(events) - expected_hourly_counts(first)
    assert after_snapshot, "the input after the snapshot closes no window: too small"
    assert _table(spark, out) == after_snapshot

    # A mistyped job name is refused the output, naming its writer.
    with pytest.raises(OutputHasHistoryError,
                       match=f"{re.escape(out)} .*job 'v1'.*did you mean 'v1'"):
        api.run(home, JOB, "v11", params={**params, "output": out}, until_caught_up=True,
                spark=spark)

    # The snapshot's batch is behind the output's sink log: refused, nothing changed.
    before = log.names()
    rollback = {"home": home, "job_file": JOB, "job": "v2", "params": {**params, "output": out},
                "from_snapshot": "old", "until_caught_up": True, "spark": spark,
                "conf": COMPACT}
    with pytest.raises(SinkAheadError, match=f"the output {re.escape(out)} already holds "
                                             f"batches up to {moved.last_batch}"):
        api.run(**rollback)
    assert log.names() == before
    assert not home.job_dir("v2").exists()

    # --renumber-batches: v2 continues past the output's batches, v1's rows stay.
    renumbered = api.run(**rollback, renumber_batches=True)
    assert renumbered.first_batch == moved.last_batch
    _assert_no_hole(out)
    # v1's rows after the snapshot, and v2's from the same snapshot over the same input.
    assert _table(spark, out) == after_snapshot + after_snapshot

    # --rewind-output: the table goes back to the snapshot's batch, the rows of v1 and v2
    # after it are moved aside (a table of their own there), and v3 writes them once. On
    # HDFS the rewind is first cut off after its first data file moved (kill -9); a reader
    # meanwhile sees whole batches, and the same command again finishes it.
    rewind = {**rollback, "job": "v3", "rewind_output": True}
    if store == "hdfs":
        crashed = sparkpoint(home, "run", str(JOB), "--job", "v3", "--from-snapshot", "old",
                             "--rewind-output", "--param", f"input={inp}", "--param",
                             f"output={out}", "--param", "files_per_batch=2",
                             "--until-caught-up", *_conf_args(COMPACT),
                             env={CRASH_ENV: "rewind.file_moved"})
        assert crashed.code == CRASH_EXIT_CODE, crashed.err
        [cut_off] = pending_rewinds(out)
        assert cut_off.to_batch == snap.batch_id
        logged = max(SinkLog(out).entries())
        assert logged == snap.batch_id  # every abandoned entry left the log first
    lines: list[str] = []
    rewound = api.run(**rewind, echo=lines.append)
    assert rewound.first_batch == snap.batch_id
    assert (store == "hdfs") == any("finished an interrupted rewind" in line
                                    for line in lines), lines
    assert pending_rewinds(out) == []
    [record] = finished_rewinds(out)
    _assert_no_hole(out)
    assert _table(spark, out) == after_snapshot
    assert _table(spark, record.directory) == after_snapshot + after_snapshot


def test_a_new_outputs_history_cut_off_is_finished_by_the_next_run(
    spark: Any, home: Home, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """The process ends (as kill -9 would) after the first of the history's entries: on main
    the next run found a log ending before the job's batch and refused the output as another
    run's; now it writes the rest and runs."""
    inp, out = tmp_path / "in", f"{_remote_dir('hdfs', request, spark)}/out"
    params = {"input": str(inp), "output": str(tmp_path / "local"), "files_per_batch": "2"}
    first = write_clicks(inp, range(0, 4))
    ran = api.run(home, JOB, "v1", params=params, until_caught_up=True, spark=spark)
    assert ran.last_batch is not None and ran.last_batch >= 1  # so the history has 2 entries
    events = first + write_clicks(inp, range(4, 8))

    point = "sink_seed.entry_written"
    crashed = sparkpoint(home, "run", str(JOB), "--job", "v1", "--param", f"output={out}",
                         "--until-caught-up", env={CRASH_ENV: point})
    assert crashed.code == CRASH_EXIT_CODE, crashed.err
    assert f"crash point {point}" in crashed.err
    assert sorted(SinkLog(out).entries()) == [0]
    assert pending_seeding(out) is not None

    lines: list[str] = []
    api.run(home, JOB, "v1", params={"output": out}, until_caught_up=True, spark=spark,
            echo=lines.append)
    assert any(line.startswith(f"finished giving the new output {out} an empty sink history "
                               f"up to batch {ran.last_batch}") for line in lines), lines
    assert pending_seeding(out) is None
    _assert_no_hole(out)
    assert _table(spark, out) == \
        expected_hourly_counts(events) - expected_hourly_counts(first)
    assert output_rows(spark, tmp_path / "local") + _table(spark, out) == \
        expected_hourly_counts(events)
