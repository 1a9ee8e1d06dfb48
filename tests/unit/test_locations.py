"""Homes, snapshot stores and outputs whose path Spark (Hadoop's Path: ``#``, ``?`` and ``%``
kept as written) and sparkpoint's store clients (a URL parser) would read at different keys
are refused with one line, before anything is written.

On main before this change, sparkpoint cut ``s3://b/team#1`` at the ``#``: every job of that
home was read and written under ``team``; an output ``s3a://b/out#v2`` was read at ``out``,
so the sink-ahead check read an empty log.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from sparkpoint.errors import InvalidLocationError
from sparkpoint.storage.home import Home
from sparkpoint.storage.paths import check_location, location_problem
from tests.support.cli import sparkpoint


@pytest.mark.parametrize(("location", "found"), [
    ("s3://b/team#1", "'#'"),
    ("s3a://b/out?x=1", "'?'"),
    ("s3://b/a%20b/c", "'%20'"),
    ("hdfs://nn:8020/a/../b", "'..' segment"),
    ("s3://b/./x", "'.' segment"),
    ("file:///tmp/out#v2", "'#'"),
    ("/tmp/out#v2", "'#'"),
])
def test_paths_spark_and_sparkpoint_read_apart_are_refused(location: str, found: str) -> None:
    with pytest.raises(InvalidLocationError) as refused:
        check_location(location, "output")
    message = refused.value.message
    assert message.startswith(f"output {location}: expected a path without") and found in message
    assert refused.value.exit_code == 2


@pytest.mark.parametrize("location", [
    "s3://b/my home+x/y",  # spaces and '+' are plain characters to both
    "s3://b/home/",
    "hdfs://nn:8020/data/out",
    "/tmp/../tmp/out",  # a local path is made absolute and normalised before use
    "./out",
    "out-2026.11.29",
])
def test_paths_read_alike_pass(location: str) -> None:
    assert location_problem(location) is None


@pytest.fixture
def bucket(s3_server: Any) -> str:
    for name, value in s3_server.env.items():
        os.environ.setdefault(name, value)
    return str(s3_server.new_bucket())


@pytest.mark.parametrize("option", ["--home", "--snapshots"])
def test_a_home_or_snapshot_store_with_a_hash_is_refused_and_nothing_is_written(
    s3_server: Any, bucket: str, tmp_path: Path, option: str
) -> None:
    other = Home.resolve(str(tmp_path / "home"))
    where = f"s3://{bucket}/team#1"
    args = ["--home", where, "jobs", "list"] if option == "--home" else \
        ["--snapshots", where, "snapshot", "list"]
    result = sparkpoint(other, *args)
    assert result.code == 2, result.err
    what = "home" if option == "--home" else "snapshot store"
    lines = [line for line in result.err.splitlines() if line.strip()]
    assert lines == [f"error: [INVALID_LOCATION] {what} {where}: expected a path without '#', "
                     "'?', '%' escapes or '.'/'..' segments (Spark's Hadoop paths keep them as "
                     "written, sparkpoint's store clients would not), found '#' in its path; "
                     f"choose a {what} path without them"]
    assert s3_server.keys(bucket) == {}
