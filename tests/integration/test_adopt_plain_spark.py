"""Adopting a query that plain Spark ran: Spark's example structured_network_wordcount_windowed.py
(a file source instead of the socket) is run by spark-submit with Spark's defaults over half
of the input, its checkpoint imported with `snapshot import`, and the query continued with
`run --from-snapshot` over the rest. Windows still open in the state at the switch must end
with the counts of every line exactly once: the rows written before and after the switch,
read through the file sink's log, equal the rows computed in plain Python.

No dedupe and no late-data filter stands between a re-read file and the output here, so a
source that starts again from its first file shows as doubled counts.

Spark fact pinned here: Spark 4.3 records spark.sql.streaming.queryEvolution.
enableSourceEvolution in every offsets entry (OffsetSeqMetadata.relevantSQLConfs, default
"false" for an entry without it) and MicroBatchExecution.logicalPlan takes it from the newest
entry before the session's; under "false" it keys sources by position, so offsets written
under source names (format v2) find no source and every source restarts from its beginning.
A plain checkpoint records "false"; the checkpoint sparkpoint builds must say "true".
"""

from __future__ import annotations

import datetime as dt
import json
import os
import random
import subprocess
import sys
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from sparkpoint import api
from sparkpoint.checkpoint.layout import Checkpoint
from sparkpoint.checkpoint.rocksdb_state import ROCKSDB_PROVIDER
from sparkpoint.spark.session import SOURCE_EVOLUTION_CONF
from sparkpoint.storage.home import Home
from sparkpoint.testing import output_rows
from tests.conftest import REPO, kafka_connector_jars
from tests.support.cli import sparkpoint
from tests.support.kafka import KafkaBroker
from tests.support.shared_start import SharedStart, build_once

pytestmark = pytest.mark.spark

JOB = REPO / "tests" / "data" / "jobs" / "windowed_wordcount.py"
PLAIN = REPO / "tests" / "data" / "plain" / "windowed_wordcount.py"
EPOCH = dt.datetime(2026, 3, 1)
FILE_MINUTES = 10
WATERMARK_DELAY = dt.timedelta(minutes=10)
VOCABULARY = ("owl", "fox", "elk", "yak", "emu")

Line = tuple[dt.datetime, str]


def write_lines(directory: Path, index: int) -> list[Line]:
    """File ``index``: six lines of three words over minutes 10*index..10*index+10 of event
    time, at odd seconds (no timestamp ever equals a window bound or the watermark)."""
    directory.mkdir(parents=True, exist_ok=True)
    rng = random.Random(index)
    lines = []
    for n in range(6):
        ts = EPOCH + dt.timedelta(minutes=FILE_MINUTES * index, seconds=n * 97 + 13)
        lines.append((ts, " ".join(rng.choice(VOCABULARY) for _ in range(3))))
    tmp = directory / f".lines-{index}.json.tmp"
    tmp.write_text("".join(json.dumps({"value": text, "timestamp": ts.isoformat() + "Z"}) + "\n"
                           for ts, text in lines))
    # Spark's file source takes new files in modification-time order: one second apart.
    mtime = 1_700_000_000 + index
    os.utime(tmp, (mtime, mtime))
    os.replace(tmp, directory / f"lines-{index}.json")
    return lines


def expected_counts(lines: Iterable[Line], window: dt.timedelta,
                    slide: dt.timedelta) -> Counter[tuple[Any, ...]]:
    """(start, end, word, count) of every window that ends at or before the final watermark
    (latest event time - 10 minutes): what append mode has emitted once all input is read."""
    lines = list(lines)
    watermark = max(ts for ts, _ in lines) - WATERMARK_DELAY
    counts: Counter[tuple[dt.datetime, str]] = Counter()
    for ts, text in lines:
        last_start = EPOCH + ((ts - EPOCH) // slide) * slide
        start = last_start
        while start + window > ts:
            for word in text.split(" "):
                counts[(start, word)] += 1
            start -= slide
    return Counter((start, start + window, word, n) for (start, word), n in counts.items()
                   if start + window <= watermark)


def spark_submit(script: Path, *args: str, conf: dict[str, str] | None = None) -> None:
    """Run ``script`` as a user does: spark-submit, Spark's defaults but for ``conf``."""
    settings = {"spark.driver.host": "127.0.0.1", "spark.driver.bindAddress": "127.0.0.1",
                "spark.ui.enabled": "false", **(conf or {})}
    command = [str(Path(sys.executable).parent / "spark-submit"), "--master", "local[2]"]
    for key, value in settings.items():
        command += ["--conf", f"{key}={value}"]
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable)
    done = subprocess.run([*command, str(script), *args], capture_output=True, text=True,
                          timeout=600, env=env)
    assert done.returncode == 0, done.stderr[-3000:]


