"""Progress bars as a user at a terminal sees them: the long commands draw named bars on
stderr when it is a terminal, and draw nothing when it is not, or under ``--json`` (whose
output stays one document). Bars are drawn here from the first moment
(SPARKPOINT_PROGRESS_AFTER=0): by default a bar waits a second, and this state is small."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from sparkpoint import api
from sparkpoint.progress import SHOW_AFTER_ENV
from sparkpoint.storage.home import Home
from sparkpoint.testing import write_clicks
from tests.conftest import EXAMPLES, SHUFFLE_PARTITIONS
from tests.support.cli import sparkpoint, sparkpoint_on_a_terminal

pytestmark = pytest.mark.spark
RIGHT_AWAY = {SHOW_AFTER_ENV: "0"}


def test_long_commands_draw_named_bars_on_a_terminal_only(
    spark: Any, home: Home, tmp_path: Path
) -> None:
    inp = tmp_path / "in"
    clicks = write_clicks(inp, range(0, 3))
    api.run(home, EXAMPLES / "clicks_job.py", "clicks", until_caught_up=True,
            params={"input": str(inp), "output": str(tmp_path / "out")},
            conf={"spark.sql.shuffle.partitions": SHUFFLE_PARTITIONS}, spark=spark)

    created = sparkpoint_on_a_terminal(home, "snapshot", "create", "clicks", "s1",
                                       env=RIGHT_AWAY)
    assert created.code == 0, created.err
    assert "snapshot: dedupe default" in created.err, created.err
    assert "snapshot: checksums" in created.err and "file/s" in created.err

    inspected = sparkpoint_on_a_terminal(home, "snapshot", "inspect", "s1", env=RIGHT_AWAY)
    assert inspected.code == 0, inspected.err
    assert "inspect: hourly_counts" in inspected.err and "partition/s" in inspected.err
    assert "hourly_counts" in inspected.out  # the report itself stays on stdout

    as_json = sparkpoint_on_a_terminal(home, "snapshot", "inspect", "s1", "--json",
                                       env=RIGHT_AWAY)
    assert as_json.code == 0, as_json.err
    assert "inspect:" not in as_json.err and "%|" not in as_json.err, as_json.err
    assert {op["name"] for op in json.loads(as_json.out)["operators"]} == {
        "dedup_clicks", "hourly_counts"}

    off_terminal = sparkpoint(home, "snapshot", "inspect", "s1", env=RIGHT_AWAY)
    assert off_terminal.code == 0 and "inspect:" not in off_terminal.err, off_terminal.err

    user = clicks[0].user
    pruned = sparkpoint_on_a_terminal(home, "snapshot", "prune", "s1", "s1p", "--operator",
                                      "hourly_counts", "--where", f"user = '{user}'",
                                      env=RIGHT_AWAY)
    assert pruned.code == 0, pruned.err
    # RocksDB state: rewritten by a Spark job, whose elapsed time the bar shows.
    assert "prune: rewriting 'hourly_counts' with Spark" in pruned.err, pruned.err
    assert api.snapshot_inspect(home, "s1p", "hourly_counts").operators[0].rows < \
        api.snapshot_inspect(home, "s1", "hourly_counts").operators[0].rows
