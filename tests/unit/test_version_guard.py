"""An untested pyspark is refused before a JVM starts and before anything changes; the
expert override goes on with a warning. The CLI runs as a process in which the function the
guard reads the version from is patched."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from sparkpoint.spark.version import ALLOW_UNTESTED_ENV, SUPPORTED_PYSPARK

EXAMPLES = Path(__file__).resolve().parent.parent.parent / "examples"
PATCHED = (
    "import sys\n"
    "import sparkpoint.spark.version as version\n"
    "version.installed_pyspark_version = lambda: '4.2.1'\n"
    "from sparkpoint.cli.main import main\n"
    "sys.argv = ['sparkpoint', *sys.argv[1:]]\n"
    "main()\n"
)


def _cli(home: Path, *args: str, allow: bool = False) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != ALLOW_UNTESTED_ENV}
    if allow:
        env[ALLOW_UNTESTED_ENV] = "1"
    return subprocess.run([sys.executable, "-c", PATCHED, "--home", str(home), *args],
                          capture_output=True, text=True, timeout=120, env=env)


@pytest.mark.parametrize("args", [
    ["run", str(EXAMPLES / "clicks_job.py"), "--job", "j", "--param", "input=in",
     "--param", "output=out"],
    ["plan", str(EXAMPLES / "clicks_job.py"), "--from-snapshot", "s"],
    ["resume-point", "build", str(EXAMPLES / "clicks_job.py"), "s"],
    ["drain", "j"],
])
def test_untested_pyspark_is_refused_before_anything(tmp_path: Path, args: list[str]) -> None:
    done = _cli(tmp_path / "home", *args)
    assert done.returncode == 4, done.stderr
    assert done.stderr == (
        f"error: [UNSUPPORTED_PYSPARK] pyspark 4.2.1 is installed, sparkpoint supports pyspark "
        f"{', '.join(SUPPORTED_PYSPARK)}; install it (pip install pyspark=="
        f"{SUPPORTED_PYSPARK[0]}), or set {ALLOW_UNTESTED_ENV}=1 to go on at your own risk\n")
    assert not (tmp_path / "home").exists()


def test_override_goes_on_with_a_warning(tmp_path: Path) -> None:
    # Past the guard, drain of an unknown job is refused for that reason, still before Spark.
    done = _cli(tmp_path / "home", "drain", "j", allow=True)
    assert done.returncode == 4, done.stderr
    lines = done.stderr.splitlines()
    assert lines[0].startswith("warning: pyspark 4.2.1 is not a version sparkpoint is tested "
                               f"with ({SUPPORTED_PYSPARK[0]}); {ALLOW_UNTESTED_ENV}=1 is set")
    assert lines[1].startswith("error: [UNKNOWN_JOB] job 'j' not found")


def test_commands_without_spark_are_not_guarded(tmp_path: Path) -> None:
    done = _cli(tmp_path / "home", "jobs", "list")
    assert done.returncode == 0, done.stderr
