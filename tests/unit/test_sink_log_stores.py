"""A file sink's log read and written where the output is: a local directory, S3 (moto on
loopback, as ``s3a://`` URLs) and HDFS (a MiniDFSCluster, ``hdfs://`` URLs through WebHDFS).
Spark writing and reading such outputs: tests/integration/test_remote_sink_outputs.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sparkpoint.checkpoint.sink_log import SinkLog
from sparkpoint.errors import OutputHasHistoryError
from sparkpoint.sinks.gaps import fill_gap, find_gap, remove_filled
from sparkpoint.storage.fileio import join
from sparkpoint.storage.stores import file_io


@pytest.fixture(params=["file", "s3", "hdfs"])
def output(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A new output directory, named as a job's writer names it."""
    if request.param == "file":
        return str(tmp_path / "out")
    if request.param == "hdfs":
        return f"{request.getfixturevalue('hdfs_server').new_dir()}/out"
    return f"s3a://{request.getfixturevalue('s3_server').new_bucket()}/out"


def _status(output: str, name: str) -> str:
    # FileStreamSinkLog's SinkFileStatus, as Spark's json4s writes it.
    return json.dumps({"path": join(output, name), "size": 10, "isDir": False,
                       "modificationTime": 1, "blockReplication": 1, "blockSize": 33554432,
                       "action": "add"}, separators=(",", ":"))


def _spark_entry(output: str, name: str, files: list[str]) -> None:
    """An entry as Spark's sink writes it, through the store."""
    location = join(output, "_spark_metadata", name)
    text = "\n".join(["v1", *(_status(output, f) for f in files)])
    file_io(location).write_bytes(location, text.encode())


def _log(output: str) -> dict[str, bytes]:
    log = SinkLog(output)
    return {name: log.io.read_bytes(log.location(name)) for name in log.names()}


def test_the_log_is_read_filled_and_taken_back_through_the_store(output: str) -> None:
    _spark_entry(output, "0", ["a"])
    _spark_entry(output, "1", ["b"])
    log = SinkLog(output)
    assert log.latest_batch() == 1
    assert log.files_up_to(1) == {join(output, "a"), join(output, "b")}

    gap = find_gap(output, 4, 3)
    assert gap.names == ["2.compact", "3", "4"]
    assert fill_gap(gap) == gap.names
    compact = log.lines("2.compact")
    assert [json.loads(line)["path"] for line in compact] == [join(output, "a"),
                                                             join(output, "b")]
    assert log.committed_files() == [join(output, "a"), join(output, "b")]
    assert find_gap(output, 4, 3).batches == ()

    assert remove_filled(output, gap.names, 4) == ["4", "3", "2.compact"]
    assert sorted(log.entries()) == [0, 1]


def test_an_entry_spark_wrote_is_never_replaced(output: str) -> None:
    """Spark's sink wrote batch 1 (with a file) while a fill was on its way: the fill keeps
    Spark's entry and stops, naming the other writer."""
    _spark_entry(output, "0", ["a"])
    gap = find_gap(output, 2, 10)
    _spark_entry(output, "1", ["b"])
    spark_wrote = _log(output)
    assert not SinkLog(output).create("1", b"v1")
    with pytest.raises(OutputHasHistoryError, match="another writer"):
        fill_gap(gap)
    assert _log(output) == spark_wrote