# Spark's defaults (HDFS provider, 200 partitions) make every batch cost a minute on two busy
# cores: the cases without a partition change or on RocksDB take 4 partitions.
HDFS_4 = {"spark.sql.shuffle.partitions": "4"}
ROCKSDB_4 = {"spark.sql.streaming.stateStore.providerClass": ROCKSDB_PROVIDER,
             "spark.sql.shuffle.partitions": "4"}


@dataclass(frozen=True)
class PlainRun:
    """The sliding-window query (10 minutes every 5) run plain by spark-submit over files 0-1
    of ``root``/in into ``root``/plain-out, its checkpoint ``root``/ckpt."""

    root: Path
    lines: list[Line]


def _run_plain_sliding(root: Path, conf: dict[str, str]) -> list[Line]:
    inp = root / "in"
    lines = write_lines(inp, 0) + write_lines(inp, 1)
    spark_submit(PLAIN, str(inp), str(root / "plain-out"), str(root / "ckpt"), conf=conf)
    return lines


@pytest.fixture(scope="module")
def plain_sliding_hdfs_4(tmp_path_factory: pytest.TempPathFactory
                         ) -> tuple[SharedStart, list[Line]]:
    lines: list[Line] = []
    start = build_once(tmp_path_factory, "plain-sliding",
                       lambda root: lines.extend(_run_plain_sliding(root, HDFS_4)))
    return start, lines


PLAIN_CONFS = {"hdfs_4": HDFS_4, "rocksdb_4": ROCKSDB_4}


@pytest.fixture
def plain_sliding(request: pytest.FixtureRequest, tmp_path: Path) -> PlainRun:
    """The plain run under the conf named by the test's parameter (HDFS_4 if none). The
    HDFS_4 run is the same for every test: built once, a fresh copy each
    (tests/support/shared_start.py)."""
    name = getattr(request, "param", "hdfs_4")
    if name != "hdfs_4":
        return PlainRun(tmp_path, _run_plain_sliding(tmp_path, PLAIN_CONFS[name]))
    start, lines = request.getfixturevalue("plain_sliding_hdfs_4")
    return PlainRun(start.fresh(), list(lines))


# Spark's defaults (200 partitions) continued with fewer: test_spark_examples_adopted.py,
# with Spark's own windowed word count and three more of its queries.
@pytest.mark.parametrize(
    ("plain_sliding", "partitions"),
    [("hdfs_4", "4"), ("rocksdb_4", "3")],
    ids=["hdfs-4-unchanged", "rocksdb-4-to-3"],
    indirect=["plain_sliding"],
)
def test_plain_windowed_word_count_adopted_and_continued_counts_every_line_once(
    spark: object, home: Home, tmp_path: Path, plain_sliding: PlainRun, partitions: str
) -> None:
    root = plain_sliding.root
    inp, plain_out, plain_ckpt = root / "in", root / "plain-out", root / "ckpt"
    lines = plain_sliding.lines
    plain = Checkpoint(plain_ckpt)
    last = plain.require_latest_committed_batch()
    # What makes the case: Spark's default offsets (v1, positional) and conf.
    assert plain.offsets(last).version == 1
    assert plain.offsets(last).conf[SOURCE_EVOLUTION_CONF] == "false"
    window, slide = dt.timedelta(minutes=10), dt.timedelta(minutes=5)
    before = expected_counts(lines, window, slide)
    assert output_rows(spark, plain_out) == before  # type: ignore[arg-type]

    managed_out = tmp_path / "managed-out"
    params = {"input": str(inp), "output": str(managed_out), "files_per_batch": "2"}
    api.snapshot_import(home, plain_ckpt, "adopted", JOB, params=params,
                        spark=spark)  # type: ignore[arg-type]
    lines += write_lines(inp, 2) + write_lines(inp, 3)
    after = expected_counts(lines, window, slide)
    # Windows in the state at the switch are emitted after it: the case that double-counts.
    open_at_switch = {(s, e) for s, e, _, _ in after} - {(s, e) for s, e, _, _ in before}
    assert any(s < max(ts for ts, _ in lines[:12]) for s, _ in open_at_switch)

    api.run(home, JOB, "adopted", params=params, conf={"spark.sql.shuffle.partitions": partitions},
            from_snapshot="adopted", until_caught_up=True, spark=spark)  # type: ignore[arg-type]
    # Caught up: no input file is left unread, in 'jobs show' and 'jobs list' alike.
    assert api.job_view(home, "adopted").files_behind == {"lines": 0}
    assert [view.files_behind for view in api.jobs_list(home)] == [{"lines": 0}]
    combined = output_rows(spark, plain_out) + output_rows(spark, managed_out)  # type: ignore[arg-type]
    assert combined == after


