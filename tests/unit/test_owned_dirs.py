"""Working directories of one process (a snapshot's staging in a local home, a prune's and a
rehearsal's scratch) are removed by another only once their owner is provably gone.

On main before this change the pid in the directory's name decided: in a home shared by
containers (a volume mounted in two of them), a live snapshot create of one container, whose
pid the other cannot see, had its staging removed by the other's next create.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from sparkpoint.snapshot.linked_store import LinkedSnapshotStore
from sparkpoint.storage.processes import OWNER_FILE, ProcessIdentity, abandoned, claim


def _ended_pid() -> int:
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    return int(done.stdout)


def _owned_by(directory: Path, owner: ProcessIdentity) -> Path:
    directory.mkdir()
    (directory / OWNER_FILE).write_text(json.dumps(owner.to_record()))
    return directory


def test_only_staging_whose_owner_is_provably_gone_is_removed(tmp_path: Path) -> None:
    me = ProcessIdentity.current()
    dead = _ended_pid()
    store = LinkedSnapshotStore(tmp_path / "home" / "snapshots")
    staging = store.staging_dir
    staging.mkdir(parents=True)
    # A live create in another container sharing the home: its pid is not visible here.
    elsewhere = _owned_by(staging / f"{dead}.s1.aaaa", ProcessIdentity(
        me.host, dead, me.boot_id, "pid:[4026500002]", 5))
    # A create of this namespace that died; one of an older version (no owner record).
    gone = _owned_by(staging / f"{dead}.s2.bbbb", ProcessIdentity(
        me.host, dead, me.boot_id, me.pid_namespace, 5))
    older = staging / f"{dead}.s3.cccc"
    older.mkdir()
    # This very process's, and a live one whose pid a later process reused.
    mine = staging / f"{os.getpid()}.s4.dddd"
    mine.mkdir()
    claim(mine)
    reused = _owned_by(staging / f"{os.getpid()}.s5.eeee", ProcessIdentity(
        me.host, os.getpid(), me.boot_id, me.pid_namespace, (me.start_ticks or 0) - 1))

    store._clean_abandoned_staging()
    assert sorted(p.name for p in staging.iterdir()) == sorted([elsewhere.name, mine.name])
    assert not gone.exists() and not older.exists() and not reused.exists()
    assert not abandoned(mine, os.getpid()) and not abandoned(elsewhere, dead)
