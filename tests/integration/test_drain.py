"""Drain on real Spark: every event-time window, session and join buffer is emitted, state is
empty afterwards (or reported as residual), and the maximal watermark does not outlive the
drain: the job, or a job started from the drained snapshot, handles new input normally."""

from __future__ import annotations

import datetime as dt
import json
import shutil
import signal
import threading
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from sparkpoint import api
from sparkpoint.drain import protocol as drain_protocol
from sparkpoint.runtime import runner
from sparkpoint.runtime.registry import JobRegistry
from sparkpoint.storage.home import Home
from sparkpoint.testing import (
    Click,
    clicks_for_slice,
    output_rows,
    sink_files_up_to,
    write_clicks,
)
from tests.conftest import SHUFFLE_PARTITIONS
from tests.support.cli import files_committed, sparkpoint, start, wait_for
from tests.support.shared_start import SharedStart, build_once

pytestmark = pytest.mark.spark
JOB = Path(__file__).resolve().parent.parent / "data" / "jobs" / "drain_kinds.py"
HOUR = dt.timedelta(hours=1)


def _naive(value: dt.datetime) -> dt.datetime:
    return value.replace(tzinfo=None)


def _floor(ts: dt.datetime, minutes: int) -> dt.datetime:
    return ts.replace(minute=ts.minute // minutes * minutes, second=0, microsecond=0)


def _window_counts(clicks: list[Click], window_starts: Any) -> Counter[Any]:
    counts: Counter[tuple[str, dt.datetime]] = Counter()
    for click in clicks:
        for window_start in window_starts(click.ts):
            counts[(click.user, _naive(window_start))] += 1
    return Counter((user, start, start + HOUR, n) for (user, start), n in counts.items())


def expected_all_windows(kind: str, clicks: list[Click], views: list[Click]) -> Counter[Any]:
    """What an unbounded run eventually emits for this input: every window closed."""
    if kind == "tumbling":
        return _window_counts(clicks, lambda ts: [_floor(ts, 60)])
    if kind == "sliding":
        return _window_counts(clicks, lambda ts: [_floor(ts, 30), _floor(ts, 30) - HOUR / 2])
    if kind == "session":
        gap = dt.timedelta(minutes=5)
        rows: Counter[Any] = Counter()
        for user in {c.user for c in clicks}:
            times = sorted(c.ts for c in clicks if c.user == user)
            start, end, n = times[0], times[0] + gap, 0
            for ts in times:
                if ts >= end:
                    rows[(user, _naive(start), _naive(end), n)] += 1
                    start, n = ts, 0
                end, n = ts + gap, n + 1
            rows[(user, _naive(start), _naive(end), n)] += 1
        return rows
    if kind == "outer":
        rows = Counter()
        near = dt.timedelta(minutes=2)
        for click in clicks:
            matches = [v for v in views if v.user == click.user and abs(v.ts - click.ts) <= near]
            for view in matches or [None]:
                rows[(click.event_id, view.event_id if view else None)] += 1
        return rows
    raise ValueError(kind)


def _params(tmp: Path, kind: str, out: str = "out") -> dict[str, str]:
    return {"kind": kind, "input": str(tmp / "in"), "views_input": str(tmp / "views"),
            "output": str(tmp / out)}


def _run(spark: object, home: Home, job: str, params: dict[str, str], **kw: Any) -> None:
    api.run(home, JOB, job, params=params, until_caught_up=True,
            spark=spark, **kw)  # type: ignore[arg-type]


def _snapshot_rows(home: Home, snapshot: str) -> dict[str, int]:
    shown = sparkpoint(home, "snapshot", "show", snapshot, "--json")
    assert shown.code == 0, shown.err
    return {op["name"]: op["rows"] for op in shown.json()["operators"]}


# Tumbling windows are drained (and checked the same way) by the tests below.
@pytest.mark.parametrize("kind", ["sliding", "session", "outer"])
def test_drain_emits_every_window_and_empties_state(
    spark: object, home: Home, tmp_path: Path, kind: str
) -> None:
    clicks = write_clicks(tmp_path / "in", range(0, 4))
    views = write_clicks(tmp_path / "views", range(0, 4), seed=11)
    _run(spark, home, "j", _params(tmp_path, kind))
    expected = expected_all_windows(kind, clicks, views)
    before = output_rows(spark, tmp_path / "out")  # type: ignore[arg-type]
    assert before != expected, "the run alone already emitted everything: nothing to drain"
    # In this process (the CLI's `drain --json` is walked by the tests of a residual, of
    # timers and of a running job below).
    drained = api.drain(home, "j", snapshot="d1", spark=spark)  # type: ignore[arg-type]
    assert drained.residual == []
    assert output_rows(spark, tmp_path / "out") == expected  # type: ignore[arg-type]
    assert set(_snapshot_rows(home, "d1").values()) == {0}
    assert sparkpoint(home, "jobs", "show", "j", "--json").json()["status"] == "drained"


def test_drain_of_a_dedupe_within_watermark_empties_its_state(
    spark: object, home: Home, tmp_path: Path
) -> None:
    write_clicks(tmp_path / "in", range(0, 4))
    _run(spark, home, "j", _params(tmp_path, "within"))
    api.snapshot_create(home, "j", "before")
    assert _snapshot_rows(home, "before")["first_visits"] > 0
    emitted = output_rows(spark, tmp_path / "out")  # type: ignore[arg-type]
    record = api.drain(home, "j", snapshot="after", spark=spark)  # type: ignore[arg-type]
    assert record.residual == [] and _snapshot_rows(home, "after") == {"first_visits": 0}
    # Its rows are emitted on arrival: the drain adds none.
    assert output_rows(spark, tmp_path / "out") == emitted  # type: ignore[arg-type]


def test_state_no_watermark_clears_is_reported_as_residual(
    spark: object, home: Home, tmp_path: Path
) -> None:
    clicks = write_clicks(tmp_path / "in", range(0, 3))
    _run(spark, home, "j", _params(tmp_path, "residual"))
    drained = sparkpoint(home, "drain", "j", "--json")
    assert drained.code == 0, drained.err
    residual = {op["name"]: op["rows"] for op in drained.json()["residual"]}
    assert residual == {"unique_ids": len({c.event_id for c in clicks})}
    text = sparkpoint(home, "jobs", "show", "j").out
    assert "residual state: unique_ids" in text


@dataclass(frozen=True)
class RunOf3:
    """Job 'j' (tumbling windows) ran until caught up over slices 0-2 of ``root``/in into
    ``root``/out; ``clicks`` are their clicks."""

    home: Home
    root: Path
    clicks: list[Click]


@pytest.fixture(scope="module")
def tumbling_j_built(spark: object, tmp_path_factory: pytest.TempPathFactory
                     ) -> tuple[SharedStart, list[Click]]:
    clicks: list[Click] = []

    def build(root: Path) -> None:
        clicks.extend(write_clicks(root / "in", range(0, 3)))
        _run(spark, Home(root / "home"), "j", _params(root, "tumbling"))

    return build_once(tmp_path_factory, "tumbling-j", build), clicks


@pytest.fixture
def tumbling_j(tumbling_j_built: tuple[SharedStart, list[Click]]) -> RunOf3:
    """The same start for the tests below, built once (tests/support/shared_start.py)."""
    start, clicks = tumbling_j_built
    root = start.fresh()
    return RunOf3(Home(root / "home"), root, list(clicks))


def test_drained_job_and_jobs_from_its_snapshot_use_a_normal_watermark(
    spark: object, tumbling_j: RunOf3
) -> None:
    home, root, clicks = tumbling_j.home, tumbling_j.root, tumbling_j.clicks
    drain = api.drain(home, "j", snapshot="d1", spark=spark)  # type: ignore[arg-type]
    assert drain.residual == []
    assert set(_snapshot_rows(home, "d1").values()) == {0}
    assert sparkpoint(home, "jobs", "show", "j", "--json").json()["status"] == "drained"
    # jobs show gives the watermark the next run starts with (the one before the drain:
    # newest event time - 10 minutes), not the drain batch's maximal one.
    shown = sparkpoint(home, "jobs", "show", "j", "--json").json()
    newest = max(c.ts for c in clicks) - dt.timedelta(minutes=10)
    assert shown["progress"]["watermark"] == \
        newest.isoformat(timespec="milliseconds").replace("+00:00", "Z")
    drained = output_rows(spark, root / "out")  # type: ignore[arg-type]
    later = write_clicks(root / "in", range(3, 9))
    # Closed by the new watermark (max event time - 10 min): hour 1 only; hour 2 stays open.
    expected_later = Counter({row: n for row, n in expected_all_windows(
        "tumbling", later, []).items() if row[1] == dt.datetime(2026, 1, 1, 1)})
    assert expected_later
    _run(spark, home, "from_drained", _params(root, "tumbling", "out2"),
         from_snapshot="d1")
    assert output_rows(spark, root / "out2") == expected_later  # type: ignore[arg-type]
    # As spark-submit does, the master is given explicitly: the default one the job ran on
    # (its record has none) is no change to report.
    said: list[str] = []
    _run(spark, home, "j", _params(root, "tumbling"), master="local[2]", echo=said.append)
    assert not [line for line in said if line.startswith("master")], said
    assert sparkpoint(home, "jobs", "show", "j", "--json").json()["status"] == "stopped"
    assert output_rows(spark, root / "out") == drained + expected_later  # type: ignore[arg-type]
    assert drained == expected_all_windows("tumbling", clicks, [])


def test_drain_of_a_running_job(home: Home, tmp_path: Path, spark: object) -> None:
    clicks = write_clicks(tmp_path / "in", range(0, 4))
    params = _params(tmp_path, "tumbling")
    log = tmp_path / "live.log"
    proc = start(home, "run", str(JOB), "--job", "live",
                 *[a for k, v in params.items() for a in ("--param", f"{k}={v}")],
                 "--conf", f"spark.sql.shuffle.partitions={SHUFFLE_PARTITIONS}", log=log)
    try:
        wait_for(lambda: files_committed(home, "live", "clicks") == 4, 180, "4 files", log)
        drained = sparkpoint(home, "drain", "live", "--snapshot", "live-d", "--json")
        assert drained.code == 0, drained.err
        assert proc.wait(timeout=120) == 0
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
    assert output_rows(spark, tmp_path / "out") == expected_all_windows(  # type: ignore[arg-type]
        "tumbling", clicks, [])
    assert set(_snapshot_rows(home, "live-d").values()) == {0}
    shown = sparkpoint(home, "jobs", "show", "live", "--json").json()
    assert shown["status"] == "drained" and shown["drain"]["snapshot"] == "live-d"


def _checkpoint_files(home: Home, job: str) -> dict[str, bytes]:
    root = home.checkpoint_dir(job)
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file()}