def test_import_checks_the_window_of_the_state_against_the_job_file(
    spark: object, home: Home, tmp_path: Path, plain_sliding: PlainRun
) -> None:
    """The checkpoint of the sliding-window query (10 minutes every 5) with the job file of
    the tumbling one: refused (exit 3), both windows named, nothing created. With the right
    job file the snapshot records the window its keys hold, and `plan` approves that job and
    refuses the tumbling one."""
    inp, ckpt = plain_sliding.root / "in", plain_sliding.root / "ckpt"
    params = {"input": str(inp), "output": str(tmp_path / "out")}
    tumbling = {**params, "slide": "10 minutes"}
    args = [arg for key, value in tumbling.items() for arg in ("--param", f"{key}={value}")]

    wrong = sparkpoint(home, "snapshot", "import", str(ckpt), "adopted", "--job-file",
                       str(JOB), *args)
    assert wrong.code == 3, wrong.err
    assert "the state holds windows of 10 minutes sliding every 5 minutes" in wrong.err
    assert "the job file has windows of 10 minutes;" in wrong.err
    assert "nothing was created" in wrong.err and "Traceback" not in wrong.err
    assert api.snapshot_list(home) == []

    api.snapshot_import(home, ckpt, "adopted", JOB, params=params,
                        spark=spark)  # type: ignore[arg-type]
    [operator] = api.snapshot_show(home, "adopted").operators
    assert operator.window is not None
    assert operator.window.describe() == "windows of 10 minutes sliding every 5 minutes"
    right = api.plan(home, JOB, params=params, from_snapshot="adopted",
                     spark=spark)  # type: ignore[arg-type]
    assert right.ok, right.problems
    refused = api.plan(home, JOB, params=tumbling, from_snapshot="adopted",
                       spark=spark)  # type: ignore[arg-type]
    assert not refused.ok
    assert any("window changed" in problem and "sliding every 5 minutes" in problem
               for problem in refused.problems), refused.problems


# -- Every source kind sparkpoint knows --------------------------------------------------

PASSTHROUGH_PLAIN = REPO / "tests" / "data" / "plain" / "passthrough.py"
PASSTHROUGH_JOB = REPO / "tests" / "data" / "jobs" / "passthrough.py"


def _produce(broker: KafkaBroker, topic: str, first: int, count: int) -> Counter[Any]:
    """Records v<first>.. to partitions i % 2; the rows the query makes of them."""
    from confluent_kafka import Producer

    rows: Counter[Any] = Counter()
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(first, first + count):
        producer.produce(topic, value=f"v{i}".encode(), partition=i % 2,
                         on_delivery=lambda err, msg: rows.update([(
                             msg.topic(), msg.partition(), msg.offset(), msg.value().decode(),
                             dt.datetime.fromtimestamp(msg.timestamp()[1] / 1000, dt.UTC)
                             .replace(tzinfo=None))]))
    producer.flush(30)
    assert sum(rows.values()) == count
    return rows


