"""Which recorded settings make a snapshot's state unusable to sparkpoint, read from a real
Spark 4.3 offsets entry (tests/data/golden-hdfs) with one setting changed at a time; which
state encodings can go into one new query."""

from __future__ import annotations

from pathlib import Path

import pytest

from sparkpoint.checkpoint.layout import Checkpoint
from sparkpoint.snapshot.manifest import Manifest
from sparkpoint.upgrade.validate import (
    OperatorRow,
    snapshot_format_problems,
    state_encoding_problems,
)

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


def _operator(name: str, kind: str, action: str = "resume") -> OperatorRow:
    return OperatorRow(name=name, action=action, origin=None, compatible=True, reason="",
                       operator_id=0, kind=kind)


ENCODING = "spark.sql.streaming.stateStore.encodingFormat"
STATEFUL = _operator("counts", "transform_with_state")


def test_avro_state_of_transform_with_state_is_resumed_as_it_is() -> None:
    assert snapshot_format_problems("s", MANIFEST, {**RECORDED, ENCODING: "avro"}, "4.3.0",
                                    True) == []
    assert state_encoding_problems({"s": "avro"}, [STATEFUL], None) == []
    assert state_encoding_problems({"s": "avro"}, [STATEFUL], "AVRO") == []
    assert state_encoding_problems({"s": "unsaferow", "t": "unsaferow"}, [STATEFUL], None) == []


def test_state_encodings_that_cannot_share_a_query_are_refused() -> None:
    mixed = state_encoding_problems({"s": "avro", "t": "unsaferow"}, [STATEFUL], None)
    assert len(mixed) == 1 and "different state encodings" in mixed[0]
    assert f"({ENCODING}: s: avro, t: unsaferow)" in mixed[0]
    beside = state_encoding_problems(
        {"s": "avro"}, [STATEFUL, _operator("seen", "dedupe"),
                        _operator("gone", "aggregation", action="drop")], None)
    assert len(beside) == 1 and beside[0].startswith("operator 'seen' (dedupe) would run")
    asked = state_encoding_problems({"s": "avro"}, [STATEFUL], "unsaferow")
    assert len(asked) == 1 and f"asks {ENCODING}=unsaferow" in asked[0]
    unknown = state_encoding_problems({"s": "protobuf"}, [STATEFUL], None)
    assert len(unknown) == 1 and f"{ENCODING}=protobuf; expected unsaferow or avro" in unknown[0]