def test_drain_refusals_change_nothing(spark: object, home: Home, tmp_path: Path) -> None:
    unknown = sparkpoint(home, "drain", "nope")
    assert unknown.code == 4 and "job 'nope' not found" in unknown.err
    (tmp_path / "in").mkdir()
    _run(spark, home, "empty", _params(tmp_path, "tumbling"))
    empty = sparkpoint(home, "drain", "empty")
    assert empty.code == 4 and "no committed batch" in empty.err
    write_clicks(tmp_path / "in", range(0, 2))
    _run(spark, home, "j", _params(tmp_path, "tumbling", "out2"))
    assert sparkpoint(home, "drain", "j").code == 0
    files = _checkpoint_files(home, "j")
    record = (home.job_dir("j") / "job.json").read_text()
    again = sparkpoint(home, "drain", "j", "--snapshot", "x")
    assert again.code == 4 and "already drained" in again.err
    assert _checkpoint_files(home, "j") == files
    assert (home.job_dir("j") / "job.json").read_text() == record
    assert json.loads(sparkpoint(home, "snapshot", "list", "--json").out) == []


TIMERS = JOB.parent / "timers.py"


@pytest.mark.parametrize("mode", ["EventTime", "ProcessingTime"])
def test_drain_fires_transform_with_state_timers(
    spark: object, home: Home, tmp_path: Path, mode: str
) -> None:
    """Each user's timer lies a day ahead (of event or processing time): only a drain fires
    it, emitting the user's click count and clearing the user's state."""
    clicks = write_clicks(tmp_path / "in", range(0, 3))
    params = {"mode": mode, "input": str(tmp_path / "in"), "output": str(tmp_path / "out")}
    # A processing-time transformWithState never ends under availableNow: count batches.
    api.run(home, TIMERS, "j", params=params, spark=spark,  # type: ignore[arg-type]
            **({"until_caught_up": True} if mode == "EventTime" else {"max_batches": 3}))
    assert output_rows(spark, tmp_path / "out") == Counter()  # type: ignore[arg-type]
    api.snapshot_create(home, "j", "before")
    assert _snapshot_rows(home, "before")["counts"] > 0
    # inspect counts transformWithState's rows but says in one typed line why it does not
    # decode them (column families), naming the operator and its store.
    inspected = sparkpoint(home, "snapshot", "inspect", "before", "--rows", "5", "--json")
    assert inspected.code == 0, inspected.err
    (counts,) = inspected.json()["operators"]
    assert counts["sample"] == []
    (note,) = counts["undecoded"]
    assert note.startswith("[STATE_NOT_DECODED] operator 'counts' store 'default' "
                           "(transform_with_state)") and "column famil" in note
    drained = sparkpoint(home, "drain", "j", "--snapshot", "after", "--json")
    assert drained.code == 0, drained.err
    assert drained.json()["residual"] == []
    assert _snapshot_rows(home, "after") == {"counts": 0}
    expected = Counter((user, n) for user, n in Counter(c.user for c in clicks).items())
    assert output_rows(spark, tmp_path / "out") == expected  # type: ignore[arg-type]


