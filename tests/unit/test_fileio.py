"""The store interface behaves the same on every scheme: local disk, S3 (moto on loopback) and
HDFS (a MiniDFSCluster on loopback, reached through WebHDFS)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from sparkpoint.storage.fileio import join, scheme_of, spark_url
from sparkpoint.storage.stores import file_io


@pytest.fixture(params=["file", "s3", "hdfs"])
def root(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "file":
        return str(tmp_path / "store")
    if request.param == "hdfs":
        return str(request.getfixturevalue("hdfs_server").new_dir())
    server = request.getfixturevalue("s3_server")
    return f"s3://{server.new_bucket()}/prefix"


def test_exclusive_create_lets_one_writer_win(root: str) -> None:
    io = file_io(root)
    target = join(root, "snap", "manifest.json")
    assert io.create_exclusive(target, b"first")
    assert not io.create_exclusive(target, b"second")
    assert io.read_bytes(target) == b"first"


def test_racing_exclusive_creates_have_one_winner(root: str) -> None:
    io = file_io(root)
    target = join(root, "race", "manifest.json")
    payloads = [f"writer-{n}".encode() * 50 for n in range(8)]
    with ThreadPoolExecutor(max_workers=len(payloads)) as pool:
        won = list(pool.map(lambda data: io.create_exclusive(target, data), payloads))
    assert won.count(True) == 1
    assert io.read_bytes(target) == payloads[won.index(True)]
    # No temporary file of a losing writer is left beside the target.
    assert io.list_names(join(root, "race")) == ["manifest.json"]


def test_write_bytes_replaces_the_whole_file(root: str) -> None:
    io = file_io(root)
    target = join(root, "a", "state.json")
    io.write_bytes(target, b"first version, longer")
    io.write_bytes(target, b"second")
    assert io.read_bytes(target) == b"second"
    assert io.size(target) == len(b"second")
    assert io.exists(target)
    assert not io.exists(join(root, "a", "other.json"))
    assert io.list_names(join(root, "a")) == ["state.json"]


def test_empty_and_multi_megabyte_files_round_trip(root: str, tmp_path: Path) -> None:
    io = file_io(root)
    sizes = {"empty": 0, "big": 3 * 1024 * 1024 + 7}
    for name, size in sizes.items():
        (tmp_path / name).write_bytes(bytes(i % 251 for i in range(size)))
    io.put_files([(tmp_path / name, join(root, "blobs", name)) for name in sizes])
    assert io.walk_sizes(join(root, "blobs")) == sizes
    io.get_files([(join(root, "blobs", name), tmp_path / "back" / name) for name in sizes])
    for name in sizes:
        assert (tmp_path / "back" / name).read_bytes() == (tmp_path / name).read_bytes()


def test_listing_walking_and_deleting(root: str, tmp_path: Path) -> None:
    io = file_io(root)
    assert io.list_names(root) == []
    assert io.walk_sizes(root) == {}
    source = tmp_path / "payload"
    source.write_bytes(b"hello")
    io.put_files([(source, join(root, ".files", "ab", "x1")),
                  (source, join(root, ".files", "cd", "x2"))])
    io.write_bytes(join(root, "a", "m.json"), b"{}")
    assert io.walk_sizes(root) == {".files/ab/x1": 5, ".files/cd/x2": 5, "a/m.json": 2}
    assert io.list_names(root) == [".files", "a"]
    io.get_files([(join(root, ".files", "ab", "x1"), tmp_path / "down" / "y")])
    assert (tmp_path / "down" / "y").read_bytes() == b"hello"
    io.delete(join(root, "a", "m.json"))
    io.delete(join(root, "a", "m.json"))  # a missing file is not an error
    assert io.walk_sizes(root) == {".files/ab/x1": 5, ".files/cd/x2": 5}
    with pytest.raises(FileNotFoundError):
        io.read_bytes(join(root, "a", "m.json"))
    io.delete_tree(root)
    assert io.walk_sizes(root) == {}


def test_schemes_and_spark_urls() -> None:
    assert scheme_of("/tmp/x") == "file"
    assert scheme_of("file:///tmp/x") == "file"
    assert scheme_of("s3a://b/k") == "s3"
    assert spark_url("s3://b/k") == "s3a://b/k"
    assert spark_url("hdfs://nn:8020/p") == "hdfs://nn:8020/p"


def test_is_file_tells_files_from_directories_and_absence(root: str) -> None:
    io = file_io(root)
    io.write_bytes(join(root, "snap", "manifest.json"), b"{}")
    assert io.is_file(join(root, "snap", "manifest.json"))
    assert not io.is_file(join(root, "snap"))
    assert not io.is_file(join(root, "other", "manifest.json"))


def test_one_store_client_per_set_of_aws_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_REGION", "us-east-1")
    first = file_io("s3://bucket/a")
    assert file_io("s3://other/b") is first
    monkeypatch.setenv("AWS_REGION", "eu-west-1")
    assert file_io("s3://bucket/a") is not first
