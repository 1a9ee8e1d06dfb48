"""Snapshots on S3 (moto's server on loopback) and HDFS (a MiniDFSCluster) apart from the
home: taken by one home, listed by another and continued there with nothing lost;
incremental uploads; concurrent creates of one name. Crashes of create and delete:
tests/unit/test_remote_snapshot_crashes.py."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from sparkpoint import api
from sparkpoint.snapshot.manifest import Manifest
from sparkpoint.snapshot.object_store import FILES_DIR, blob_name
from sparkpoint.storage.fileio import join
from sparkpoint.storage.home import Home
from sparkpoint.storage.stores import file_io
from sparkpoint.testing import expected_hourly_counts, output_rows, write_clicks
from tests.conftest import EXAMPLES
from tests.support.cli import _env, sparkpoint
from tests.support.s3 import S3Server

JOB = EXAMPLES / "clicks_job.py"
pytestmark = pytest.mark.spark


def _params(inp: Path, out: Path) -> dict[str, str]:
    return {"input": str(inp), "output": str(out), "files_per_batch": "1"}


def _cli(home: Home, *args: str) -> tuple[int, str, str]:
    assert home.snapshots is not None
    result = sparkpoint(home, "--snapshots", home.snapshots, *args)
    return result.code, result.out, result.err


def _blobs(server: S3Server, bucket: str) -> dict[str, int]:
    prefix = f"snaps/{FILES_DIR}/"
    return {key[len(prefix):]: size for key, size in server.keys(bucket, prefix).items()}


def _referenced(manifests: list[Manifest]) -> set[str]:
    return {blob_name(entry) for m in manifests for entry in m.files}


def test_snapshot_on_a_remote_store_continued_from_a_second_home(
    spark: object, remote_store: str, tmp_path: Path
) -> None:
    snapshots = remote_store
    first_home = Home(tmp_path / "a", snapshots)
    second_home = Home(tmp_path / "b", snapshots)
    inp = tmp_path / "in"
    events = write_clicks(inp, range(0, 3))
    api.run(first_home, JOB, "v1", params=_params(inp, tmp_path / "out1"),
            until_caught_up=True, spark=spark)  # type: ignore[arg-type]
    code, out, err = _cli(first_home, "snapshot", "create", "v1", "s1", "--json")
    assert code == 0, err
    created = json.loads(out)
    assert created["name"] == "s1"
    # Nothing of the snapshot is on the first home's disk; the second home lists it.
    assert not first_home.snapshots_dir.exists()
    code, out, err = _cli(second_home, "snapshot", "list", "--json")
    assert code == 0, err
    assert [row["name"] for row in json.loads(out)] == ["s1"]
    code, out, err = _cli(second_home, "snapshot", "verify", "s1", "--json")
    assert code == 0 and json.loads(out)["ok"], out + err

    events += write_clicks(inp, range(3, 6))
    api.run(second_home, JOB, "v2", params=_params(inp, tmp_path / "out2"),
            from_snapshot="s1", until_caught_up=True, spark=spark)  # type: ignore[arg-type]
    # The start fetched s1 into the second home's cache. A file of it then goes from the
    # store: verify reads the store, so it says so (on main it trusted the cache: intact).
    manifest = api.snapshot_show(second_home, "s1")
    io = file_io(snapshots)
    gone = max(manifest.files, key=lambda entry: entry.bytes)
    io.delete(join(snapshots, FILES_DIR, blob_name(gone)))
    code, out, err = _cli(second_home, "snapshot", "verify", "s1", "--json")
    assert code == 3 and not json.loads(out)["ok"], out + err
    assert "does not hold" in out
    api.run(second_home, JOB, "reference", params=_params(inp, tmp_path / "ref"),
            until_caught_up=True, spark=spark)  # type: ignore[arg-type]
    reference = output_rows(spark, tmp_path / "ref")  # type: ignore[arg-type]
    combined = output_rows(spark, tmp_path / "out1") + output_rows(spark, tmp_path / "out2")  # type: ignore[arg-type]
    assert reference, "the reference run emitted nothing: the test input is too small"
    assert sorted(combined) == sorted(reference) == sorted(expected_hourly_counts(events))


def test_second_snapshot_uploads_only_new_files_and_delete_keeps_shared_ones(
    spark: object, s3_server: S3Server, tmp_path: Path
) -> None:
    bucket = s3_server.new_bucket()
    home = Home(tmp_path / "home", f"s3://{bucket}/snaps")
    inp = tmp_path / "in"
    events = write_clicks(inp, range(0, 4))
    params = _params(inp, tmp_path / "out1")
    api.run(home, JOB, "v1", params=params, until_caught_up=True, spark=spark)  # type: ignore[arg-type]
    first = api.snapshot_create(home, "v1", "s1")
    after_first = _blobs(s3_server, bucket)
    assert set(after_first) == _referenced([first])

    # A small change: one more input file, one more batch.
    events += write_clicks(inp, range(4, 5))
    api.run(home, JOB, "v1", params=params, until_caught_up=True, spark=spark)  # type: ignore[arg-type]
    second = api.snapshot_create(home, "v1", "s2")
    after_second = _blobs(s3_server, bucket)
    uploaded = set(after_second) - set(after_first)
    expected_new = _referenced([second]) - _referenced([first])
    assert uploaded == expected_new
    assert 0 < len(uploaded) < len(_referenced([second])), "nothing was shared: not incremental"
    assert second.added_bytes == sum(after_second[blob] for blob in uploaded)
    code, out, err = _cli(home, "snapshot", "show", "s2", "--json")
    assert code == 0, err
    shown = json.loads(out)
    assert shown["shared_bytes"] == sum(e.bytes for e in second.files
                                        if blob_name(e) in _referenced([first]))
    assert shown["shared_bytes"] + shown["own_bytes"] == second.total_bytes

    code, _out, err = _cli(home, "snapshot", "delete", "s1")
    assert code == 0, err
    assert set(_blobs(s3_server, bucket)) == _referenced([second])
    assert api.snapshot_verify(home, "s2") == []
    api.run(home, JOB, "from_s2", params=_params(inp, tmp_path / "out2"), from_snapshot="s2",
            until_caught_up=True, spark=spark)  # type: ignore[arg-type]
    events += write_clicks(inp, range(5, 7))
    api.run(home, JOB, "from_s2", params=_params(inp, tmp_path / "out2"),
            until_caught_up=True, spark=spark)  # type: ignore[arg-type]
    combined = output_rows(spark, tmp_path / "out1") + output_rows(spark, tmp_path / "out2")  # type: ignore[arg-type]
    assert sorted(combined) == sorted(expected_hourly_counts(events))


@pytest.fixture
def stopped_job(spark: object, s3_server: S3Server, tmp_path: Path) -> Home:
    home = Home(tmp_path / "home", f"s3://{s3_server.new_bucket()}/snaps")
    inp = tmp_path / "in"
    write_clicks(inp, range(0, 2))
    api.run(home, JOB, "v1", params=_params(inp, tmp_path / "out"), until_caught_up=True,
            spark=spark)  # type: ignore[arg-type]
    return home


def test_concurrent_creates_of_one_name_from_two_homes_one_wins(
    stopped_job: Home, tmp_path: Path
) -> None:
    home = stopped_job
    assert home.snapshots is not None
    # A second home whose job is a copy of the first's, writing to the same store.
    other = Home(tmp_path / "other", home.snapshots)
    subprocess.run(["cp", "-a", str(home.root), str(other.root)], check=True)
    for attempt in range(3):
        name = f"race{attempt}"
        procs = [subprocess.Popen(
            [*_command(h), "--snapshots", home.snapshots, "snapshot", "create", "v1", name],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env())
            for h in (home, other)]
        results = [(p.wait(timeout=300), p.stderr.read() if p.stderr else "") for p in procs]
        codes = sorted(code for code, _ in results)
        assert codes == [0, 3] or codes == [0, 4], results
        loser = next(err for code, err in results if code != 0)
        assert "NAME_TAKEN" in loser or "already exists" in loser, loser
        assert api.snapshot_verify(home, name) == []


def _command(home: Home) -> list[str]:
    from tests.support.cli import command

    return command(home)