def test_transform_with_state_resumes_across_an_inserted_operator(
    spark: object, home: Home, tmp_path: Path
) -> None:
    """Operator metadata v2 with absolute schema paths: the state follows the operator to
    its new id and new checkpoint, and its timers still fire at the drain."""
    clicks = write_clicks(tmp_path / "in", range(0, 3))
    params = {"mode": "EventTime", "input": str(tmp_path / "in"),
              "output": str(tmp_path / "out1")}
    api.run(home, TIMERS, "v1", params=params, until_caught_up=True,
            spark=spark)  # type: ignore[arg-type]
    api.snapshot_create(home, "v1", "s1")
    # The snapshot must not lean on the old checkpoint its schema paths named.
    shutil.rmtree(home.checkpoint_dir("v1"))
    clicks += write_clicks(tmp_path / "in", range(3, 5))
    v2 = {**params, "output": str(tmp_path / "out2"), "after": "dedupe"}
    plan = api.plan(home, TIMERS, params=v2, from_snapshot="s1",
                    spark=spark)  # type: ignore[arg-type]
    assert {op.name: (op.action, op.operator_id) for op in plan.operators} == {
        "counts": ("resume", 1), "unique_counts": ("initialize", 0)}
    api.run(home, TIMERS, "v2", params=v2, from_snapshot="s1", until_caught_up=True,
            spark=spark)  # type: ignore[arg-type]
    api.drain(home, "v2", spark=spark)  # type: ignore[arg-type]
    expected = Counter((user, n) for user, n in Counter(c.user for c in clicks).items())
    assert output_rows(spark, tmp_path / "out2") == expected  # type: ignore[arg-type]


