"""Scratch prefixes in a store (S3, HDFS) for work whose files Spark's executors write, so
that executors on other hosts than the driver reach them: named by who made them and when
(``<utc time>.<host>.<pid>.<random>``), and removed by a later command once their maker is
known to be gone."""

from __future__ import annotations

import datetime as dt
import os
import uuid
from collections.abc import Callable

from sparkpoint.storage.fileio import FileIO, join
from sparkpoint.storage.processes import pid_alive, this_host

_STAMP = "%Y%m%dT%H%M%SZ"


def _host() -> str:
    return this_host().replace(".", "_")


def scratch_name() -> str:
    """A new prefix's name: ``<utc time>.<host>.<pid>.<random>``."""
    stamp = dt.datetime.now(dt.UTC).strftime(_STAMP)
    return f"{stamp}.{_host()}.{os.getpid()}.{uuid.uuid4().hex[:8]}"


def clean_abandoned(io: FileIO, root: str, older_than: dt.timedelta,
                    kept: Callable[[str], bool] = lambda _url: False) -> list[str]:
    """Remove the prefixes under ``root`` of commands cut off: this machine's whose process
    is gone, and anyone's older than ``older_than`` (past the longest such work may last);
    never those ``kept`` says to keep (given the prefix's URL). Returns the URLs removed."""
    now = dt.datetime.now(dt.UTC)
    removed = []
    for name in io.list_names(root):
        parts = name.split(".")
        if len(parts) != 4:
            continue
        try:
            made = dt.datetime.strptime(parts[0], _STAMP).replace(tzinfo=dt.UTC)
        except ValueError:
            continue
        mine = parts[1] == _host() and parts[2].isdigit() \
            and int(parts[2]) != os.getpid() and not pid_alive(int(parts[2]))
        url = join(root, name)
        if (mine or now - made > older_than) and not kept(url):
            io.delete_tree(url)
            removed.append(url)
    return removed
