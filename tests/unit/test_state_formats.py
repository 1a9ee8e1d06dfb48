"""Which recorded settings make a snapshot's state unusable to sparkpoint, read from a real
Spark 4.3 offsets entry (tests/data/golden-hdfs) with one setting changed at a time."""

from __future__ import annotations

from pathlib import Path

import pytest

from sparkpoint.checkpoint.layout import Checkpoint
from sparkpoint.snapshot.manifest import Manifest
from sparkpoint.upgrade.validate import snapshot_format_problems

GOLDEN = Checkpoint(Path(__file__).resolve().parent.parent / "data" / "golden-hdfs")
RECORDED = GOLDEN.offsets(3).conf
MANIFEST = Manifest(name="s", job="j", created_at="2026-01-01T00:00:00Z", batch_id=3,
                    spark_version="4.3.0", state_store_provider="p", shuffle_partitions=2,
                    query_id="q", watermark_ms=0, job_file=None, params={}, sources=[],
                    operators=[], files=[], total_bytes=0)


def test_what_spark_records_by_default_is_decoded() -> None:
    assert RECORDED["spark.sql.streaming.stateStore.encodingFormat"] == "unsaferow"
    assert RECORDED["spark.sql.streaming.stateStore.rowChecksum.enabled"] == "false"
    assert RECORDED["spark.sql.streaming.stateStore.compression.codec"] == "lz4"
    assert snapshot_format_problems("s", MANIFEST, RECORDED, "4.3.0", True) == []
    # Settings absent from an older entry have Spark's defaults.
    assert snapshot_format_problems("s", MANIFEST, {}, "4.3.0", True) == []


@pytest.mark.parametrize(("setting", "value", "refused"), [
    ("spark.sql.streaming.stateStore.encodingFormat", "avro", True),
    ("spark.sql.streaming.stateStore.rowChecksum.enabled", "true", True),
    ("spark.sql.streaming.stateStore.compression.codec", "zstd", True),
    ("spark.sql.streaming.stateStore.compression.codec", "snappy", True),
    ("spark.sql.streaming.stateStore.compression.codec", "org.apache.spark.io.LZ4CompressionCodec",
     False),
    ("spark.sql.streaming.stateStore.compression.codec", "LZ4", False),
])
def test_settings_sparkpoint_does_not_decode(setting: str, value: str, refused: bool) -> None:
    conf = {**RECORDED, setting: value}
    problems = snapshot_format_problems("s", MANIFEST, conf, "4.3.0", True)
    assert bool(problems) == refused
    if refused:
        assert len(problems) == 1 and f"{setting}={value}" in problems[0]
    # Offsets alone do not depend on how state is encoded.
    assert snapshot_format_problems("s", MANIFEST, conf, "4.3.0", False) == []


def test_another_spark_version_is_refused_even_for_offsets_only() -> None:
    problems = snapshot_format_problems("s", MANIFEST, RECORDED, "4.4.0", False)
    assert problems == ["snapshot 's' was taken with Spark 4.3.0, this is Spark 4.4.0: "
                        "checkpoint and state formats differ between Spark versions; start "
                        "from a snapshot taken with Spark 4.4.0, or run the job with Spark "
                        "4.3.0"]