def test_new_transform_with_state_operator_starts_empty_in_a_resumed_job(
    spark: object, home: Home, tmp_path: Path
) -> None:
    """v1 only deduplicates; v2 also counts per user with transformWithState. The dedupe
    resumes, the new operator gets the metadata v2 and schema files Spark writes for it."""
    write_clicks(tmp_path / "in", range(0, 3))
    base = {"mode": "EventTime", "input": str(tmp_path / "in")}
    api.run(home, TIMERS, "v1", params={**base, "output": str(tmp_path / "out1"),
                                        "only": "dedupe"},
            until_caught_up=True, spark=spark)  # type: ignore[arg-type]
    api.snapshot_create(home, "v1", "s1")
    later = write_clicks(tmp_path / "in", range(3, 5))
    v2 = {**base, "output": str(tmp_path / "out2"), "before": "dedupe"}
    plan = api.plan(home, TIMERS, params=v2, from_snapshot="s1",
                    spark=spark)  # type: ignore[arg-type]
    assert {op.name: op.action for op in plan.operators} == {
        "counts": "initialize", "unique_clicks": "resume"}
    api.run(home, TIMERS, "v2", params=v2, from_snapshot="s1", until_caught_up=True,
            spark=spark)  # type: ignore[arg-type]
    api.drain(home, "v2", spark=spark)  # type: ignore[arg-type]
    unique = {(c.event_id, c.ts): c for c in later}.values()
    expected = Counter((user, n) for user, n in Counter(c.user for c in unique).items())
    assert output_rows(spark, tmp_path / "out2") == expected  # type: ignore[arg-type]


