"""Scratch prefixes in a store (storage/store_scratch.py): which ones a later command removes.
Made by hand with the names real commands give them, in moto's S3 server and on HDFS."""

from __future__ import annotations

import datetime as dt
import os
import subprocess
import sys

from sparkpoint.storage.fileio import join
from sparkpoint.storage.processes import this_host
from sparkpoint.storage.store_scratch import clean_abandoned, scratch_name
from sparkpoint.storage.stores import file_io

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
