"""A stateful job whose ids outgrow int: the new version reads them as bigint (and, on
RocksDB, dedupes on the id alone), and the state of its dedupe (keyed by event_id and ts) and
of its hourly aggregation (keyed by user_id, its max buffer of the score) is migrated by
Spark's cast, each key placed in the partition Spark's hash of the bigint gives it (not the
int's), the dedupe's keys projected onto the id (on RocksDB in checkpoint format v2). `plan`
names each widened column; `run` rewrites the state as Spark tasks, the output then
continues exactly as one job over all the input: duplicates across the switch dropped, hours
open at the switch counted once, with the highest score of both runs. Cut off after the
rewrite, the next start rolls back and rebuilds. Then Spark's windowed word count gains
aggregates (one declared with `set:`), and a new aggregation is seeded from a query.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from sparkpoint import api
from sparkpoint.checkpoint.layout import PROVIDER_CONF, Checkpoint
from sparkpoint.checkpoint.rocksdb_state import HDFS_PROVIDER, ROCKSDB_PROVIDER
from sparkpoint.crash_points import CRASH_ENV, CRASH_EXIT_CODE
from sparkpoint.errors import CheckpointFormatError
from sparkpoint.storage.home import Home
from sparkpoint.storage.stores import file_io
from sparkpoint.testing import USERS, Click, clicks_for_slice, output_rows
from tests.conftest import REPO, s3a_jars
from tests.support.cli import sparkpoint
from tests.support.s3 import S3Server
from tests.support.spark_example_runs import AFTER, BEFORE, EXAMPLES, ok, run_plain, table
from tests.support.spark_examples import (
    Line,
    expected_sessions,
    expected_windowed_word_counts,
    write_lines,
)

EXAMPLES_JOBS = REPO / "tests" / "data" / "jobs"
JOB = EXAMPLES_JOBS / "widened_ids.py"
pytestmark = pytest.mark.spark


def _event_id(click: Click) -> int:
    index, n = click.event_id[1:].split("-")
    return int(index) * 1000 + int(n)


def _score(click: Click) -> int:
    return int(click.url.rsplit("/", 1)[1]) * 100 + click.ts.second


def write_events(directory: Path, indexes: range, resent: list[Click] | None = None,
                 ) -> list[Click]:
    """One JSON file per 20-minute slice of the clicks test data, ids and scores as ints;
    ``resent`` events first, in a file of their own (a producer's retry)."""
    directory.mkdir(parents=True, exist_ok=True)
    files = [(f"events-{index:05d}", clicks_for_slice(index)) for index in indexes]
    if resent:
        files.insert(0, (f"resent-{indexes[0]:05d}", resent))
    written = []
    for name, clicks in files:
        lines = [json.dumps({"event_id": _event_id(c), "user_id": USERS.index(c.user) + 1,
                             "score": _score(c),
                             "ts": c.ts.strftime("%Y-%m-%dT%H:%M:%S.%fZ")}) for c in clicks]
        tmp = directory / f".{name}.tmp"
        tmp.write_text("\n".join(lines) + "\n")
        # Spark's file source takes new files in modification time order (milliseconds).
        global _mtime_ns
        _mtime_ns = max(time.time_ns(), _mtime_ns + 2_000_000)
        os.utime(tmp, ns=(_mtime_ns, _mtime_ns))
        os.replace(tmp, directory / f"{name}.json")
        written.extend(clicks)
    return written


_mtime_ns = 0


def expected(clicks: list[Click]) -> Counter[tuple[Any, ...]]:
    """(hour, user id, unique events, highest score) of every hour closed by the final
    watermark (the latest event time less 10 minutes), computed without Spark."""
    unique = {(_event_id(c), c.ts): c for c in clicks}
    watermark = max(c.ts for c in unique.values()) - dt.timedelta(minutes=10)
    hours: dict[tuple[dt.datetime, int], list[int]] = {}
    for click in unique.values():
        start = click.ts.replace(minute=0, second=0, microsecond=0)
        if start + dt.timedelta(hours=1) <= watermark:
            hours.setdefault((start.replace(tzinfo=None), USERS.index(click.user) + 1),
                             []).append(_score(click))
    return Counter((start, user, len(scores), max(scores))
                   for (start, user), scores in hours.items())


# The state store providers and checkpoint formats every migration of the id job is run on:
# RocksDB in format v1 (sparkpoint's default), RocksDB in format v2 with changelog
# checkpointing (the state migrated under plain names is given v2 names and ids again), and
# the HDFS-backed provider (Spark's default; it has format v1 only).
FORMAT_V2 = {"spark.sql.streaming.stateStore.checkpointFormatVersion": "2",
             "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true"}
STORES = {"rocksdb": {PROVIDER_CONF: ROCKSDB_PROVIDER},
          "rocksdb-v2": {PROVIDER_CONF: ROCKSDB_PROVIDER, **FORMAT_V2},
          "hdfs": {PROVIDER_CONF: HDFS_PROVIDER}}


def _totals(before: list[Click], after: list[Click]) -> dict[tuple[dt.datetime, int], int]:
    """Per (hour, user id), the sum of the scores of the unique events first read after the
    switch: what a sum added at the switch holds."""
    seen = {(_event_id(c), c.ts) for c in before}
    totals: dict[tuple[dt.datetime, int], int] = {}
    for click in {(_event_id(c), c.ts): c for c in after}.values():
        if (_event_id(click), click.ts) not in seen:
            key = (click.ts.replace(minute=0, second=0, microsecond=0, tzinfo=None),
                   USERS.index(click.user) + 1)
            totals[key] = totals.get(key, 0) + _score(click)
    return totals


@pytest.mark.parametrize("where", ["local", "s3"])
@pytest.mark.parametrize("store", list(STORES))
def test_ids_widened_to_bigint_keep_the_state_of_both_operators(
    store: str, where: str, spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    request: pytest.FixtureRequest,
) -> None:
    """The new version reads the ids as bigint, dedupes on the id alone and sums the
    scores: every migration of both operators in one start (widened keys and values, a
    dedupe's key projected, an aggregate added), on each provider and format, with the home
    on local disk and on S3 (moto's server, Spark through s3a: RocksDB v1 and the HDFS-backed
    provider are migrated by tasks that read and write the store, format v2 is staged on
    the driver to be renamed)."""
    if where == "s3":
        monkeypatch.setenv("SPARKPOINT_SCRATCH", str(tmp_path / "machine"))
        home = Home.resolve(f"s3://{request.getfixturevalue('s3_server').new_bucket()}/home")
    else:
        home = Home(tmp_path / "home")
    inp = tmp_path / "in"
    before = write_events(inp, range(0, 4))
    conf = {**STORES[store], "spark.sql.shuffle.partitions": "3"}
    provider = conf[PROVIDER_CONF]
    api.run(home, JOB, "v1", params={"input": str(inp), "output": str(tmp_path / "v1"),
                                     "id_type": "INT"},
            conf=conf, until_caught_up=True, spark=spark)
    api.snapshot_create(home, "v1", "ints")
    # Events of the last slice the old version read, sent again: within the watermark, so
    # only the dedupe's migrated state (bigint keys now) can tell they were seen.
    resent = [c for c in clicks_for_slice(3) if c.ts.minute >= 12]
    assert resent
    after = write_events(inp, range(4, 8), resent)
    events = before + after
    params = {"input": str(inp), "output": str(tmp_path / "v2"), "id_type": "BIGINT",
              "dedupe_on": "event_id", "with_total": "yes"}

    plan = api.plan(home, JOB, params=params, conf=conf, from_snapshot="ints", spark=spark)
    assert plan.ok, plan.problems
    changes = {row["name"]: (row["action"], row["changes"])
               for row in plan.to_dict()["operators"]}
    user_hours = len({(c.ts.replace(minute=0, second=0, microsecond=0), c.user)
                      for c in before})
    open_hours = user_hours - len(output_rows(spark, tmp_path / "v1"))
    assert changes == {
        "dedup_events": ("migrate", [
            "key columns ts removed: keys projected onto (event_id), keys that become equal "
            "collapsed into one (the latest expiry kept)",
            "key column event_id: integer -> long (widened by Spark's cast; keys placed in "
            "the partitions Spark's hash gives them)"]),
        "hourly_scores": ("migrate", [
            "key column user_id: integer -> long (widened by Spark's cast; keys placed in "
            "the partitions Spark's hash gives them)",
            "value column max: integer -> long (widened by Spark's cast)",
            "aggregate sum(score) added: starts as if it had seen no row before the switch "
            f"(CAST(NULL AS BIGINT)) in each of the {open_hours} keys"]),
    }

    if store == "rocksdb-v2" and where == "local":
        # Cut off once the state is rewritten: nothing published, the next start rebuilds.
        monkeypatch.setenv(CRASH_ENV, "restore.state_migrated")
        crashed = sparkpoint(home, "run", str(JOB), "--job", "v2", "--from-snapshot", "ints",
                             *[a for k, v in params.items() for a in ("--param", f"{k}={v}")],
                             *[a for k, v in conf.items() for a in ("--conf", f"{k}={v}")],
                             "--until-caught-up")
        monkeypatch.delenv(CRASH_ENV)
        assert crashed.code == CRASH_EXIT_CODE, crashed.err
        assert "crash point restore.state_migrated" in crashed.err
        assert not home.checkpoint_dir("v2").exists()

    said: list[str] = []
    api.run(home, JOB, "v2", params=params, conf=conf, from_snapshot="ints",
            until_caught_up=True, spark=spark, echo=said.append)
    assert any("migrated the state" in line for line in said), said
    in_store = where == "s3" and store != "rocksdb-v2"
    assert any("that read and write the store" in line for line in said) == in_store, said
    checkpoint = Checkpoint(home.checkpoint_dir("v2"))
    latest = checkpoint.require_latest_committed_batch()
    assert checkpoint.provider(latest) == provider
    assert bool(checkpoint.commit(latest).state_unique_ids) == (store == "rocksdb-v2")
    new_rows = output_rows(spark, tmp_path / "v2")
    assert output_rows(spark, tmp_path / "v1") + Counter(
        {row[:4]: n for row, n in new_rows.items()}) == expected(events)
    # The sum counts what the new version read: null in an hour it read nothing of.
    totals = _totals(before, after)
    assert {row[:2]: row[4] for row in new_rows} == {
        row[:2]: totals.get(row[:2]) for row in new_rows}


# (the old provider, the new one, the new partition count, where the first start is cut
# off, what the start says it did besides the migration)
MOVED_TOO = {
    "rocksdb-into-5": (ROCKSDB_PROVIDER, ROCKSDB_PROVIDER, 5, "restore.repartitioned",
                       "from 3 to 5 partitions"),
    "hdfs-into-2": (HDFS_PROVIDER, HDFS_PROVIDER, 2, "restore.hdfs_partition_moved",
                    "from 3 to 2 partitions"),
    "hdfs-to-rocksdb": (HDFS_PROVIDER, ROCKSDB_PROVIDER, 3, "restore.provider_moved",
                        "from the HDFS-backed provider to RocksDB"),
    "rocksdb-to-hdfs-into-4": (ROCKSDB_PROVIDER, HDFS_PROVIDER, 4, "restore.old_state_placed",
                               "from 3 to 4 partitions"),
}


@pytest.mark.parametrize("case", list(MOVED_TOO))
def test_ids_widened_into_another_partition_count_or_provider_on_an_s3_home(
    case: str, spark: Any, s3_server: S3Server, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The id job's migrations (keys and values widened, a dedupe's key projected, an
    aggregate added) in a start that also changes the partition count or the provider (or
    both), the home on S3: the migrations' tasks read the old state in the store and write
    the new count in the new provider's files, the repartition's or the provider move's
    tasks move nothing else (every operator is migrated), no state on the driver's disk.
    Cut off once tasks wrote into the home, the next start rolls it back and rebuilds; the
    output then continues as one job over all the input."""
    was, provider, wanted, cut_at, also = MOVED_TOO[case]
    monkeypatch.setenv("SPARKPOINT_SCRATCH", str(tmp_path / "machine"))
    home = Home.resolve(f"s3://{s3_server.new_bucket()}/home")
    inp = tmp_path / "in"
    before = write_events(inp, range(0, 4))
    conf = {PROVIDER_CONF: was, "spark.sql.shuffle.partitions": "3"}
    api.run(home, JOB, "v1", params={"input": str(inp), "output": str(tmp_path / "v1"),
                                     "id_type": "INT"},
            conf=conf, until_caught_up=True, spark=spark)
    api.snapshot_create(home, "v1", "ints")
    after = write_events(inp, range(4, 8), [c for c in clicks_for_slice(3)
                                            if c.ts.minute >= 12])
    params = {"input": str(inp), "output": str(tmp_path / "v2"), "id_type": "BIGINT",
              "dedupe_on": "event_id", "with_total": "yes"}
    conf = {PROVIDER_CONF: provider, "spark.sql.shuffle.partitions": str(wanted)}

    crashed = sparkpoint(home, "run", str(JOB), "--job", "v2", "--from-snapshot", "ints",
                         *[a for k, v in params.items() for a in ("--param", f"{k}={v}")],
                         *[a for k, v in conf.items() for a in ("--conf", f"{k}={v}")],
                         "--conf", f"spark.jars={s3a_jars()}", "--until-caught-up",
                         env={CRASH_ENV: cut_at,
                              "SPARKPOINT_SCRATCH": str(tmp_path / "cut-off-machine")})
    assert crashed.code == CRASH_EXIT_CODE, crashed.err[-3000:]
    assert f"crash point {cut_at}" in crashed.err
    assert "v2" not in [view.record.name for view in api.jobs_list(home)]

    said: list[str] = []
    api.run(home, JOB, "v2", params=params, conf=conf, from_snapshot="ints",
            until_caught_up=True, spark=spark, echo=said.append)
    assert any("interrupted" in line for line in said), said
    assert any(also in line and "read and write the store" in line
               and "by their migration" in line for line in said), said
    assert any("migrated the state" in line and "that read and write the store" in line
               for line in said), said
    checkpoint = Checkpoint(home.checkpoint_dir("v2"))
    latest = checkpoint.require_latest_committed_batch()
    assert checkpoint.state_partitions(latest) == wanted
    assert checkpoint.provider(latest) == provider
    new_rows = output_rows(spark, tmp_path / "v2")
    assert output_rows(spark, tmp_path / "v1") + Counter(
        {row[:4]: n for row, n in new_rows.items()}) == expected(before + after)
    totals = _totals(before, after)
    assert {row[:2]: row[4] for row in new_rows} == {
        row[:2]: totals.get(row[:2]) for row in new_rows}


def test_a_plan_cut_off_in_the_store_is_removed_by_the_next_plan(
    spark: Any, s3_server: S3Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`plan` of the bigint version into 5 partitions, the home on S3: it builds its dry
    run's checkpoint under the home's .scratch/plan/ (the state repartitioned and migrated
    there by Spark tasks). Cut off once the migration wrote there, it leaves that prefix;
    the next plan removes it (its maker is gone), plans the same, and leaves nothing; no
    job was created and the snapshot still verifies."""
    monkeypatch.setenv("SPARKPOINT_SCRATCH", str(tmp_path / "machine"))
    home = Home.resolve(f"s3://{s3_server.new_bucket()}/home")
    inp = tmp_path / "in"
    write_events(inp, range(0, 4))
    conf = {**STORES["rocksdb"], "spark.sql.shuffle.partitions": "3"}
    api.run(home, JOB, "v1", params={"input": str(inp), "output": str(tmp_path / "v1"),
                                     "id_type": "INT"},
            conf=conf, until_caught_up=True, spark=spark)
    api.snapshot_create(home, "v1", "ints")
    params = {"input": str(inp), "output": str(tmp_path / "v2"), "id_type": "BIGINT",
              "with_total": "yes"}
    conf = {**conf, "spark.sql.shuffle.partitions": "5"}
    assert home.url is not None
    plans = f"{home.url}/.scratch/plan"
    io = file_io(plans)

    crashed = sparkpoint(home, "plan", str(JOB), "--from-snapshot", "ints",
                         *[a for k, v in params.items() for a in ("--param", f"{k}={v}")],
                         *[a for k, v in conf.items() for a in ("--conf", f"{k}={v}")],
                         "--conf", f"spark.jars={s3a_jars()}",
                         env={CRASH_ENV: "restore.state_migrated"})
    assert crashed.code == CRASH_EXIT_CODE, crashed.err[-3000:]
    [left] = io.list_names(plans)
    assert io.walk_sizes(f"{plans}/{left}/checkpoint/state"), "the migration wrote nothing"

    said: list[str] = []
    plan = api.plan(home, JOB, params=params, conf=conf, from_snapshot="ints", spark=spark,
                    echo=said.append)
    assert plan.ok, plan.problems
    assert [row["action"] for row in plan.to_dict()["operators"]] == ["migrate", "migrate"]
    assert any(f"removed {plans}/{left}, left by an interrupted plan" in line
               for line in said), said
    assert any("from 3 to 5 partitions" in line and "read and write the store" in line
               for line in said), said
    assert io.list_names(plans) == []
    assert [view.record.name for view in api.jobs_list(home)] == ["v1"]
    assert api.snapshot_verify(home, "ints") == []


GROWN = EXAMPLES_JOBS / "spark_example_wordcount_grown.py"


def _windows_of(line: Line) -> list[tuple[dt.datetime, dt.datetime, str]]:
    """The (start, end, word) sliding windows (10 s every 5 s) each word of ``line`` is in."""
    epoch_ms = int(line.timestamp.timestamp() * 1000)
    found = []
    start = epoch_ms - epoch_ms % 5000
    while start > epoch_ms - 10_000:
        begin = dt.datetime.fromtimestamp(start / 1000, dt.UTC).replace(tzinfo=None)
        found.extend((begin, begin + dt.timedelta(seconds=10), word) for word in line.words())
        start -= 5000
    return found


def test_the_windowed_word_count_gains_two_aggregates_and_keeps_its_counts(
    spark: Any, tmp_path: Path
) -> None:
    """Spark's windowed word count, then the version with sum(length(word)) and
    max(timestamp) added: the counts go on from the old state; the letters are declared in
    the resume point from the old state (`set: {sum: count * length(word)}`), so they count
    every row; the latest timestamp starts empty, so it holds what the new version saw
    (null where it saw no row of the window)."""
    home, inp = Home(tmp_path / "home"), tmp_path / "input"
    before = write_lines(inp, range(0, 3))
    old_params = {"input": str(inp), "output": str(tmp_path / "v1")}
    conf = {"spark.sql.shuffle.partitions": "3"}
    api.run(home, EXAMPLES_JOBS / "spark_example_wordcount.py", "counts", params=old_params,
            conf=conf, until_caught_up=True, spark=spark)
    manifest = api.snapshot_create(home, "counts", "before-growth")
    [entry] = manifest.operators
    assert entry.aggregates is not None
    assert [a.function for a in entry.aggregates] == ["count(1)"]
    after = write_lines(inp, range(3, 6))
    params = {"input": str(inp), "output": str(tmp_path / "v2")}

    plan = api.plan(home, GROWN, params=params, conf=conf, from_snapshot="before-growth",
                    spark=spark)
    assert plan.ok, plan.problems
    [row] = plan.to_dict()["operators"]
    assert row["action"] == "migrate"
    assert row["changes"] == [
        f"aggregate sum(length(word)) added: starts as if it had seen no row before the "
        f"switch (CAST(NULL AS BIGINT)) in each of the {entry.rows} keys",
        f"aggregate max(timestamp) added: starts as if it had seen no row before the switch "
        f"(CAST(NULL AS TIMESTAMP)) in each of the {entry.rows} keys"]

    # Declared columns are checked by Spark, every problem at once.
    wrong = _resume_point(tmp_path / "wrong.yaml", {"sum": "count * nope", "max": "word",
                                                     "letters": "1"})
    checked = api.plan(home, GROWN, params=params, conf=conf, resume_point=wrong, spark=spark)
    problems = "\n".join(checked.problems)
    for fragment in ("state.windowed_counts.set.letters: the new state has no column "
                     "'letters' (its columns: count, sum, max)",
                     "state.windowed_counts.set.sum: Spark cannot evaluate 'count * nope'",
                     "state.windowed_counts.set.max: 'word' gives string, the new state's "
                     "column is timestamp; cast it"):
        assert fragment in problems, problems

    declared = _resume_point(tmp_path / "rp.yaml", {"sum": "count * length(word)"})
    plan = api.plan(home, GROWN, params=params, conf=conf, resume_point=declared, spark=spark)
    assert plan.ok, plan.problems
    [row] = plan.to_dict()["operators"]
    assert row["changes"][-1] == "value column sum set to count * length(word)"
    api.run(home, GROWN, "grown", params=params, conf=conf, resume_point=declared,
            until_caught_up=True, spark=spark)
    api.drain(home, "grown", spark=spark)

    old_rows = output_rows(spark, tmp_path / "v1")
    new_rows = output_rows(spark, tmp_path / "v2")
    # The count: one job over all the input, each window emitted once.
    assert old_rows + Counter({row[:4]: n for row, n in new_rows.items()}) \
        == expected_windowed_word_counts(before + after)
    # The letters of every row (declared from the old counts), the latest timestamp the
    # new version saw (Spark's initial null before the switch).
    letters: dict[tuple[Any, ...], int] = {}
    latest: dict[tuple[Any, ...], dt.datetime] = {}
    for line in before + after:
        for window in _windows_of(line):
            letters[window] = letters.get(window, 0) + len(window[2])
            if line in after:
                stamp = line.timestamp.astimezone(dt.UTC).replace(tzinfo=None)
                latest[window] = max(latest.get(window, stamp), stamp)
    assert {row[:3]: row[4:] for row in new_rows} == {
        row[:3]: (letters.get(row[:3]), latest.get(row[:3])) for row in new_rows}
    assert any(row[5] is None for row in new_rows), "no window of the old version was emitted"
    assert any(row[5] is not None for row in new_rows)


def test_the_word_count_run_as_plain_pyspark_gains_its_aggregates_on_rocksdb(
    spark: Any, tmp_path: Path
) -> None:
    """How a user starts: Spark's windowed word count run as plain PySpark (spark-submit,
    Spark's defaults: the HDFS-backed provider, 200 partitions), adopted, then started as
    the version with sum(length(word)) and max(timestamp), on RocksDB with 3 partitions: one
    start repartitions the state, moves it into RocksDB's files and migrates it. The counts
    go on as one job's; both new aggregates start empty at the switch (no `set:`), so they
    hold what the new version saw, null in windows it saw no row of."""
    example = EXAMPLES["wordcount_windowed"]
    home, plain_out = Home(tmp_path / "home"), tmp_path / "plain-out"
    before = list(example.write(tmp_path, BEFORE))
    run_plain(example, tmp_path, plain_out, tmp_path / "plain-checkpoint")
    ok(sparkpoint(home, "snapshot", "import", str(tmp_path / "plain-checkpoint"), "adopted",
                  "--job-file", str(example.job), *example.params(tmp_path, plain_out)))
    [entry] = api.snapshot_show(home, "adopted").operators
    assert entry.partitions == 200 and entry.rows
    after = list(example.write(tmp_path, AFTER))
    new_out = tmp_path / "grown-out"
    moved = [*example.params(tmp_path, new_out), "--conf", "spark.sql.shuffle.partitions=3",
             "--conf", f"{PROVIDER_CONF}={ROCKSDB_PROVIDER}"]

    [row] = ok(sparkpoint(home, "plan", str(GROWN), "--from-snapshot", "adopted", *moved,
                          "--json")).json()["operators"]
    assert row["action"] == "migrate", row
    assert [change.split(":")[0] for change in row["changes"]] == [
        "aggregate sum(length(word)) added", "aggregate max(timestamp) added",
        "state store provider"], row
    assert all(f"in each of the {entry.rows} keys" in change for change in row["changes"][:2])
    assert row["changes"][2].startswith("state store provider: HDFS-backed -> RocksDB"), row
    started = ok(sparkpoint(home, "run", str(GROWN), "--job", "grown", "--from-snapshot",
                            "adopted", *moved, "--until-caught-up"))
    said = started.out + started.err
    assert "moved the state from the HDFS-backed provider to RocksDB" in said, said
    assert "migrated the state of the operators whose state changed " \
        f"({entry.rows} keys, as Spark tasks)" in said, said
    continued = Checkpoint(home.checkpoint_dir("grown"))
    assert continued.provider(continued.require_latest_committed_batch()) == ROCKSDB_PROVIDER
    ok(sparkpoint(home, "drain", "grown"))

    old_rows, new_rows = table(spark, plain_out), table(spark, new_out)
    assert old_rows + Counter({row[:4]: n for row, n in new_rows.items()}) \
        == expected_windowed_word_counts(before + after)
    letters: dict[tuple[Any, ...], int] = {}
    latest: dict[tuple[Any, ...], dt.datetime] = {}
    for line in after:
        stamp = line.timestamp.astimezone(dt.UTC).replace(tzinfo=None)
        for window in _windows_of(line):
            letters[window] = letters.get(window, 0) + len(window[2])
            latest[window] = max(latest.get(window, stamp), stamp)
    assert {row[:3]: row[4:] for row in new_rows} == {
        row[:3]: (letters.get(row[:3]), latest.get(row[:3])) for row in new_rows}
    assert any(row[4] is None for row in new_rows), "no window only the old version saw"


def _resume_point(path: Path, declared: dict[str, str]) -> Path:
    path.write_text(json.dumps({"version": 1, "sources": {
        "lines": {"mode": "resume", "snapshot": "before-growth"}}, "state": {
        "windowed_counts": {"mode": "resume", "snapshot": "before-growth", "set": declared}}}))
    return path


SEEDED = EXAMPLES_JOBS / "seeded_counts.py"


def test_a_new_aggregation_seeded_from_what_the_old_version_wrote(
    spark: Any, tmp_path: Path
) -> None:
    """The new version adds an hourly count of unique events per user; its state is seeded
    by a batch query over the events the old version wrote, so the hours open at the switch
    and before it count every event, as if the aggregation had always run."""
    home, inp = Home(tmp_path / "home"), tmp_path / "in"
    events = write_events(inp, range(0, 4))
    conf = {"spark.sql.shuffle.partitions": "3"}
    api.run(home, SEEDED, "v1", params={"input": str(inp), "output": str(tmp_path / "v1")},
            conf=conf, until_caught_up=True, spark=spark)
    api.snapshot_create(home, "v1", "unique")
    events += write_events(inp, range(4, 8), [c for c in clicks_for_slice(3)
                                              if c.ts.minute >= 12])
    params = {"input": str(inp), "output": str(tmp_path / "v2"), "hourly": "yes"}
    history = f"parquet.`{tmp_path / 'v1'}`"

    def resume_point(query: str) -> Path:
        path = tmp_path / f"rp-{abs(hash(query))}.json"
        path.write_text(json.dumps({"version": 1, "sources": {
            "events": {"mode": "resume", "snapshot": "unique"}}, "state": {
            "dedup_events": {"mode": "resume", "snapshot": "unique"},
            "hourly_users": {"mode": "seed", "query": query}}}))
        return path

    wrong = api.plan(home, SEEDED, params=params, conf=conf, spark=spark, resume_point=(
        resume_point(f"SELECT window(ts, '1 hour') AS window, user_id FROM {history}")))
    assert any(p.startswith("state.hourly_users.query: expected a column count (long)")
               for p in wrong.problems), wrong.problems
    seed = resume_point(f"SELECT window(ts, '1 hour') AS window, user_id, count(*) AS count "
                        f"FROM {history} GROUP BY window(ts, '1 hour'), user_id")
    plan = api.plan(home, SEEDED, params=params, conf=conf, spark=spark, resume_point=seed)
    assert plan.ok, plan.problems
    assert {row["name"]: row["action"] for row in plan.to_dict()["operators"]} == {
        "dedup_events": "resume", "hourly_users": "seed"}

    # A query giving a key twice is refused by the task writing its partition, and the
    # start leaves nothing behind: the same name starts from the right query next.
    counted = (f"SELECT window(ts, '1 hour') AS window, user_id, count(*) AS count "
               f"FROM {history} GROUP BY window(ts, '1 hour'), user_id")
    with pytest.raises(CheckpointFormatError) as twice:
        api.run(home, SEEDED, "v2", params=params, conf=conf, spark=spark,
                resume_point=resume_point(f"{counted} UNION ALL {counted}"),
                until_caught_up=True)
    assert "key(s) given more than once (a seed query must give each key once)" in \
        twice.value.message, twice.value.message
    assert "StateWriteError" not in twice.value.message, twice.value.message
    assert "v2" not in {view.record.name for view in api.jobs_list(home)}
    api.run(home, SEEDED, "v2", params=params, conf=conf, resume_point=seed,
            until_caught_up=True, spark=spark)
    hourly = Counter({(start, user, n): count
                      for (start, user, n, _top), count in expected(events).items()})
    assert output_rows(spark, tmp_path / "v2") == hourly


SESSIONS = EXAMPLES_JOBS / "spark_example_sessions.py"


def _sessions_with_members(lines: list[Line]) -> dict[tuple[str, int, int], list[Line]]:
    """Each (sessionId, start s, end s) session of the sessionization example (a 10 s gap),
    with the lines of its events."""
    events: dict[str, list[Line]] = {}
    for line in lines:
        for word in line.words():
            events.setdefault(word, []).append(line)
    found: dict[tuple[str, int, int], list[Line]] = {}
    gap = dt.timedelta(seconds=10)
    for word, members in events.items():
        members.sort(key=lambda line: line.timestamp)
        current = [members[0]]
        end = members[0].timestamp + gap
        for line in members[1:]:
            if line.timestamp < end:
                current.append(line)
                end = max(end, line.timestamp + gap)
                continue
            found[(word, int(current[0].timestamp.timestamp() // 1), int(end.timestamp() // 1))] \
                = current
            current, end = [line], line.timestamp + gap
        found[(word, int(current[0].timestamp.timestamp() // 1), int(end.timestamp() // 1))] \
            = current
    return found


def test_sessionization_gains_an_aggregate_and_keeps_its_sessions(
    spark: Any, tmp_path: Path
) -> None:
    """Spark's sessionization, then a version that also keeps each session's latest event
    time: sessions open at the switch go on counting from the old state (its whole rows: the
    session id and window, then the count's buffer), the latest time starts empty."""
    home, inp = Home(tmp_path / "home"), tmp_path / "input"
    before = write_lines(inp, range(0, 3))
    conf = {"spark.sql.shuffle.partitions": "3"}
    api.run(home, SESSIONS, "sessions",
            params={"input": str(inp), "output": str(tmp_path / "v1")}, conf=conf,
            until_caught_up=True, spark=spark)
    manifest = api.snapshot_create(home, "sessions", "before")
    [entry] = manifest.operators
    assert entry.aggregates is not None and [a.function for a in entry.aggregates] \
        == ["count(1)"]
    after = write_lines(inp, range(3, 6))
    params = {"input": str(inp), "output": str(tmp_path / "v2"), "latest": "yes"}
    plan = api.plan(home, SESSIONS, params=params, conf=conf, from_snapshot="before",
                    spark=spark)
    assert plan.ok, plan.problems
    assert [row["action"] for row in plan.to_dict()["operators"]] == ["migrate"]
    api.run(home, SESSIONS, "sessions-v2", params=params, conf=conf,
            from_snapshot="before", until_caught_up=True, spark=spark)
    api.drain(home, "sessions-v2", spark=spark)

    old_rows = output_rows(spark, tmp_path / "v1")
    new_rows = output_rows(spark, tmp_path / "v2")
    assert old_rows + Counter({row[:5]: n for row, n in new_rows.items()}) \
        == expected_sessions(before + after)
    members = _sessions_with_members(before + after)
    latest = {}
    for key, lines in members.items():
        seen = [line.timestamp for line in lines if line in after]
        latest[key] = max(seen).astimezone(dt.UTC).replace(tzinfo=None) if seen else None
    assert {row[:3]: row[5] for row in new_rows} == {row[:3]: latest[row[:3]]
                                                     for row in new_rows}
    assert any(any(line in before for line in members[row[:3]]) for row in new_rows), \
        "no session of the new version began before the switch"


def test_a_grouping_column_removed_merges_the_groups_with_sparks_own_merges(
    spark: Any, tmp_path: Path
) -> None:
    """The hourly scores per user become hourly scores: each hour's groups of the old state
    are merged into one by Spark's merge of each aggregate (counts add, the max takes the
    greater), so an hour open at the switch counts every user's events of both versions."""
    home, inp = Home(tmp_path / "home"), tmp_path / "in"
    events = write_events(inp, range(0, 4))
    conf = {"spark.sql.shuffle.partitions": "3"}
    api.run(home, JOB, "v1", params={"input": str(inp), "output": str(tmp_path / "v1")},
            conf=conf, until_caught_up=True, spark=spark)
    api.snapshot_create(home, "v1", "per-user")
    events += write_events(inp, range(4, 8))
    params = {"input": str(inp), "output": str(tmp_path / "v2"), "per_user": "no"}
    plan = api.plan(home, JOB, params=params, conf=conf, from_snapshot="per-user",
                    spark=spark)
    assert plan.ok, plan.problems
    changes = {row["name"]: row["changes"] for row in plan.to_dict()["operators"]}
    assert changes["hourly_scores"] == [
        "grouping columns user_id removed: the groups that become one are merged by each "
        "aggregate's own merge, Spark's (count(1), max(score))"]
    api.run(home, JOB, "v2", params=params, conf=conf, from_snapshot="per-user",
            until_caught_up=True, spark=spark)

    per_user = expected(events)
    hours: dict[dt.datetime, tuple[int, int]] = {}
    for (start, _user, n, top), count in per_user.items():
        assert count == 1
        was = hours.get(start, (0, top))
        hours[start] = (was[0] + n, max(was[1], top))
    old_rows = output_rows(spark, tmp_path / "v1")
    old_hours = {row[0] for row in old_rows}
    # Hours the old version emitted stay per user; the others are emitted once, per hour.
    assert old_rows == Counter({row: n for row, n in per_user.items() if row[0] in old_hours})
    assert output_rows(spark, tmp_path / "v2") == Counter(
        (start, n, top) for start, (n, top) in hours.items() if start not in old_hours)


AD_JOIN = EXAMPLES_JOBS / "spark_example_ad_join.py"


def test_the_guides_join_buffers_a_new_impression_column(spark: Any, tmp_path: Path) -> None:
    """The guide's join of impressions and clicks, then a version whose impressions also
    carry their hour: the impressions buffered before the switch are migrated with the new
    column null, so a click after the switch still matches them (its row's hour null), and
    impressions read after the switch carry their hour."""
    from tests.support.spark_examples import expected_ad_matches, write_ads

    home = Home(tmp_path / "home")
    impressions, clicks = tmp_path / "impressions", tmp_path / "clicks"
    before = write_ads(impressions, clicks, range(0, 3))
    conf = {"spark.sql.shuffle.partitions": "3"}
    common = {"impressions": str(impressions), "clicks": str(clicks)}
    api.run(home, AD_JOIN, "ads", params={**common, "output": str(tmp_path / "v1")},
            conf=conf, until_caught_up=True, spark=spark)
    api.snapshot_create(home, "ads", "before")
    after = write_ads(impressions, clicks, range(3, 6))
    params = {**common, "output": str(tmp_path / "v2"), "with_hour": "yes"}
    plan = api.plan(home, AD_JOIN, params=params, conf=conf, from_snapshot="before",
                    spark=spark)
    assert plan.ok, plan.problems
    [row] = plan.to_dict()["operators"]
    assert row["action"] == "migrate"
    assert row["changes"] == ["left-keyWithIndexToValue: value column impressionHour added "
                              "(the rows buffered before the switch get null)"]
    api.run(home, AD_JOIN, "ads-v2", params=params, conf=conf, from_snapshot="before",
            until_caught_up=True, spark=spark)

    old_rows = output_rows(spark, tmp_path / "v1")
    new_rows = output_rows(spark, tmp_path / "v2")
    # (impressionAdId, impressionTime, impressionHour, clickAdId, clickTime)
    assert old_rows + Counter({(r[0], r[1], r[3], r[4]): n for r, n in new_rows.items()}) \
        == expected_ad_matches(before[0] + after[0], before[1] + after[1])
    seen_before = {(i.ad_id, i.time.astimezone(dt.UTC).replace(tzinfo=None))
                   for i in before[0]}
    assert {r[:3] for r in new_rows} == {
        (r[0], r[1], None if (r[0], r[1]) in seen_before else r[1].hour) for r in new_rows}
    assert any((r[0], r[1]) in seen_before for r in new_rows), \
        "no impression buffered before the switch was matched after it"


def test_the_guides_join_gains_a_column_into_another_partition_count_on_an_s3_home(
    spark: Any, s3_server: S3Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The guide's join gains the impression's hour while its partition count goes from 3
    to 4, the home on S3: the join's migration rewrites only the buffer whose values
    changed, so the state is staged on the driver (not moved by tasks in the store, which
    would leave the unchanged buffers in the old count) and every buffered row still
    matches its click after the switch."""
    from tests.support.spark_examples import expected_ad_matches, write_ads

    monkeypatch.setenv("SPARKPOINT_SCRATCH", str(tmp_path / "machine"))
    home = Home.resolve(f"s3://{s3_server.new_bucket()}/home")
    impressions, clicks = tmp_path / "impressions", tmp_path / "clicks"
    before = write_ads(impressions, clicks, range(0, 3))
    common = {"impressions": str(impressions), "clicks": str(clicks)}
    api.run(home, AD_JOIN, "ads", params={**common, "output": str(tmp_path / "v1")},
            conf={"spark.sql.shuffle.partitions": "3"}, until_caught_up=True, spark=spark)
    api.snapshot_create(home, "ads", "before")
    after = write_ads(impressions, clicks, range(3, 6))
    said: list[str] = []
    api.run(home, AD_JOIN, "ads-v2",
            params={**common, "output": str(tmp_path / "v2"), "with_hour": "yes"},
            conf={"spark.sql.shuffle.partitions": "4"}, from_snapshot="before",
            until_caught_up=True, spark=spark, echo=said.append)
    assert any("from 3 to 4 partitions" in line for line in said), said
    assert not any("read and write the store" in line for line in said), said
    checkpoint = Checkpoint(home.checkpoint_dir("ads-v2"))
    assert checkpoint.state_partitions(checkpoint.require_latest_committed_batch()) == 4
    new_rows = output_rows(spark, tmp_path / "v2")
    assert output_rows(spark, tmp_path / "v1") + Counter(
        {(r[0], r[1], r[3], r[4]): n for r, n in new_rows.items()}) \
        == expected_ad_matches(before[0] + after[0], before[1] + after[1])
    seen_before = {(i.ad_id, i.time.astimezone(dt.UTC).replace(tzinfo=None))
                   for i in before[0]}
    assert any((r[0], r[1]) in seen_before for r in new_rows), \
        "no impression buffered before the switch was matched after it"


def test_a_migrated_start_is_rehearsed_against_the_old_version(
    spark: Any, tmp_path: Path
) -> None:
    """`rehearse` of the bigint version from the int job's snapshot migrates the state in
    its scratch space and replays the batches the old job ran since: the same rows (ids
    and scores are the same numbers), and nothing of the home changed."""
    home, inp = Home(tmp_path / "home"), tmp_path / "in"
    write_events(inp, range(0, 4))
    params = {"input": str(inp), "output": str(tmp_path / "v1"), "id_type": "INT"}
    conf = {"spark.sql.shuffle.partitions": "3"}
    api.run(home, JOB, "v1", params=params, conf=conf, until_caught_up=True, spark=spark)
    api.snapshot_create(home, "v1", "ints")
    write_events(inp, range(4, 8), [c for c in clicks_for_slice(3) if c.ts.minute >= 12])
    api.run(home, JOB, "v1", params=params, conf=conf, until_caught_up=True, spark=spark)
    said: list[str] = []
    rehearsal = api.rehearse(home, JOB, "v1", from_snapshot="ints",
                             params={**params, "id_type": "BIGINT"}, spark=spark,
                             echo=said.append)
    assert any("migrated the state" in line for line in said), said
    assert rehearsal.new_rows > 0
    assert rehearsal.equal is True, rehearsal.to_dict()
    assert [view.record.name for view in api.jobs_list(home)] == ["v1"]