def test_drain_completes_a_batch_planned_but_not_committed(
    spark: object, home: Home, tmp_path: Path
) -> None:
    """As after a stop mid-batch: offsets/N written, commits/N not. The drain runs batch N
    with its own watermark first, then its synthetic batch N+1."""
    write_clicks(tmp_path / "in", range(0, 4))
    api.run(home, JOB, "j", params=_params(tmp_path, "tumbling"), max_batches=2,
            spark=spark)  # type: ignore[arg-type]
    ckpt = home.checkpoint_dir("j")
    planned = max(int(p.name) for p in (ckpt / "offsets").iterdir() if p.name.isdigit())
    (ckpt / "commits" / str(planned)).unlink(missing_ok=True)
    (ckpt / "commits" / f".{planned}.crc").unlink(missing_ok=True)
    offset = json.loads((ckpt / "offsets" / str(planned)).read_text()
                        .split("clicks:")[1])["logOffset"]
    read = [json.loads(line)["path"] for k in range(offset + 1)
            for line in (ckpt / "sources" / "clicks" / str(k)).read_text().splitlines()[1:]]
    assert 0 < len(read) < 4, "the test needs a run that stopped before reading everything"
    record = api.drain(home, "j", spark=spark)  # type: ignore[arg-type]
    assert record.batch == planned + 1
    slices = [int(Path(path).stem.split("-")[1]) for path in read]
    expected = expected_all_windows(
        "tumbling", [c for i in slices for c in clicks_for_slice(i)], [])
    assert output_rows(spark, tmp_path / "out") == expected  # type: ignore[arg-type]


def test_a_snapshot_taken_while_the_job_is_drained_continues_it_with_nothing_lost(
    spark: object, tumbling_j: RunOf3, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another process snapshots the job while its drain is between the drain batch's commit
    and putting the job's watermark back: the snapshot must not hold the drain's maximal
    watermark, or a job started from it drops all new input as late (it did, before the
    export took the batch before an unfinished drain batch). Found while writing the torture
    test (tests/integration/test_home_torture.py), whose snapshot creates race its drains."""
    home, root, clicks = tumbling_j.home, tumbling_j.root, tumbling_j.clicks
    committed, resume = threading.Event(), threading.Event()
    put_back = drain_protocol.restore_watermark

    def paused(*args: Any) -> None:
        committed.set()  # the drain batch committed; the watermark is not back yet
        resume.wait(timeout=300)
        put_back(*args)

    monkeypatch.setattr(drain_protocol, "restore_watermark", paused)
    drain = threading.Thread(target=api.drain, args=(home, "j"), kwargs={"spark": spark})
    drain.start()
    try:
        assert committed.wait(timeout=300), "the drain batch did not commit"
        taken = sparkpoint(home, "snapshot", "create", "j", "s1", "--json")
    finally:
        resume.set()
        drain.join()
    assert taken.code == 0, taken.err
    later = write_clicks(root / "in", range(3, 9))
    _run(spark, home, "from_s1", _params(root, "tumbling", "out2"), from_snapshot="s1")
    api.drain(home, "from_s1", spark=spark)  # type: ignore[arg-type]
    # The job's output up to the snapshot's batch and the new job's: every window, once.
    before = output_rows(spark, root / "out",  # type: ignore[arg-type]
                         sink_files_up_to(root / "out", taken.json()["batch_id"]))
    after = output_rows(spark, root / "out2")  # type: ignore[arg-type]
    assert before + after == expected_all_windows("tumbling", clicks + later, [])


def test_a_stop_asked_while_the_drain_batch_runs_does_not_cut_the_drain_short(
    spark: object, tumbling_j: RunOf3, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stop request reaching the drain's batch (``jobs stop`` from another process, or
    another drain, which asks a running job to stop) is for after that batch: the drain
    completes. It failed with "the drain batch did not complete; nothing changed" (exit 1).
    Found by the torture test (tests/integration/test_home_torture.py)."""
    home, root, clicks = tumbling_j.home, tumbling_j.root, tumbling_j.clicks
    # The run looks for stop requests every 50 ms: one is seen before the batch completes.
    monkeypatch.setattr(runner, "POLL_SECONDS", 0.05)
    write_offsets = drain_protocol.write_drain_offsets

    def then_a_stop_request(*args: Any) -> None:
        write_offsets(*args)
        JobRegistry(home).request_stop("j")  # what jobs stop writes

    monkeypatch.setattr(drain_protocol, "write_drain_offsets", then_a_stop_request)
    drained = api.drain(home, "j", spark=spark)  # type: ignore[arg-type]
    assert drained.residual == []
    assert output_rows(spark, root / "out") == expected_all_windows(  # type: ignore[arg-type]
        "tumbling", clicks, [])
    assert sparkpoint(home, "jobs", "show", "j", "--json").json()["status"] == "drained"
    assert not JobRegistry(home).stop_requested("j")
