"""The checkpoint layer reads every log file kind of real Spark checkpoints and writes them
back byte for byte; it refuses versions and shapes it does not know, naming the file."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sparkpoint.checkpoint.layout import Checkpoint
from sparkpoint.checkpoint.logs import (
    CommitLogEntry,
    OffsetLogEntry,
    QueryMetadata,
    SourceOffset,
)
from sparkpoint.checkpoint.operators import OperatorMetadata, StateSchemaFile, schema_ddl
from sparkpoint.checkpoint.providers import ROCKSDB
from sparkpoint.errors import CheckpointFormatError

DATA = Path(__file__).resolve().parent.parent / "data"
GOLDEN = [DATA / "golden-rocks", DATA / "golden-hdfs"]


def _files(root: Path, sub: str) -> list[Path]:
    return sorted(p for p in (root / sub).iterdir() if p.name.isdigit())


@pytest.mark.parametrize("root", GOLDEN, ids=lambda p: p.name)
def test_every_log_file_round_trips_byte_exact(root: Path) -> None:
    checked = 0
    for path in _files(root, "offsets"):
        data = path.read_bytes()
        assert OffsetLogEntry.parse(data, str(path)).to_bytes() == data
        checked += 1
    for path in _files(root, "commits"):
        data = path.read_bytes()
        assert CommitLogEntry.parse(data, str(path)).to_bytes() == data
        checked += 1
    data = (root / "metadata").read_bytes()
    assert QueryMetadata.parse(data, "metadata").to_bytes() == data
    for path in sorted(root.glob("state/*/_metadata/metadata")):
        data = path.read_bytes()
        assert OperatorMetadata.parse(data, str(path)).to_bytes() == data
        checked += 1
    for path in sorted(root.glob("state/*/0/_metadata/schema")):
        data = path.read_bytes()
        assert StateSchemaFile.parse(data, str(path)).to_bytes() == data
        checked += 1
    assert checked >= 10


def test_offsets_v2_names_sources_and_exposes_watermark_and_conf() -> None:
    ckpt = Checkpoint(GOLDEN[0])
    batch = ckpt.require_latest_committed_batch()
    entry = ckpt.offsets(batch)
    assert entry.version == 2
    assert entry.source_offsets() == {"clicks": '{"logOffset":1}'}
    assert entry.conf["spark.sql.shuffle.partitions"] == "2"
    assert ckpt.state_provider(batch) is ROCKSDB
    assert Checkpoint(GOLDEN[1]).state_provider(batch) is not ROCKSDB
    assert ckpt.commit(batch).next_batch_watermark_ms == entry.batch_watermark_ms


def test_operators_and_schemas_of_a_dedupe_feeding_an_aggregation() -> None:
    operators = {op.operator_id: op for op in Checkpoint(GOLDEN[0]).operators()}
    assert operators[0].operator_name == "stateStoreSave"
    assert operators[1].operator_name == "dedupe"
    assert operators[0].metadata.num_partitions == 2
    store = operators[0].stores()[0]
    schema = operators[0].schema(store)
    assert schema is not None
    key = schema_ddl(schema.key_schema)
    assert key == "window struct<start: timestamp, end: timestamp>, user string"
    assert schema_ddl(schema.value_schema) == "count long"


def test_operator_id_patch_changes_only_the_id() -> None:
    path = GOLDEN[0] / "state/1/_metadata/metadata"
    meta = OperatorMetadata.parse(path.read_bytes(), str(path))
    moved = meta.with_operator_id(7)
    assert moved.operator_id == 7
    assert moved.operator_name == meta.operator_name
    assert moved.stores == meta.stores
    assert moved.to_bytes() == path.read_bytes().replace(b'"operatorId":1', b'"operatorId":7')


@pytest.mark.parametrize(
    ("data", "fragment"),
    [
        (b"v9\n{}\n", "v9 is not supported"),
        (b"hello", "expected a version header"),
        (b"v1\n{not json", "invalid JSON"),
        (b"v2\n{}\nnocolon", "<source name>:<offset>"),
    ],
)
def test_bad_offsets_are_refused_naming_the_file(data: bytes, fragment: str) -> None:
    with pytest.raises(CheckpointFormatError) as info:
        OffsetLogEntry.parse(data, "/ck/offsets/3")
    assert "/ck/offsets/3" in str(info.value)
    assert fragment in str(info.value)


def test_truncated_schema_file_is_refused() -> None:
    path = GOLDEN[0] / "state/0/0/_metadata/schema"
    with pytest.raises(CheckpointFormatError, match="schema"):
        StateSchemaFile.parse(path.read_bytes()[:40], str(path))


_json_scalar = st.one_of(st.integers(), st.text(max_size=8), st.booleans())
_offset_json = st.dictionaries(st.text("abc_", min_size=1, max_size=6), _json_scalar, max_size=3)


@given(
    st.lists(
        st.tuples(st.from_regex(r"[a-z][a-z0-9_]{0,8}", fullmatch=True),
                  st.one_of(st.none(), _offset_json)),
        max_size=4,
    ),
    st.integers(min_value=0, max_value=2**45),
)
def test_offsets_v2_round_trip(
    sources: list[tuple[str, dict[str, object] | None]], wm: int
) -> None:
    import json

    entry = OffsetLogEntry(
        2,
        json.dumps({"batchWatermarkMs": wm, "batchTimestampMs": 1, "conf": {}},
                   separators=(",", ":")),
        tuple(SourceOffset(name, None if off is None else json.dumps(off, separators=(",", ":")))
              for name, off in sources),
    )
    again = OffsetLogEntry.parse(entry.to_bytes(), "x")
    assert again == entry
    assert again.batch_watermark_ms == wm


@pytest.mark.parametrize("root", GOLDEN, ids=lambda p: p.name)
def test_file_source_log_round_trips_and_lists_input_files(root: Path) -> None:
    from sparkpoint.checkpoint.source_log import FileSourceLogEntry, file_source_log_offset

    entries = sorted((root / "sources" / "clicks").iterdir())
    assert entries
    for path in entries:
        data = path.read_bytes()
        entry = FileSourceLogEntry.parse(data, str(path))
        assert entry.to_bytes() == data
        assert all(f["path"].startswith("file:///") for f in entry.files)
        assert all(f["batchId"] == int(path.name) for f in entry.files)
    assert file_source_log_offset('{"logOffset":7}') == 7
    assert file_source_log_offset('{"topic":{"0":1}}') is None
    assert file_source_log_offset(None) is None


def test_named_offsets_tell_spark_to_read_sources_by_name() -> None:
    """Spark 4.3 restores enableSourceEvolution from the newest offsets entry (absent there:
    "false") and under "false" keys sources by position: offsets under names would match no
    source, and every source would start again from its beginning."""
    from sparkpoint.checkpoint.logs import SOURCE_EVOLUTION_CONF, OffsetLogEntry
    from sparkpoint.snapshot.export import named_offsets

    plain = OffsetLogEntry.parse(
        b'v1\n{"batchWatermarkMs":0,"batchTimestampMs":1,"conf":{"'
        + SOURCE_EVOLUTION_CONF.encode() + b'":"false","spark.sql.shuffle.partitions":"200"}}'
        b'\n{"logOffset":3}', "offsets/3")
    named = OffsetLogEntry.parse(named_offsets(plain, {"0": "lines"}).to_bytes(), "named")
    assert named.version == 2
    assert named.source_offsets() == {"lines": '{"logOffset":3}'}
    assert named.conf == {SOURCE_EVOLUTION_CONF: "true", "spark.sql.shuffle.partitions": "200"}
    assert named.metadata["sourceMetadataInfo"] == {}
