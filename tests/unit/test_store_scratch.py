"""Scratch prefixes in a store (storage/store_scratch.py): which ones a later command removes.
Made by hand with the names real commands give them, in moto's S3 server and on HDFS."""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys

import pytest

from sparkpoint.storage.fileio import join
from sparkpoint.storage.processes import this_host
from sparkpoint.storage.store_scratch import clean_abandoned, scratch_name
from sparkpoint.storage.stores import file_io
from tests.support.faults import in_fresh_pid_namespace

HOST = this_host().replace(".", "_")


def _dead_pid() -> int:
    """The pid of a process that has exited (and been reaped)."""
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    return int(done.stdout)


def _stamp(age: dt.timedelta) -> str:
    return (dt.datetime.now(dt.UTC) - age).strftime("%Y%m%dT%H%M%SZ")


def test_only_prefixes_whose_maker_is_gone_or_too_old_are_removed(remote_store: str) -> None:
    root = join(remote_store, ".scratch", "work")
    io = file_io(root)
    dead, young, old = _dead_pid(), dt.timedelta(minutes=5), dt.timedelta(hours=13)
    names = {
        "ours_dead": f"{_stamp(young)}.{HOST}.{dead}.aaaa1111",
        "ours_dead_kept": f"{_stamp(young)}.{HOST}.{dead}.bbbb2222",
        "ours_alive": f"{_stamp(young)}.{HOST}.{os.getppid()}.cccc3333",
        "this_process": scratch_name(),
        "other_host_young": f"{_stamp(young)}.elsewhere.{dead}.dddd4444",
        "other_host_old": f"{_stamp(old)}.elsewhere.{os.getppid()}.eeee5555",
        "not_ours": "notes",
    }
    for name in names.values():
        io.write_bytes(join(root, name, "file"), b"x")
    kept_url = join(root, names["ours_dead_kept"])

    removed = clean_abandoned(io, root, dt.timedelta(hours=12), kept=lambda url: url == kept_url)

    assert sorted(removed) == sorted(join(root, names[key])
                                     for key in ("ours_dead", "other_host_old"))
    assert sorted(io.list_names(root)) == sorted(
        name for key, name in names.items() if key not in ("ours_dead", "other_host_old"))
    assert names["this_process"].split(".")[1:3] == [HOST, str(os.getpid())]


# A maker: makes its prefix as a command does, prints the URL, and stays alive until its
# input closes (or exits at once with "exit").
_MAKER = """
import sys
from sparkpoint.storage.store_scratch import new_scratch
from sparkpoint.storage.stores import file_io
root = sys.argv[1]
io = file_io(root)
url = new_scratch(io, root)
io.write_bytes(url + "/work", b"written by a live command")
print(url, flush=True)
if sys.argv[2:] != ["exit"]:
    sys.stdin.read()
"""
_CLEANER = """
import datetime as dt, json, sys
from sparkpoint.storage.store_scratch import clean_abandoned
from sparkpoint.storage.stores import file_io
print(json.dumps(clean_abandoned(file_io(sys.argv[1]), sys.argv[1], dt.timedelta(hours=12))))
"""


def _unshare_works() -> bool:
    probe = subprocess.run(in_fresh_pid_namespace(["true"]), capture_output=True)
    return probe.returncode == 0


def test_a_live_makers_prefix_is_kept_by_a_cleaner_in_another_pid_namespace(
    remote_store: str,
) -> None:
    """A cleaner restarted in a pid namespace of its own on the same host (a container that
    shares the host's network, hence its name) sees no process with the maker's pid: the
    maker's record says it cannot tell, so the live maker's prefix stays (before the record,
    the free pid made it remove a live command's work). A maker that exited is removed by a
    cleaner in its own namespace, where that is provable."""
    if not _unshare_works():
        pytest.skip("needs unshare --pid --fork --mount-proc (root)")
    root = join(remote_store, ".scratch", "work")
    io = file_io(root)
    maker = subprocess.Popen([sys.executable, "-c", _MAKER, root], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    try:
        assert maker.stdout is not None
        live = maker.stdout.readline().strip()
        exited = subprocess.run([sys.executable, "-c", _MAKER, root, "exit"],
                                capture_output=True, text=True, check=True).stdout.strip()
        elsewhere = subprocess.run(
            in_fresh_pid_namespace([sys.executable, "-c", _CLEANER, root]),
            capture_output=True, text=True)
        assert elsewhere.returncode == 0, elsewhere.stderr
        assert json.loads(elsewhere.stdout) == []
        assert sorted(io.list_names(root)) == sorted(
            url.rsplit("/", 1)[1] for url in (live, exited))

        assert clean_abandoned(io, root, dt.timedelta(hours=12)) == [exited]
        assert io.read_bytes(join(live, "work")) == b"written by a live command"
    finally:
        if maker.stdin is not None:
            maker.stdin.close()
        maker.wait(timeout=60)
    # Its maker gone, the prefix is removed by the next cleaner here.
    assert clean_abandoned(io, root, dt.timedelta(hours=12)) == [live]
    assert io.list_names(root) == []
