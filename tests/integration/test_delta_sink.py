"""Delta Lake's streaming sink on the pinned pyspark: the newest Delta release does not run
on it, and this test pins exactly how it fails.

Fact pinned here (Delta 4.4.0, io.delta:delta-spark_2.13 + delta-storage, fetched by
scripts/test-deps.sh from tests/servers/delta/pom.xml; pyspark 4.3.0): Delta 4.4.0 is built
against Spark 4.2.0. A plain query writing format("delta") commits its first batch (table
version 0, with the transaction ``txn {appId: <query id>, version: 0}``): a commit to a new
table reads no table state. From the second batch on, DeltaSink.addBatch asks for the
query's transaction version (``txn.txnVersion(queryId)``), which reconstructs the
snapshot's state through Delta's StateCache, which calls the 9-argument constructor of
org.apache.spark.sql.execution.LogicalRDD that Spark 4.2 has; Spark 4.3 added a 10th
(``isCheckpointedInput``), so the batch fails with java.lang.NoSuchMethodError and nothing
is committed. No Delta setting avoids that path; every read of a Delta table fails the same
way.

When this test fails because the second batch commits, a Delta release for Spark 4.3 is
out: switch the version property in tests/servers/delta/pom.xml (and the artifactId to
delta-spark_4.3_2.13 if Spark 4.3 is not that release's default), change this test to pin
two commits, and build the Delta sink: the sink-ahead refusal from the table's transaction
ids for the query (a batch whose id is at most the table's txn version for the query id is
skipped silently by Delta: a rollback would drop the replayed batches), and
``--rewind-output`` as one Delta commit of RemoveFiles for the abandoned batches' files plus
a SetTransaction(query id, snapshot's batch) that lowers the txn version (RESTORE does not
reset it). docs/compatibility.md (Sinks) has the details.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO, SHUFFLE_PARTITIONS, delta_jars

pytestmark = pytest.mark.spark

PLAIN = REPO / "tests" / "data" / "plain" / "delta_sink.py"
# The message of the error Spark logs when the query stops (MicroBatchExecution), then the
# frames under it: the constructor Delta 4.4.0 calls, with Spark 4.2's 9 parameters.
FAILURE = re.compile(
    r"terminated with error\n"
    r"java\.lang\.NoSuchMethodError: 'void org\.apache\.spark\.sql\.execution\.LogicalRDD"
    r"\.<init>\((?P<params>[^)]*)\)'\n(?P<frames>(?:\tat .*\n)+)")


def _write_input(directory: Path, index: int) -> None:
    """File ``index``: one row; the files' modification times order them for the source."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"part-{index}.json"
    path.write_text(json.dumps({"id": index, "k": f"b{index}"}) + "\n")
    os.utime(path, (1_700_000_000 + index, 1_700_000_000 + index))


def _log_actions(table: Path, version: int) -> list[dict[str, dict[str, object]]]:
    lines = (table / "_delta_log" / f"{version:020d}.json").read_text().splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def test_delta_4_4_sink_commits_its_first_batch_and_fails_its_second(tmp_path: Path) -> None:
    inp, table, checkpoint = tmp_path / "in", tmp_path / "table", tmp_path / "ckpt"
    _write_input(inp, 0)
    _write_input(inp, 1)
    # Spark's defaults but for local[2], few shuffle partitions and loopback; Delta's jars,
    # SQL extension and catalog as Delta's documentation gives them.
    conf = {"spark.driver.host": "127.0.0.1", "spark.driver.bindAddress": "127.0.0.1",
            "spark.ui.enabled": "false", "spark.sql.shuffle.partitions": SHUFFLE_PARTITIONS,
            "spark.jars": delta_jars(),
            "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
            "spark.sql.catalog.spark_catalog":
                "org.apache.spark.sql.delta.catalog.DeltaCatalog"}
    command = [str(Path(sys.executable).parent / "spark-submit"), "--master", "local[2]"]
    for key, value in conf.items():
        command += ["--conf", f"{key}={value}"]
    done = subprocess.run([*command, str(PLAIN), str(inp), str(table), str(checkpoint)],
                          capture_output=True, text=True, timeout=600,
                          env=dict(os.environ, PYSPARK_PYTHON=sys.executable))

    # Batch 1 failed in Delta's sink, on the constructor Spark 4.3 no longer has.
    assert done.returncode == 1, done.stderr[-3000:]
    failure = FAILURE.search(done.stderr)
    assert failure, done.stderr[-6000:]
    assert len(failure["params"].split(",")) == 9, failure["params"]
    frames = failure["frames"]
    assert "org.apache.spark.sql.delta.util.StateCache$CachedDS" in frames, frames
    assert "org.apache.spark.sql.delta.OptimisticTransactionImpl.txnVersion" in frames, frames
    assert "org.apache.spark.sql.delta.sources.DeltaSink.addBatch" in frames, frames

    # Batch 0 is committed, in Spark's checkpoint and in the table (version 0, with the
    # query's transaction); batch 1 is planned and written nowhere.
    query_id = json.loads((checkpoint / "metadata").read_text())["id"]
    assert sorted(p.name for p in (checkpoint / "offsets").iterdir()
                  if not p.name.startswith(".")) == ["0", "1"]
    assert sorted(p.name for p in (checkpoint / "commits").iterdir()
                  if not p.name.startswith(".")) == ["0"]
    assert sorted(p.name for p in (table / "_delta_log").glob("*.json")) == [f"{0:020d}.json"]
    actions = _log_actions(table, 0)
    commit = next(a["commitInfo"] for a in actions if "commitInfo" in a)
    assert commit["operation"] == "STREAMING UPDATE"
    assert commit["operationParameters"] == {"outputMode": "Append", "queryId": query_id,
                                             "epochId": "0"}
    assert commit["engineInfo"] == "Apache-Spark/4.3.0 Delta-Lake/4.4.0"
    assert [(a["txn"]["appId"], a["txn"]["version"]) for a in actions if "txn" in a] == [
        (query_id, 0)]
    adds = [a["add"] for a in actions if "add" in a]
    stats = json.loads(str(adds[0]["stats"])) if len(adds) == 1 else None
    assert stats and stats["numRecords"] == 1 and stats["minValues"]["id"] == 0, adds
