"""The pieces of state migrations that need no Spark: keys encoded as Spark's RocksDB
provider stores them (the inverse of the reader's decoding), the refusals `plan` gives for
state one of the providers cannot hold, and which schema changes are widenings."""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

import pytest

from sparkpoint.aggregates import AggregateState, BufferColumn
from sparkpoint.checkpoint.providers import HDFS_BACKED, ROCKSDB
from sparkpoint.checkpoint.rocksdb_keys import KeyEncoding, encode_value
from sparkpoint.checkpoint.unsafe_row import split_row
from sparkpoint.upgrade.migration_rules import (
    STATE_COLUMNS,
    AggregateMove,
    GroupMerge,
    aggregate_move,
    column_labels,
    declared_value,
    dedupe_projection,
    group_merge,
    join_value_changes,
    store_widenings,
    widens,
)
from sparkpoint.upgrade.provider_move import move_problems

FIELDS: list[dict[str, Any]] = [
    {"name": "user", "type": "string"},
    {"name": "start", "type": "timestamp"},
    {"name": "tag", "type": "string"},
]
HERE = Path("state/0/0")


def unsafe_row(values: list[Any]) -> bytes:
    """An UnsafeRow written field by field as Spark's UnsafeRowWriter lays it out: a null
    bitset, one 8-byte slot per field, variable-length bytes after the slots padded to 8."""
    count = len(values)
    bitset_len = ((count + 63) // 64) * 8
    nulls, slots, tail = 0, b"", b""
    for index, value in enumerate(values):
        if value is None:
            nulls |= 1 << index
            slots += bytes(8)
        elif isinstance(value, bytes):
            offset = bitset_len + 8 * count + len(tail)
            slots += struct.pack("<q", offset << 32 | len(value))
            tail += value + bytes(-len(value) % 8)
        else:
            slots += struct.pack("<q", value)
    return nulls.to_bytes(bitset_len, "little") + slots + tail


def test_a_row_splits_into_the_rows_of_its_first_columns_and_the_rest() -> None:
    row = unsafe_row([b"ana-with-a-long-name", 1_700_000_000_000_000, None])
    first, rest = split_row(row, FIELDS, 1)
    assert first == unsafe_row([b"ana-with-a-long-name"])
    assert rest == unsafe_row([1_700_000_000_000_000, None])


def test_a_plain_key_and_value_get_the_encoding_version_byte() -> None:
    key = unsafe_row([b"bo", 5, b"x"])
    encoding = KeyEncoding()
    assert encoding.encode(key, HERE) == b"\x00" + key
    assert encoding.decode(encoding.encode(key, HERE), HERE) == key
    assert encode_value(key) == b"\x00" + key


def test_a_session_key_is_laid_out_for_prefix_scans_and_decodes_back() -> None:
    key = unsafe_row([b"cy", 7_000, b"tag-of-some-length"])
    encoding = KeyEncoding(prefix_columns=1, key_fields=tuple(FIELDS))
    stored = encoding.encode(key, HERE)
    prefix = unsafe_row([b"cy"])
    rest = unsafe_row([7_000, b"tag-of-some-length"])
    # [int32 little-endian: version byte + prefix row][0][prefix row][0][rest row]
    assert stored == (len(prefix) + 1).to_bytes(4, "little") + b"\x00" + prefix + b"\x00" + rest
    assert encoding.decode(stored, HERE) == key


def test_keys_of_one_group_share_the_stored_prefix_rocksdb_scans_by() -> None:
    encoding = KeyEncoding(prefix_columns=1, key_fields=tuple(FIELDS))
    one = encoding.encode(unsafe_row([b"dee", 1, b"a"]), HERE)
    other = encoding.encode(unsafe_row([b"dee", 99, b"bbbbbbbbbbbb"]), HERE)
    shared = 4 + 1 + len(unsafe_row([b"dee"]))
    assert one[:shared] == other[:shared]


@pytest.mark.parametrize(("conf", "kinds", "asked_format", "found"), [
    ({}, {"counts": "stateStoreSave"}, None, []),
    ({}, {"tws": "transformWithStateExec"}, None,
     ["operator 'tws': moving the state from the RocksDB provider to HDFS-backed: expected "
      "operators whose state both providers hold, found transformWithStateExec"]),
    ({"spark.sql.streaming.stateStore.encodingFormat": "avro"}, {}, None,
     ["expected state in Spark's UnsafeRow encoding, found "
      "spark.sql.streaming.stateStore.encodingFormat=avro"]),
    ({"spark.sql.streaming.stateStore.compressionCodec": "zstd"}, {}, None,
     ["expected state files compressed with lz4"]),
    ({}, {}, 2, ["expected checkpoint format v1 for the move"]),
])
def test_state_one_provider_cannot_hold_is_refused_by_name(
    conf: dict[str, str], kinds: dict[str, str], asked_format: int | None, found: list[str]
) -> None:
    problems = move_problems(ROCKSDB, HDFS_BACKED, conf, kinds, asked_format)
    assert len(problems) == len(found)
    for problem, expected in zip(problems, found, strict=True):
        assert expected in problem


def test_no_move_no_problem() -> None:
    assert move_problems(ROCKSDB, ROCKSDB, {"spark.sql.streaming.stateStore.encodingFormat":
                                            "avro"}, {"t": "transformWithStateExec"}, 2) == []


@pytest.mark.parametrize(("old", "new", "widened"), [
    ("integer", "long", True), ("byte", "short", True), ("short", "long", True),
    ("float", "double", True), ("decimal(10,2)", "decimal(12,2)", True),
    ("decimal(10,2)", "decimal(12,4)", True),
    ("long", "integer", False), ("double", "float", False), ("integer", "double", False),
    ("decimal(10,2)", "decimal(10,3)", False), ("decimal(10,2)", "decimal(10,2)", False),
    ("string", "long", False), ({"type": "struct", "fields": []}, "long", False),
])
def test_only_casts_that_keep_every_value_are_widenings(old: Any, new: Any,
                                                        widened: bool) -> None:
    assert widens(old, new) is widened


def _struct(*fields: tuple[str, Any]) -> dict[str, Any]:
    return {"type": "struct", "fields": [{"name": n, "type": t, "nullable": True,
                                          "metadata": {}} for n, t in fields]}


def test_a_store_is_migrated_only_when_every_difference_is_a_widening() -> None:
    key = _struct(("window", _struct(("start", "timestamp"), ("end", "timestamp"))),
                  ("user_id", "integer"))
    wide_key = _struct(("window", _struct(("start", "timestamp"), ("end", "timestamp"))),
                       ("user_id", "long"))
    value = _struct(("count", "long"), ("max", "integer"))
    assert store_widenings(key, value, key, value) == []
    assert store_widenings(key, value, wide_key, _struct(("count", "long"), ("max", "long"))) \
        == ["key column user_id: integer -> long (widened by Spark's cast; keys placed in the "
            "partitions Spark's hash gives them)",
            "value column max: integer -> long (widened by Spark's cast)"]
    # Renamed, added, narrowed: not a widening.
    assert store_widenings(key, value, _struct(("user", "long")), value) is None
    assert store_widenings(key, value, key, _struct(("count", "long"), ("max", "integer"),
                                                    ("sum", "long"))) is None
    assert store_widenings(wide_key, value, key, value) is None


def _agg(function: str, *buffer: tuple[str, str], initial: tuple[str, ...] | None = ("x",),
         ) -> AggregateState:
    return AggregateState(function=function, initial=initial, buffer=tuple(
        BufferColumn(name=n, type=t) for n, t in buffer))


COUNT = _agg("count(1)", ("count", "long"), initial=("0L",))
AVG = _agg("avg(n)", ("sum", "double"), ("count", "long"), initial=("0.0D", "0L"))
MAX = _agg("max(ts)", ("max", "timestamp"), initial=("CAST(NULL AS TIMESTAMP)",))


def _value(*aggregates: AggregateState) -> dict[str, Any]:
    return _struct(*[(c.name, c.type) for a in aggregates for c in a.buffer])


def test_aggregates_added_removed_and_reordered_take_their_columns_by_function() -> None:
    move = aggregate_move((COUNT, AVG), (MAX, AVG), _value(COUNT, AVG), _value(MAX, AVG), 7)
    assert isinstance(move, AggregateMove)
    # max starts at its initial value; avg's two columns come from old positions 1 and 2.
    assert move.old_column == (None, 1, 2)
    assert move.initial == ("CAST(NULL AS TIMESTAMP)", None, None)
    assert move.changes == (
        "aggregate max(ts) added: starts as if it had seen no row before the switch "
        "(CAST(NULL AS TIMESTAMP)) in each of the 7 keys",
        "aggregate count(1) removed: its state is dropped")
    reordered = aggregate_move((COUNT, AVG), (AVG, COUNT), _value(COUNT, AVG),
                               _value(AVG, COUNT), None)
    assert isinstance(reordered, AggregateMove)
    assert reordered.old_column == (1, 2, 0)
    assert reordered.changes == ("aggregates reordered: avg(n), count(1)",)


def test_a_kept_aggregate_whose_buffer_widens_is_named_beside_the_added_one() -> None:
    """An id outgrowing int and a sum added in one start: plan names both changes of the
    value, not only the aggregate added."""
    top_int = _agg("max(score)", ("max", "integer"), initial=("CAST(NULL AS INT)",))
    top_long = _agg("max(score)", ("max", "long"), initial=("CAST(NULL AS BIGINT)",))
    total = _agg("sum(score)", ("sum", "long"), initial=("CAST(NULL AS BIGINT)",))
    move = aggregate_move((COUNT, top_int), (COUNT, top_long, total), _value(COUNT, top_int),
                          _value(COUNT, top_long, total), 5)
    assert isinstance(move, AggregateMove)
    assert move.old_column == (0, 1, None)
    assert move.changes == (
        "value column max: integer -> long (widened by Spark's cast)",
        "aggregate sum(score) added: starts as if it had seen no row before the switch "
        "(CAST(NULL AS BIGINT)) in each of the 5 keys")


def test_aggregate_changes_that_cannot_be_migrated_are_named() -> None:
    listed = _agg("collect_list(n)", ("buf", "binary"), initial=None)
    assert aggregate_move((COUNT,), (COUNT, listed), _value(COUNT), _value(COUNT, listed),
                          1) == ("aggregate collect_list(n) added: its buffer is an object "
                                 "Spark serializes, with no initial value to start it from")
    narrowed = _agg("count(1)", ("count", "integer"))
    assert "changed type from long to integer" in str(
        aggregate_move((COUNT, AVG), (narrowed,), _value(COUNT, AVG), _value(narrowed), 1))
    # A value whose leading columns differ from the new one's is not moved.
    assert "does not end with" in str(aggregate_move((COUNT,), (MAX,), _struct(
        ("k", "string"), ("count", "long")), _value(MAX), 1))


def test_a_value_holding_the_whole_row_keeps_its_leading_columns() -> None:
    """A session window's state value is its whole row: the keys and the session, then the
    buffers."""
    lead = (("sessionId", "string"), ("session", _struct(("start", "timestamp"),
                                                         ("end", "timestamp"))))
    old = _struct(*lead, ("count", "long"))
    new = _struct(*lead, ("count", "long"), ("max", "timestamp"))
    move = aggregate_move((COUNT,), (COUNT, MAX), old, new, 3)
    assert isinstance(move, AggregateMove)
    assert move.old_column == (0, 1, 2, None)
    assert move.initial == (None, None, None, "CAST(NULL AS TIMESTAMP)")
    # Unknown or unchanged functions: nothing to say here.
    assert aggregate_move(None, (COUNT,), _value(COUNT), _value(COUNT), 1) is None
    assert aggregate_move((COUNT,), (COUNT,), _value(COUNT), _value(COUNT), 1) is None


def test_a_dedupe_losing_key_columns_is_projected_and_collapsed() -> None:
    old = _struct(("event_id", "integer"), ("ts", "timestamp"), ("source", "string"))
    assert dedupe_projection("dedupe", old, _struct(("event_id", "long"), ("source", "string"))) \
        == ["key columns ts removed: keys projected onto (event_id, source), keys that become "
            "equal collapsed into one (the latest expiry kept)",
            "key column event_id: integer -> long (widened by Spark's cast; keys placed in the "
            "partitions Spark's hash gives them)"]
    # Reordered, renamed, nothing removed, or not a dedupe: not this change.
    assert dedupe_projection("dedupe", old, _struct(("source", "string"),
                                                    ("event_id", "integer"))) is None
    assert dedupe_projection("dedupe", old, _struct(("id", "integer"))) is None
    assert dedupe_projection("dedupe", old, old) is None
    assert dedupe_projection("stateStoreSave", old, _struct(("event_id", "integer"))) is None


def test_repeated_column_names_get_labels_and_state_reader_names_are_avoided() -> None:
    assert column_labels(_struct(("sum", "double"), ("count", "long"), ("count", "long"),
                                 ("value", "long"))) == ["sum", "count", "count_2", "value"]
    assert column_labels(_struct(("value", "long")), STATE_COLUMNS) == ["value_2"]


def test_declared_columns_others_by_name_and_what_is_left_undefined() -> None:
    key = _struct(("user", "string"))
    old = _struct(("count", "long"), ("max", "integer"))
    new = _struct(("count", "long"), ("max", "long"), ("sum", "double"))
    found = declared_value(key, old, new, {"sum": "count * 2.5"}, None, "state.t.set")
    assert found.columns == ("`count`", "`max`", "(count * 2.5)")
    assert found.changes == ("value column sum set to count * 2.5",)
    assert found.problems == ()
    missing = declared_value(key, old, new, {"total": "1"}, None, "state.t.set")
    assert missing.problems == (
        "state.t.set.total: the new state has no column 'total' (its columns: count, max, sum)",
        "state.t.set: the new state's column sum (double) is not defined: add sum: <SQL over "
        "the old state's columns: user, count, max>")


def test_groups_that_become_one_are_merged_by_each_functions_own_merge() -> None:
    count = COUNT.model_copy(update={"merge": ("(__left_0 + __right_0)",)})
    avg = AVG.model_copy(update={"merge": ("(__left_0 + __right_0)", "(__left_1 + __right_1)")})
    key = _struct(("window", "string"), ("user", "string"))
    merged = group_merge("stateStoreSave", key, _struct(("window", "string")), (count, avg),
                         (count, avg))
    assert isinstance(merged, GroupMerge)
    # The average's columns come after the count's: positions 1 and 2 of the value.
    assert merged.merges == ("(acc.c0 + x.c0)", "(acc.c1 + x.c1)", "(acc.c2 + x.c2)")
    listed = _agg("collect_list(n)", ("buf", "binary"), initial=None)
    assert "has no merge" in str(group_merge("stateStoreSave", key, _struct(
        ("window", "string")), (count, listed), (count, listed)))
    assert "snapshot the old job again" in str(group_merge(
        "stateStoreSave", key, _struct(("window", "string")), None, (count,)))
    # Not a grouping column removed: nothing to say.
    assert group_merge("stateStoreSave", key, key, (count,), (count,)) is None
    assert group_merge("dedupe", key, _struct(("window", "string")), None, None) is None


def test_a_joins_buffered_rows_gain_and_lose_columns_by_name() -> None:
    key = _struct(("adId", "long"))
    indexed = _struct(("adId", "long"), ("index", "long"))
    old = {"left-keyToNumValues": (key, _struct(("value", "long"))),
           "left-keyWithIndexToValue": (indexed, _struct(("adId", "long"), ("t", "timestamp"),
                                                         ("matched", "boolean")))}
    new = {**old, "left-keyWithIndexToValue": (indexed, _struct(
        ("adId", "long"), ("hour", "integer"), ("matched", "boolean")))}
    assert join_value_changes("symmetricHashJoin", old, new) == [
        "left-keyWithIndexToValue: value column hour added (the rows buffered before the "
        "switch get null)",
        "left-keyWithIndexToValue: value column t removed"]
    assert join_value_changes("symmetricHashJoin", old, old) is None
    # A changed key, or a changed count store, is not this change.
    rekeyed = {**old, "left-keyToNumValues": (_struct(("adId", "string")),
                                              _struct(("value", "long")))}
    assert join_value_changes("symmetricHashJoin", old, rekeyed) is None
    assert join_value_changes("stateStoreSave", old, new) is None
