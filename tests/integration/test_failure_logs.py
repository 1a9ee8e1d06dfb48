"""A failing job prints one short line in the user's terms naming a log file in the home;
Spark's stack traces go to that file, never to the terminal."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from sparkpoint.storage.home import Home
from sparkpoint.testing import write_clicks
from tests.conftest import SHUFFLE_PARTITIONS
from tests.support.cli import sparkpoint

pytestmark = pytest.mark.spark
JOB = Path(__file__).resolve().parent.parent / "data" / "jobs" / "failing.py"


def _is_java_frame(line: str) -> bool:
    return line.startswith("\tat ") or line.strip().startswith("at org.apache")


@pytest.mark.parametrize(("how", "code", "cause"), [
    ("column", 3, "UNRESOLVED_COLUMN"),
    ("udf", 1, "a Python function raised ValueError: bad user"),
])
def test_failure_names_a_log_file_holding_the_stack_traces(
    tmp_path: Path, how: str, code: int, cause: str
) -> None:
    home = Home(tmp_path / "home")
    write_clicks(tmp_path / "in", range(0, 2))
    result = sparkpoint(home, "run", str(JOB), "--job", how, "--param", f"fail={how}",
                        "--param", f"input={tmp_path / 'in'}",
                        "--param", f"output={tmp_path / 'out'}",
                        "--conf", f"spark.sql.shuffle.partitions={SHUFFLE_PARTITIONS}",
                        "--until-caught-up")
    assert result.code == code, result.err
    assert not [line for line in result.err.splitlines() if _is_java_frame(line)], result.err
    assert "Traceback" not in result.err and " ERROR " not in result.err, result.err
    [error] = [line for line in result.err.splitlines() if line.startswith("error:")]
    assert cause in error
    found = re.search(r"(\S+\.log)$", error)
    assert found is not None, error
    log = Path(found.group(1))
    assert log.parent == home.root / "logs" and log.name.startswith(f"{how}-")
    # The line itself stays short: the cause, not Spark's plan and frames.
    assert len(error.removesuffix(found.group(1))) < 400, error
    text = log.read_text()
    assert [line for line in text.splitlines() if _is_java_frame(line)]
    assert cause.rsplit(" ", 1)[-1] in text
