"""transformWithState state in Avro (``spark.sql.streaming.stateStore.encodingFormat=avro``,
the encoding under which Spark lets its state schemas evolve): snapshotted and resumed as it
is (also into another partition count, by Spark's offline repartition), with Spark itself
judging a changed state schema at ``plan`` time (its restart check on the assembled
checkpoint). Measured on pyspark 4.3.0: a value field added, removed or widened is
accepted; a field's type changed otherwise is refused
(STATE_STORE_INVALID_VALUE_SCHEMA_EVOLUTION); Spark refuses Avro for any other stateful
operator at a query's start. The jobs run as the CLI runs them, each in its own process, so
that no setting of theirs reaches the tests' shared session."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from sparkpoint.checkpoint.layout import Checkpoint
from sparkpoint.storage.home import Home
from sparkpoint.testing import Click, output_rows, write_clicks
from tests.conftest import REPO
from tests.support.cli import sparkpoint

pytestmark = pytest.mark.spark
JOB = REPO / "tests" / "data" / "jobs" / "avro_counts.py"
ENCODING = "spark.sql.streaming.stateStore.encodingFormat"


def _running_counts(batches: list[list[Click]], start: Counter[str] | None = None
                    ) -> Counter[tuple[str, int]]:
    """What the job emits, computed here: per batch, each user of the batch with the user's
    clicks counted so far."""
    counted: Counter[str] = Counter(start or {})
    rows: Counter[tuple[str, int]] = Counter()
    for clicks in batches:
        counted.update(click.user for click in clicks)
        rows.update((user, counted[user]) for user in {click.user for click in clicks})
    return rows


def _args(inp: Path, out: Path, value: str) -> list[str]:
    return ["--param", f"input={inp}", "--param", f"output={out}", "--param", f"value={value}",
            "--until-caught-up"]


def test_avro_state_is_resumed_as_it_is_and_evolves_as_spark_allows(
    spark: object, home: Home, tmp_path: Path
) -> None:
    inp = tmp_path / "in"
    before = [write_clicks(inp, [i]) for i in range(3)]
    ran = sparkpoint(home, "run", str(JOB), "--job", "a1", "--conf", f"{ENCODING}=avro",
                     "--conf", "spark.sql.shuffle.partitions=2",
                     *_args(inp, tmp_path / "out1", "count_only"))
    assert ran.code == 0, ran.err
    assert sparkpoint(home, "snapshot", "create", "a1", "s1").code == 0
    taken = Checkpoint(home.snapshots_dir / "s1" / "checkpoint")
    assert taken.offsets(taken.require_latest_committed_batch()).conf[ENCODING] == "avro"
    after = [write_clicks(inp, [i]) for i in range(3, 5)]

    # A changed type: Spark's own check refuses it at plan time, with its reason.
    refused = sparkpoint(home, "plan", str(JOB), "--from-snapshot", "s1", "--json",
                         *_args(inp, tmp_path / "out2", "as_text")[:-1])
    assert refused.code == 3, refused.err
    problems = json.loads(refused.out)["problems"]
    assert any("STATE_STORE_INVALID_VALUE_SCHEMA_EVOLUTION" in p for p in problems), problems
    assert not home.job_dir("a2").exists() and not (tmp_path / "out2").exists()

    # A field added, with the old job gone and another partition count (Spark's offline
    # repartition reads the state schemas through the paths the snapshot's metadata names):
    # accepted, and the counts go on from the snapshot's state.
    assert sparkpoint(home, "jobs", "delete", "a1").code == 0
    started = sparkpoint(home, "run", str(JOB), "--job", "a2", "--from-snapshot", "s1",
                         "--conf", "spark.sql.shuffle.partitions=3",
                         *_args(inp, tmp_path / "out2", "with_note"))
    assert started.code == 0, started.err
    assert output_rows(spark, tmp_path / "out1") == _running_counts(before)  # type: ignore[arg-type]
    resumed = Counter(click.user for clicks in before for click in clicks)
    assert output_rows(spark, tmp_path / "out2") == _running_counts(after, resumed)  # type: ignore[arg-type]
    # Snapshots of the evolved job hold both schemas of the state variable, and verify.
    assert sparkpoint(home, "snapshot", "create", "a2", "s2").code == 0
    schemas = list((home.snapshots_dir / "s2" / "checkpoint" / "state" / "0" /
                    "_stateSchema" / "default").glob("[0-9]*"))
    assert len(schemas) == 2, schemas
    assert sparkpoint(home, "snapshot", "verify", "s2").code == 0

    # From the evolved state, a field removed and a field widened (LONG to DOUBLE) are
    # accepted by Spark's check too; plan creates nothing.
    for value in ("count_only", "as_double"):
        planned = sparkpoint(home, "plan", str(JOB), "--from-snapshot", "s2", "--json",
                             *_args(inp, tmp_path / "out3", value)[:-1])
        assert planned.code == 0, (value, planned.err, planned.out)
        assert json.loads(planned.out)["problems"] == []
    assert not home.job_dir("a3").exists() and not (tmp_path / "out3").exists()
