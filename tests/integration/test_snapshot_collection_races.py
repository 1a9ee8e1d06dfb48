"""Four processes create, delete and verify snapshots of one job in one store on S3 (moto)
and on HDFS (a MiniDFSCluster) at once. Every snapshot shares its files with the others, so
a delete's collection keeps racing creates that decided to share them. Afterwards every
listed snapshot verifies, exactly the snapshots created and not deleted are listed, and a
job starts from one of them with nothing lost.

On main before this change: a create decided what to share before registering itself, and
a delete's collection could remove those files after a create had listed them, so a snapshot
was published whose files were gone (S3); on HDFS a collection took a snapshot whose
manifest was still a temp file for a delete's leftover and removed it after it was published.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from sparkpoint import api
from sparkpoint.storage.home import Home
from sparkpoint.testing import expected_hourly_counts, output_rows, write_clicks
from tests.conftest import EXAMPLES
from tests.support.cli import _env

JOB = EXAMPLES / "clicks_job.py"
pytestmark = pytest.mark.spark

WORKERS = 4
ROUNDS = 4

# One worker: ROUNDS times, create its own snapshot, verify another listed one, delete its
# previous one; prints what it created and deleted as JSON lines.
WORKER = """
import json, random, sys
from pathlib import Path
from sparkpoint import api
from sparkpoint.errors import SparkpointError
from sparkpoint.storage.home import Home
home = Home(Path(sys.argv[1]), sys.argv[2])
worker, rounds = int(sys.argv[3]), int(sys.argv[4])
rng = random.Random(worker)
mine = []
for i in range(rounds):
    name = f"w{worker}-{i}"
    api.snapshot_create(home, "v1", name)
    print(json.dumps({"created": name}), flush=True)
    listed = [m.name for m in api.snapshot_list(home)]
    if listed:
        other = rng.choice(listed)
        try:
            problems = api.snapshot_verify(home, other)
        except SparkpointError as exc:  # deleted by its creator meanwhile
            problems = [] if exc.code == "UNKNOWN_SNAPSHOT" else [exc.message]
        print(json.dumps({"verified": other, "problems": [str(p) for p in problems]}),
              flush=True)
    mine.append(name)
    if len(mine) > 1 and rng.random() < 0.8:
        doomed = mine.pop(0)
        api.snapshot_delete(home, doomed)
        print(json.dumps({"deleted": doomed}), flush=True)
"""


def test_creates_deletes_and_verifies_at_once_never_break_a_listed_snapshot(
    spark: object, remote_store: str, tmp_path: Path
) -> None:
    home = Home(tmp_path / "home", remote_store)
    inp = tmp_path / "in"
    events = write_clicks(inp, range(0, 2))
    params = {"input": str(inp), "output": str(tmp_path / "out1"), "files_per_batch": "1"}
    api.run(home, JOB, "v1", params=params, until_caught_up=True, spark=spark)  # type: ignore[arg-type]

    workers = [subprocess.Popen(
        [sys.executable, "-c", WORKER, str(home.root), remote_store, str(i), str(ROUNDS)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env())
        for i in range(WORKERS)]
    results = [(w.communicate(timeout=600), w.returncode) for w in workers]
    created, deleted = Counter[str](), Counter[str]()
    for (out, err), code in results:
        assert code == 0, err[-3000:]
        for line in out.splitlines():
            event = json.loads(line)
            created.update([event["created"]] if "created" in event else [])
            deleted.update([event["deleted"]] if "deleted" in event else [])
            assert not event.get("problems"), event
    assert created.total() == WORKERS * ROUNDS and max(created.values()) == 1
    listed = [manifest.name for manifest in api.snapshot_list(home)]
    assert sorted(listed) == sorted(set(created) - set(deleted))
    for name in listed:
        assert api.snapshot_verify(home, name) == [], name

    # A job starts from the last one listed and continues with nothing lost or doubled.
    events += write_clicks(inp, range(2, 4))
    api.run(home, JOB, "v2", params={**params, "output": str(tmp_path / "out2")},
            from_snapshot=listed[-1], until_caught_up=True, spark=spark)  # type: ignore[arg-type]
    combined = output_rows(spark, tmp_path / "out1") + output_rows(spark, tmp_path / "out2")  # type: ignore[arg-type]
    assert Counter(combined) == Counter(expected_hourly_counts(events))
