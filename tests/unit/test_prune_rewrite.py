"""A prune's rewrite of one HDFS-provider partition: the version without the selected keys,
as one snapshot file. Keys of one width are found with numpy by a hash of their words, then
compared byte for byte; the result must be exactly what removing them from the loaded state
gives, keys whose hashes collide and keys ending in zero bytes included, whether the keys
come as bytes or as a Spark task hands them over (rows of Arrow's buffer)."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sparkpoint.checkpoint.hdfs_state import (
    FixedState,
    files_for_version,
    load_version,
    without_fixed_keys,
    write_records,
)
from sparkpoint.snapshot.prune import _rewrite_hdfs_partition
from sparkpoint.spark.state_prune import _key_rows
from tests.unit.test_hdfs_state import _colliding_keys

# Keys that differ only in their trailing zero bytes, an all-zero key, and two keys whose
# hashes collide.
_KEYS = [b"k1".ljust(16, b"\0"), b"k1\0\0".ljust(16, b"\1"), b"k".ljust(16, b"\0"),
         bytes(16), b"k2".ljust(16, b"\0"), *_colliding_keys()]
_PUT = st.tuples(st.sampled_from(_KEYS), st.sampled_from([b"v" * 8, bytes(8)]))
_DELTA = st.lists(st.one_of(_PUT, st.tuples(st.sampled_from(_KEYS), st.none())), max_size=6)


@settings(max_examples=100, deadline=None)
@given(st.lists(_DELTA, min_size=1, max_size=4),
       st.lists(st.sampled_from([*_KEYS, b"k1", b"x" * 24])),
       st.booleans(), st.integers(0, 3))
def test_rewrite_removes_exactly_the_selected_keys(
    tmp_path_factory: pytest.TempPathFactory, deltas: list[list[tuple[bytes, bytes | None]]],
    selected: list[bytes], variable_width: bool, arrow_chunks: int,
) -> None:
    partition = tmp_path_factory.mktemp("p")
    if variable_width:  # a record of another width: the generic path
        deltas = [[*deltas[0], (b"short", b"v")], *deltas[1:]]
    for version, records in enumerate(deltas, start=1):
        (partition / f"{version}.delta").write_bytes(write_records(records))
    version = len(deltas)
    expected = load_version(partition, version)
    removed = sum(1 for key in set(selected) if expected.pop(key, None) is not None)
    # As a task gets them: Arrow chunks (none: the bytes themselves).
    keys = _key_rows(_chunked(selected, arrow_chunks)) if arrow_chunks else selected

    assert _rewrite_hdfs_partition(partition, keys, version) == removed
    assert files_for_version(partition, version).names() == [f"{version}.snapshot"]
    assert load_version(partition, version) == expected
    # Nothing but the one snapshot file is left of the version.
    assert sorted(p.name for p in Path(partition).iterdir()) == [f"{version}.snapshot"]


@given(st.lists(st.binary(min_size=12, max_size=12), max_size=30),
       st.lists(st.binary(min_size=12, max_size=12), max_size=10))
def test_keys_not_of_64_bit_words_are_compared_as_bytes(
    stored: list[bytes], selected: list[bytes]
) -> None:
    unique = list(dict.fromkeys(stored))
    keys = np.frombuffer(b"".join(unique), np.uint8).reshape(-1, 12)
    values = np.arange(len(unique) * 8, dtype=np.uint8).reshape(-1, 8)
    kept, removed = without_fixed_keys(FixedState(keys, values), selected)
    expected = [(key, bytes(values[i])) for i, key in enumerate(unique) if key not in selected]
    assert removed == len(unique) - len(expected)
    assert [(bytes(k), bytes(v)) for k, v in zip(kept.keys, kept.values, strict=True)] == expected


def test_a_key_sharing_a_hash_with_a_selected_key_is_kept() -> None:
    stored, selected = _colliding_keys()
    keys = np.frombuffer(stored + _KEYS[0], np.uint8).reshape(2, 16)
    values = np.zeros((2, 8), np.uint8)
    kept, removed = without_fixed_keys(FixedState(keys, values), [selected, _KEYS[0]])
    assert removed == 1
    assert [bytes(k) for k in kept.keys] == [stored]


def _chunked(keys: list[bytes], chunks: int) -> pa.ChunkedArray:
    """``keys`` in ``chunks`` Arrow arrays, each a slice of a larger one (a non-zero offset
    into its buffers, as Arrow hands over batches)."""
    padded = pa.array([b"pad", *keys, b"pad"], pa.binary())
    bounds = [1 + len(keys) * i // chunks for i in range(chunks + 1)]
    return pa.chunked_array([padded.slice(start, end - start)
                             for start, end in itertools.pairwise(bounds)],
                            pa.binary())


@pytest.mark.parametrize("chunks", [1, 3])
@pytest.mark.parametrize("binary", [pa.binary(), pa.large_binary()])
def test_a_task_hands_keys_of_one_width_over_as_rows_of_arrows_buffer(
    chunks: int, binary: pa.DataType
) -> None:
    keys = [bytes([i]) * 16 for i in range(7)]
    rows = _key_rows(_chunked(keys, chunks).cast(binary))
    assert isinstance(rows, np.ndarray) and rows.shape == (7, 16)
    assert [row.tobytes() for row in rows] == keys
    mixed = [*keys, b"k" * 24]
    assert _key_rows(_chunked(mixed, chunks).cast(binary)) == mixed
    # One array that is a slice of a larger one: its offsets start past the first key.
    sliced = pa.array([b"pad", *keys, b"pad"], binary).slice(1, len(keys))
    assert [row.tobytes() for row in _key_rows(sliced)] == keys
