"""A fresh file-sink output gets the empty history Spark's sink log compaction reads."""

from __future__ import annotations

from pathlib import Path

from sparkpoint.checkpoint.sink_log import (
    batches_to_seed,
    committed_files,
    latest_batch,
    seed_empty_history,
)


def test_batches_to_seed_cover_what_the_next_compaction_reads() -> None:
    # Next compaction after batch 12 is 19, which reads 9.compact and 10..18.
    assert batches_to_seed(12, 10) == [9, 10, 11, 12]
    # After batch 3 the first compaction is 9, which reads 0..8.
    assert batches_to_seed(3, 10) == [0, 1, 2, 3]
    # Batch 8 is the last before compaction 9.
    assert batches_to_seed(8, 10) == list(range(0, 9))
    # Right after a compaction batch only that compaction is needed.
    assert batches_to_seed(9, 10) == [9]
    assert batches_to_seed(-1, 10) == []


def test_seeded_history_is_empty_and_written_once(tmp_path: Path) -> None:
    out = tmp_path / "out"
    written = seed_empty_history(out, 12, 10)
    assert written == ["9.compact", "10", "11", "12"]
    assert all((out / "_spark_metadata" / name).read_bytes() == b"v1" for name in written)
    assert committed_files(out) == []
    # An output that already has a sink log is continued as it is.
    assert seed_empty_history(out, 15, 10) == []


def test_committed_files_reads_latest_compaction_and_later_entries(tmp_path: Path) -> None:
    log = tmp_path / "_spark_metadata"
    log.mkdir()
    entry = '{"path":"file:///o/%s","size":1,"isDir":false,"modificationTime":1,' \
            '"blockReplication":1,"blockSize":1,"action":"add"}'
    (log / "8").write_text("v1\n" + entry % "old")
    (log / "9.compact").write_text("v1\n" + entry % "a" + "\n" + entry % "b")
    (log / "10").write_text("v1\n" + entry % "c")
    (log / "11").write_text("v1")
    assert committed_files(tmp_path) == ["file:///o/a", "file:///o/b", "file:///o/c"]


def test_latest_batch_reads_plain_and_compacted_entries(tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert latest_batch(out) is None
    seed_empty_history(out, 12, 10)
    assert latest_batch(out) == 12
    # Spark's temp files and checksum siblings are not entries.
    (out / "_spark_metadata" / ".13.crc").write_bytes(b"")
    (out / "_spark_metadata" / ".14.abc.tmp").write_bytes(b"")
    assert latest_batch(out) == 12
    (out / "_spark_metadata" / "19.compact").write_bytes(b"v1")
    assert latest_batch(out) == 19
