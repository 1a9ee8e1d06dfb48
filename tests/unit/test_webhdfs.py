"""How sparkpoint finds the NameNode's WebHDFS address for an HDFS location, and that each way
reaches the real NameNode of the MiniDFSCluster fixture."""

from __future__ import annotations

import http.server
import socket
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar
from urllib.parse import urlparse

import pytest

from sparkpoint.errors import StoreUnreachableError, UsageError
from sparkpoint.storage.fileio import join
from sparkpoint.storage.stores import file_io
from sparkpoint.storage.webhdfs import WebHdfsAddress, webhdfs_address


def _conf_dir(tmp_path: Path, files: dict[str, dict[str, str]]) -> str:
    conf = tmp_path / "hadoop-conf"
    conf.mkdir()
    for name, settings in files.items():
        props = "".join(f"<property><name>{key}</name><value>{value}</value></property>"
                        for key, value in settings.items())
        (conf / name).write_text(f"<?xml version='1.0'?><configuration>{props}</configuration>")
    return str(conf)


def test_http_address_comes_from_env_then_hdfs_site_then_the_default(tmp_path: Path) -> None:
    conf = _conf_dir(tmp_path, {
        "hdfs-site.xml": {"dfs.namenode.http-address": "0.0.0.0:50070"},
        "core-site.xml": {"fs.defaultFS": "hdfs://nn-default:8020"},
    })
    user = {"HADOOP_USER_NAME": "etl"}
    assert webhdfs_address("hdfs://nn1:8020/ckpt", user) == \
        WebHdfsAddress(False, "nn1", 9870, "etl")
    assert webhdfs_address("hdfs://nn1:8020/ckpt", {**user, "HADOOP_CONF_DIR": conf}) == \
        WebHdfsAddress(False, "nn1", 50070, "etl")
    assert webhdfs_address("hdfs:///ckpt", {**user, "HADOOP_CONF_DIR": conf}) == \
        WebHdfsAddress(False, "nn-default", 50070, "etl")
    explicit = {**user, "HADOOP_CONF_DIR": conf,
                "SPARKPOINT_WEBHDFS_URL": "https://gateway.example:14000"}
    assert webhdfs_address("hdfs://nn1:8020/ckpt", explicit) == \
        WebHdfsAddress(True, "gateway.example", 14000, "etl")
    # webhdfs:// URLs carry the HTTP port themselves; the environment does not override them.
    assert webhdfs_address("webhdfs://nn2:9871/x", explicit) == \
        WebHdfsAddress(False, "nn2", 9871, "etl")
    assert webhdfs_address("swebhdfs://nn2/x", user) == WebHdfsAddress(True, "nn2", 9870, "etl")


@pytest.mark.parametrize(("location", "environ", "named"), [
    ("hdfs://nn1:8020/x", {"SPARKPOINT_WEBHDFS_URL": "nn1:9870"}, "SPARKPOINT_WEBHDFS_URL"),
    ("hdfs:///x", {}, "hdfs:///x"),
])
def test_unusable_addresses_are_one_clear_line(location: str, environ: dict[str, str],
                                               named: str) -> None:
    with pytest.raises(UsageError) as caught:
        webhdfs_address(location, environ)
    message = caught.value.message
    assert named in message and "expected" in message and "\n" not in message


def test_hadoop_conf_dir_and_webhdfs_urls_reach_the_namenode(
    hdfs_server: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    http_port = hdfs_server.webhdfs.rsplit(":", 1)[1]
    monkeypatch.delenv("SPARKPOINT_WEBHDFS_URL")
    monkeypatch.setenv("HADOOP_CONF_DIR", _conf_dir(
        tmp_path, {"hdfs-site.xml": {"dfs.namenode.http-address": f"0.0.0.0:{http_port}"}}))
    root = hdfs_server.new_dir()
    target = join(root, "conf", "a.bin")
    file_io(target).write_bytes(target, b"\x00\x01payload")

    # Seen by the NameNode itself, not only by the store that wrote it.
    status = hdfs_server.status(urlparse(target).path)
    assert status.status_code == 200 and status.json()["FileStatus"]["length"] == 9
    same_file = target.replace(hdfs_server.url, f"webhdfs://127.0.0.1:{http_port}")
    assert file_io(same_file).read_bytes(same_file) == b"\x00\x01payload"


def test_an_unreachable_namenode_is_an_error_not_an_absent_file(
    monkeypatch: pytest.MonkeyPatch
) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        closed_port = sock.getsockname()[1]
    monkeypatch.setenv("SPARKPOINT_WEBHDFS_URL", f"http://127.0.0.1:{closed_port}")
    root = "hdfs://127.0.0.1:8020/x"
    io = file_io(root)
    attempts: list[Callable[[], object]] = [
        lambda: io.exists(join(root, "manifest.json")),
        lambda: io.create_exclusive(join(root, "manifest.json"), b"{}"),
        lambda: io.walk_sizes(root),  # fsspec's walk would skip an unreachable directory
        lambda: io.list_names(root),
    ]
    for attempt in attempts:
        with pytest.raises(StoreUnreachableError) as caught:
            attempt()
        message = caught.value.message
        assert f"http://127.0.0.1:{closed_port}" in message and "SPARKPOINT_WEBHDFS_URL" in message
        assert "\n" not in message


class _CutOnce(http.server.BaseHTTPRequestHandler):
    """A NameNode whose first answer to each read breaks off after the headers (as a
    kept-alive connection the server drops does), and whose later answers are whole."""

    payload = b"lease record"
    seen: ClassVar[list[str]] = []

    def do_GET(self) -> None:
        type(self).seen.append(self.path)
        self.send_response(200)
        self.send_header("Content-Length", str(len(self.payload)))
        self.end_headers()
        if len(type(self).seen) > 1:
            self.wfile.write(self.payload)
        else:
            self.close_connection = True

    def do_PUT(self) -> None:
        type(self).seen.append(self.path)
        self.send_response(200)
        self.send_header("Content-Length", "10")
        self.end_headers()
        self.close_connection = True

    def log_message(self, *args: object) -> None:
        pass


def test_a_read_cut_off_mid_answer_is_repeated_and_a_write_is_not(
    monkeypatch: pytest.MonkeyPatch
) -> None:
    """WebHDFS reads are repeated when the connection breaks (seen on a loaded machine: a
    307 from the NameNode cut off after its headers); a write is never sent twice."""
    _CutOnce.seen = []
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _CutOnce)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        monkeypatch.setenv("SPARKPOINT_WEBHDFS_URL", f"http://127.0.0.1:{server.server_port}")
        location = "hdfs://127.0.0.1:8020/home/jobs/j/lease"
        io = file_io(location)
        assert io.read_bytes(location) == _CutOnce.payload
        assert len(_CutOnce.seen) == 2 and all("op=OPEN" in seen for seen in _CutOnce.seen)

        _CutOnce.seen = []
        with pytest.raises(StoreUnreachableError):
            io.create_exclusive(location, b"token")
        assert len(_CutOnce.seen) == 1 and "op=CREATE" in _CutOnce.seen[0]
    finally:
        server.shutdown()
        server.server_close()
