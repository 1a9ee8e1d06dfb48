"""Where a rehearsal writes: its scratch job's home (checkpoint, job record) and its output.

A local home's rehearsals work in ``<home>/scratch/rehearse-<pid>-<random>``. A home on S3 or
HDFS keeps them in the store, under ``<home>/.scratch/rehearse/<time>.<host>.<pid>.<random>``:
Spark's executors write the rehearsal's state and output, and on a cluster whose executors
share no disk with the driver (Kubernetes, YARN) the store is what they reach. Either way a
rehearsal removes its scratch when it ends, unless kept (``--keep``: a ``KEPT`` marker), and
the next rehearsal removes what one cut off left: a local one's once its process is gone, a
store's once its recorded maker is provably gone (storage/store_scratch.py: not merely a pid
free in this pid namespace), or after 12 hours from any machine.
"""

from __future__ import annotations

import datetime as dt
import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from sparkpoint.storage.fileio import join
from sparkpoint.storage.home import Home, local_copy_dir
from sparkpoint.storage.location import Location, StorePath, remove_tree
from sparkpoint.storage.processes import abandoned, claim
from sparkpoint.storage.store_scratch import clean_abandoned, new_scratch
from sparkpoint.storage.stores import file_io

Echo = Callable[[str], None]
# <home>/scratch/rehearse-<pid>-<random>: the pid tells a running rehearsal's from a dead one's.
SCRATCH_PREFIX = "rehearse-"
KEPT_MARKER = "KEPT"
# A rehearsal in a store left by another machine: removed once older than any rehearsal
# lasts.
STORE_SCRATCH_EXPIRY = dt.timedelta(hours=12)


@dataclass(frozen=True)
class RehearsalScratch:
    root: Location

    @property
    def in_store(self) -> bool:
        return isinstance(self.root, StorePath)

    @property
    def home(self) -> Home:
        """The scratch job's own home (never a user's: it is in no ``jobs list``)."""
        if isinstance(self.root, StorePath):
            url = join(self.root.url, "home")
            # Not Home.resolve: that would take $SPARKPOINT_SNAPSHOTS as this home's store.
            return Home(local_copy_dir(url), None, url)
        return Home(self.root / "home")

    @property
    def output(self) -> Location:
        return self.root / "output"

    def keep(self) -> None:
        (self.root / KEPT_MARKER).write_bytes(b"")

    def remove(self) -> None:
        remove_tree(self.root)


def store_scratch_root(home: Home) -> str:
    assert home.url is not None
    return join(home.url, ".scratch", "rehearse")


def open_scratch(home: Home, echo: Echo) -> RehearsalScratch:
    """A new scratch for a rehearsal in ``home``, after removing those left by rehearsals
    cut off."""
    if home.url is None:
        home.scratch_dir.mkdir(parents=True, exist_ok=True)
        _remove_abandoned(home.scratch_dir, echo)
        path = Path(tempfile.mkdtemp(prefix=f"{SCRATCH_PREFIX}{os.getpid()}-",
                                     dir=home.scratch_dir))
        claim(path)
        return RehearsalScratch(path)
    root = store_scratch_root(home)
    io = file_io(root)
    for url in clean_abandoned(io, root, STORE_SCRATCH_EXPIRY,
                               kept=lambda url: io.is_file(join(url, KEPT_MARKER))):
        echo(f"removed {url}, left by an interrupted rehearsal")
    return RehearsalScratch(StorePath(io, new_scratch(io, root)))


def _remove_abandoned(scratch_dir: Path, echo: Echo) -> None:
    """Remove the scratch of rehearsals whose process died (killed, crashed) before its own
    cleanup; running ones and those kept with --keep stay."""
    for path in scratch_dir.glob(f"{SCRATCH_PREFIX}*"):
        pid = path.name.removeprefix(SCRATCH_PREFIX).split("-", 1)[0]
        if not pid.isdigit() or (path / KEPT_MARKER).exists() or \
                not abandoned(path, int(pid)):
            continue
        remove_tree(path)
        echo(f"removed {path}, left by an interrupted rehearsal (pid {pid})")
