"""Scratch prefixes in a store (S3, HDFS) for work whose files Spark's executors write, so
that executors on other hosts than the driver reach them: named by who made them and when
(``<utc time>.<host>.<pid>.<random>``), and removed by a later command once their maker is
known to be gone.

A maker records who it is (``.owner.json``, storage/processes.py's identity: host, boot,
pid namespace, pid and start time) before anything else is written under its prefix, so a
listed prefix always holds the record. A later command removes it only when that process is
provably gone: a pid free *here* says nothing of a maker in another pid namespace on the
same host (a container sharing the host's network and name), whose live work would be
deleted under it; a pid taken by a later process is no longer the maker. Prefixes of an
older version, without the record, are judged by the pid in their name on this host, as
then. Whatever the record, anyone's prefix older than the work can last is removed.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import uuid
from collections.abc import Callable

from sparkpoint.storage.fileio import FileIO, join
from sparkpoint.storage.processes import ProcessIdentity, pid_alive, this_host

_STAMP = "%Y%m%dT%H%M%SZ"
OWNER_RECORD = ".owner.json"


def _host() -> str:
    return this_host().replace(".", "_")


def scratch_name() -> str:
    """A new prefix's name: ``<utc time>.<host>.<pid>.<random>``."""
    stamp = dt.datetime.now(dt.UTC).strftime(_STAMP)
    return f"{stamp}.{_host()}.{os.getpid()}.{uuid.uuid4().hex[:8]}"


def new_scratch(io: FileIO, root: str) -> str:
    """A new prefix under ``root`` for this process, its identity recorded there first;
    returns its URL."""
    url = join(root, scratch_name())
    io.write_bytes(join(url, OWNER_RECORD),
                   json.dumps(ProcessIdentity.current().to_record()).encode("utf-8"))
    return url


def _maker_gone(io: FileIO, url: str, name_host: str, name_pid: str) -> bool:
    """Whether the prefix's maker is provably gone, by its record (unreadable: not known);
    without one (an older version's prefix), by the pid in its name on this host."""
    record_url = join(url, OWNER_RECORD)
    if io.is_file(record_url):
        try:
            owner = ProcessIdentity.from_record(json.loads(io.read_bytes(record_url)))
        except (OSError, ValueError):
            return False
        return owner is not None and owner.gone() \
            and not owner.same_process(ProcessIdentity.current())
    return name_host == _host() and name_pid.isdigit() and int(name_pid) != os.getpid() \
        and not pid_alive(int(name_pid))


def clean_abandoned(io: FileIO, root: str, older_than: dt.timedelta,
                    kept: Callable[[str], bool] = lambda _url: False) -> list[str]:
    """Remove the prefixes under ``root`` of commands cut off: those whose maker is provably
    gone, and anyone's older than ``older_than`` (past the longest such work may last);
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
        url = join(root, name)
        if (now - made > older_than or _maker_gone(io, url, parts[1], parts[2])) \
                and not kept(url):
            io.delete_tree(url)
            removed.append(url)
    return removed
