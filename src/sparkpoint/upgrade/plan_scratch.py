"""Where ``plan`` builds the checkpoint of its dry run.

A home in a local directory: a temporary directory of this machine, as before. A home on S3
or HDFS: a prefix in the store, ``<home>/.scratch/plan/<time>.<host>.<pid>.<random>/``, so
that the dry run rewrites the state the way the start would (repartition, provider move,
migration in Spark tasks that read and write the store) and works on a cluster whose
executors share no disk with the driver. The prefix is removed when the plan ends; one a
plan cut off left is removed by the next plan once its maker is provably gone
(storage/store_scratch.py), or by any plan after 12 hours.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from sparkpoint.storage.fileio import join
from sparkpoint.storage.home import Home
from sparkpoint.storage.location import StorePath, remove_tree
from sparkpoint.storage.store_scratch import clean_abandoned, new_scratch
from sparkpoint.storage.stores import file_io

Echo = Callable[[str], None]
# Past the longest a plan's dry run may last.
PLAN_SCRATCH_EXPIRY = dt.timedelta(hours=12)


def plan_scratch_root(home: Home) -> str:
    assert home.url is not None
    return join(home.url, ".scratch", "plan")


@contextmanager
def plan_target(home: Home, echo: Echo) -> Iterator[StorePath | None]:
    """The checkpoint location of a plan's dry run in ``home``'s store (None: a local home,
    whose plan builds in a temporary directory); removed when the plan ends."""
    if home.url is None:
        yield None
        return
    root = plan_scratch_root(home)
    io = file_io(root)
    for url in clean_abandoned(io, root, PLAN_SCRATCH_EXPIRY):
        echo(f"removed {url}, left by an interrupted plan")
    scratch = StorePath(io, new_scratch(io, root))
    try:
        yield scratch / "checkpoint"
    finally:
        remove_tree(scratch)
