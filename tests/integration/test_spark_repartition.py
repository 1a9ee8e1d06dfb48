"""Spark 4.3's own offline state repartition (``StreamingCheckpointManager.repartition``, the
``OfflineStateRepartitionRunner``) on a plain checkpoint, then sparkpoint on what it wrote.

The runner adds a batch of its own (offsets and commit copied from the last batch, only the
recorded partition count changed), marked by nothing but that count: it reads no input and
the file sink never sees it. sparkpoint must treat it as that everywhere it reads a
checkpoint: import, start from the snapshot, drain, and the sink's history."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from sparkpoint import api
from sparkpoint.checkpoint.layout import Checkpoint
from sparkpoint.storage.home import Home
from sparkpoint.testing import output_rows
from tests.integration.test_adopt_plain_spark import (
    JOB,
    PLAIN,
    ROCKSDB_4,
    expected_counts,
    spark_submit,
    write_lines,
)

pytestmark = pytest.mark.spark
SHUFFLE = "spark.sql.shuffle.partitions"


def _keys_by_partition(spark: object, checkpoint: Path) -> dict[int, set[tuple[object, ...]]]:
    """Spark's own state reader: the keys each state partition holds."""
    rows = spark.read.format("statestore").load(str(checkpoint)).collect()  # type: ignore[attr-defined]
    found: dict[int, set[tuple[object, ...]]] = {}
    for row in rows:
        found.setdefault(row.partition_id, set()).add(tuple(row.key))
    return found


def test_a_checkpoint_repartitioned_by_spark_is_imported_continued_and_drained(
    spark: object, home: Home, tmp_path: Path
) -> None:
    inp, plain_out, ckpt = tmp_path / "in", tmp_path / "plain-out", tmp_path / "ckpt"
    lines = write_lines(inp, 0) + write_lines(inp, 1)
    spark_submit(PLAIN, str(inp), str(plain_out), str(ckpt), conf=ROCKSDB_4)
    before = Checkpoint(ckpt)
    last = before.require_latest_committed_batch()
    keys = set().union(*_keys_by_partition(spark, ckpt).values())

    # Spark's runner, as a user calls it from PySpark (Spark Classic).
    spark._jsparkSession.streamingCheckpointManager().repartition(  # type: ignore[attr-defined]
        str(ckpt), 3, True)
    after = Checkpoint(ckpt)
    control = after.require_latest_committed_batch()
    assert control == last + 1
    assert after.offsets(control).conf[SHUFFLE] == "3"
    assert after.offsets(control).sources == before.offsets(last).sources
    by_partition = _keys_by_partition(spark, ckpt)
    assert set(by_partition) == {0, 1, 2} and set().union(*by_partition.values()) == keys

    window, slide = dt.timedelta(minutes=10), dt.timedelta(minutes=5)
    # Into the same output: its sink log lacks the control batch, which the file sink never
    # saw, and Spark's readers and compaction need every batch id.
    params = {"input": str(inp), "output": str(plain_out), "files_per_batch": "2"}
    api.snapshot_import(home, ckpt, "adopted", JOB, params=params,
                        spark=spark)  # type: ignore[arg-type]
    shown = api.snapshot_show(home, "adopted")
    assert (shown.batch_id, shown.shuffle_partitions) == (control, 3)
    lines += write_lines(inp, 2) + write_lines(inp, 3)
    api.run(home, JOB, "adopted", params=params, conf={SHUFFLE: "3"}, from_snapshot="adopted",
            until_caught_up=True, spark=spark)  # type: ignore[arg-type]
    combined = output_rows(spark, plain_out)  # type: ignore[arg-type]
    assert combined == expected_counts(lines, window, slide)

    # Drained: every window still open is emitted, each once.
    api.drain(home, "adopted", spark=spark)  # type: ignore[arg-type]
    combined = output_rows(spark, plain_out)  # type: ignore[arg-type]
    # A line a day later moves the watermark past every window of the real ones, and its
    # own windows end after it: every window of the input, nothing else.
    later = (max(ts for ts, _ in lines) + dt.timedelta(days=1), "zzz")
    assert combined == expected_counts([*lines, later], window, slide)