@pytest.mark.parametrize("kind", ["rate-micro-batch", "rate", "kafka"])
def test_adopted_source_continues_where_plain_spark_stopped(
    spark: object, home: Home, tmp_path: Path, kind: str, request: pytest.FixtureRequest
) -> None:
    """A stateless plain query over each source kind, adopted and continued: every record
    exactly once (a source read again from its start would repeat the first ones)."""
    plain_out, ckpt, out = tmp_path / "plain-out", tmp_path / "ckpt", tmp_path / "out"
    params = {"source": kind, "output": str(out)}
    extra: list[str] = []
    conf = HDFS_4
    if kind == "kafka":
        # The plain query reads with Spark's connector, as most Kafka jobs do.
        broker: KafkaBroker = request.getfixturevalue("kafka_broker")
        topic = broker.new_topic("adopted", 2)
        records = _produce(broker, topic, 0, 10)
        extra = [broker.bootstrap, topic]
        params.update(bootstrap=broker.bootstrap, topic=topic, kafka_format="kafka")
        conf = {**HDFS_4, "spark.jars": kafka_connector_jars()}
    spark_submit(PASSTHROUGH_PLAIN, kind, str(plain_out), str(ckpt), *extra, conf=conf)
    before = output_rows(spark, plain_out)  # type: ignore[arg-type]
    assert before
    api.snapshot_import(home, ckpt, "adopted", PASSTHROUGH_JOB, params=params,
                        spark=spark)  # type: ignore[arg-type]
    if kind == "kafka":
        records += _produce(broker, topic, 10, 6)
        api.run(home, PASSTHROUGH_JOB, "adopted", params=params, from_snapshot="adopted",
                until_caught_up=True, spark=spark)  # type: ignore[arg-type]
        assert before + output_rows(spark, out) == records  # type: ignore[arg-type]
        return
    api.run(home, PASSTHROUGH_JOB, "adopted", params=params, from_snapshot="adopted",
            max_batches=2, spark=spark)  # type: ignore[arg-type]
    after = output_rows(spark, out)  # type: ignore[arg-type]
    assert after
    values = Counter(value for _ts, value in (before + after).elements())
    # The rate sources number their rows 0, 1, 2...: all of them once, none twice.
    assert values == Counter(range(len(values))), sorted(values.items())[:20]


@pytest.mark.parametrize("conf", [HDFS_4, ROCKSDB_4], ids=["hdfs", "rocksdb"])
def test_import_refuses_a_session_gap_the_state_contradicts(
    spark: object, home: Home, tmp_path: Path, conf: dict[str, str]
) -> None:
    """Session windows of 10 minutes: a stored session shorter than the job file's gap of an
    hour refutes it (a session lasts at least its gap); the right gap is recorded. On RocksDB
    the session store's keys are prefix-encoded (its numColsPrefixKey)."""
    inp, ckpt = tmp_path / "in", tmp_path / "ckpt"
    write_lines(inp, 0)
    write_lines(inp, 1)
    spark_submit(PLAIN, str(inp), str(tmp_path / "plain-out"), str(ckpt), "session",
                 "10 minutes", conf=conf)
    params = {"input": str(inp), "output": str(tmp_path / "out")}
    args = [arg for key, value in {**params, "gap": "1 hour"}.items()
            for arg in ("--param", f"{key}={value}")]
    wrong = sparkpoint(home, "snapshot", "import", str(ckpt), "adopted", "--job-file",
                       str(JOB), *args)
    assert wrong.code == 3, wrong.err
    assert "shorter than the job's gap of 1 hour" in wrong.err
    assert "the job file has session windows with a gap of 1 hour" in wrong.err
    assert api.snapshot_list(home) == []
    api.snapshot_import(home, ckpt, "adopted", JOB, params={**params, "gap": "10 minutes"},
                        spark=spark)  # type: ignore[arg-type]
    [operator] = api.snapshot_show(home, "adopted").operators
    assert operator.window is not None
    assert operator.window.describe() == "session windows with a gap of 10 minutes"
