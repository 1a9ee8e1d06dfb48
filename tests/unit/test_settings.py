"""The SPARKPOINT_* environment variables (sparkpoint.settings): read when asked, not at
import; a bad value is one usage line naming the variable, what was expected, what was found
and what to do, refused by the CLI before it does anything; and no module reads one past
the declarations."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

from sparkpoint import crash_points, progress, settings
from sparkpoint.errors import UsageError
from sparkpoint.storage import file_cache, processes
from sparkpoint.storage.home import Home
from sparkpoint.storage.lease import lease_seconds

SOURCE = Path(settings.__file__).parent


def test_each_setting_reads_the_environment_as_it_is_when_asked(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
) -> None:
    monkeypatch.delenv("SPARKPOINT_LEASE_SECONDS", raising=False)
    assert lease_seconds() == 60.0
    monkeypatch.setenv("SPARKPOINT_LEASE_SECONDS", "2.5")
    assert lease_seconds() == 2.5
    monkeypatch.setenv("SPARKPOINT_LEASE_SECONDS", "  ")  # blank is unset, as before
    assert lease_seconds() == 60.0

    monkeypatch.setenv("SPARKPOINT_HOST", "machine-b")
    assert processes.this_host() == "machine-b"
    monkeypatch.setenv("SPARKPOINT_HOST", "")
    assert processes.this_host() != "" and processes.this_host() != "machine-b"

    monkeypatch.setenv("SPARKPOINT_SCRATCH", str(tmp_path / "one"))
    assert file_cache.scratch_base() == tmp_path / "one"
    monkeypatch.delenv("SPARKPOINT_SCRATCH")
    assert file_cache.scratch_base() == Path("~/.cache/sparkpoint").expanduser()

    monkeypatch.setenv("SPARKPOINT_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("SPARKPOINT_SNAPSHOTS", str(tmp_path / "snaps"))
    home = Home.resolve(None)
    assert (home.root, home.snapshots) == (tmp_path / "home", str(tmp_path / "snaps"))
    assert Home.resolve(str(tmp_path / "given"), "elsewhere").snapshots == "elsewhere"

    monkeypatch.setenv("SPARKPOINT_PROGRESS_AFTER", "0.25")
    assert progress.show_after() == 0.25


@pytest.mark.parametrize(("name", "value", "expected"), [
    ("SPARKPOINT_LEASE_SECONDS", "nan", "a positive number of seconds"),
    ("SPARKPOINT_LEASE_SECONDS", "-5", "a positive number of seconds"),
    ("SPARKPOINT_PROGRESS_AFTER", "soon", "a number of seconds"),
    ("SPARKPOINT_ALLOW_UNTESTED_PYSPARK", "yes", "1 (go on under an untested pyspark) or 0"),
    ("SPARKPOINT_WEBHDFS_URL", "namenode:9870", "the NameNode's HTTP address"),
    ("SPARKPOINT_HOST", "two words", "a host name without spaces"),
    ("SPARKPOINT_CRASH_AT", "Restore Published", "a crash point name"),
    ("SPARKPOINT_SCRATCH", "s3://bucket/scratch", "a local directory"),
])
def test_a_bad_value_is_one_line_naming_the_variable_expected_found_and_fix(
    monkeypatch: pytest.MonkeyPatch, name: str, value: str, expected: str,
) -> None:
    setting = next(s for s in settings.SETTINGS if s.name == name)
    monkeypatch.setenv(name, value)
    with pytest.raises(UsageError) as caught:
        setting.get()
    line = str(caught.value)
    assert line.startswith(f"[USAGE] {name}={value!r}: expected {expected}")
    assert f"found {value!r}; " in line and line.endswith(setting.remedy)
    assert "\n" not in line and caught.value.exit_code == 2


def test_the_cli_refuses_a_bad_variable_before_it_does_anything(tmp_path: Path) -> None:
    home = tmp_path / "home"
    env = {"PATH": "/usr/bin:/bin", "SPARKPOINT_LEASE_SECONDS": "a minute",
           "SPARKPOINT_SCRATCH": str(tmp_path / "scratch")}
    done = subprocess.run([sys.executable, "-m", "sparkpoint.cli.main", "--home", str(home),
                           "jobs", "list"], capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 2, done.stderr
    assert done.stderr == ("error: [USAGE] SPARKPOINT_LEASE_SECONDS='a minute': expected a "
                           "positive number of seconds, found 'a minute'; set it to e.g. 60 "
                           "or unset it\n")
    assert done.stdout == "" and not home.exists()

    # A crash point name that is not declared would never fire: refused too, while the
    # command that lists the names still answers.
    env = {**env, "SPARKPOINT_LEASE_SECONDS": "60", "SPARKPOINT_CRASH_AT": "restore.publishd"}
    done = subprocess.run([sys.executable, "-m", "sparkpoint.cli.main", "--home", str(home),
                           "jobs", "list", "--json"], capture_output=True, text=True, env=env,
                          timeout=60)
    assert done.returncode == 2 and not home.exists()
    assert '"code": "USAGE"' in done.stdout and "'restore.publishd'" in done.stdout
    listed = subprocess.run([sys.executable, "-m", "sparkpoint.cli.main", "debug",
                             "crash-points"], capture_output=True, text=True, env=env,
                            timeout=60)
    assert listed.returncode == 0 and "restore.published\n" in listed.stdout


def test_crash_points_check_names_against_the_declared_ones(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("SPARKPOINT_FREEZE_AT", "lease.renewing")
    crash_points.check_environment()
    monkeypatch.setenv("SPARKPOINT_FREEZE_AT", "lease.renewed")
    with pytest.raises(UsageError, match=re.escape(
            "SPARKPOINT_FREEZE_AT='lease.renewed': expected a crash point name")):
        crash_points.check_environment()


def test_settings_import_nothing_of_sparkpoint_but_errors() -> None:
    tree = ast.parse((SOURCE / "settings.py").read_text())
    imported = {node.module for node in ast.walk(tree)
                if isinstance(node, ast.ImportFrom) and node.module} | \
               {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import)
                for alias in node.names}
    assert {name for name in imported if name.startswith("sparkpoint")} == {"sparkpoint.errors"}


def _sparkpoint_names(tree: ast.Module) -> set[str]:
    """Module-level names bound to a SPARKPOINT_* variable's name (``X_ENV = "SPARKPOINT_X"``
    or ``X_ENV = settings.X.name``)."""
    names = set()
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 \
                and isinstance(node.targets[0], ast.Name):
            value = node.value
            if (isinstance(value, ast.Constant) and str(value.value).startswith("SPARKPOINT_")) \
                    or ast.unparse(value).startswith("settings."):
                names.add(node.targets[0].id)
    return names


def _environment_reads(tree: ast.Module) -> list[ast.expr]:
    """The key of every ``*environ.get(key)``, ``*environ[key]`` and ``getenv(key)``."""
    keys: list[ast.expr] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and node.args and isinstance(node.func, ast.Attribute):
            owner = ast.unparse(node.func.value)
            if (node.func.attr == "get" and owner.endswith(("environ", "env"))) \
                    or node.func.attr == "getenv":
                keys.append(node.args[0])
        elif isinstance(node, ast.Subscript) and ast.unparse(node.value).endswith("environ"):
            keys.append(node.slice)
    return keys


def test_no_module_reads_a_sparkpoint_variable_past_the_settings() -> None:
    """Every SPARKPOINT_* name in the code is declared in settings.py, and only settings.py
    reads one from the environment (a module keeps a constant of the name for its messages
    and for the tests that import it)."""
    declared = {setting.name for setting in settings.SETTINGS}
    for path in sorted(SOURCE.rglob("*.py")):
        text = path.read_text()
        named = set(re.findall(r"SPARKPOINT_[A-Z_]+", text)) - {"SPARKPOINT_ERROR"}
        assert named <= declared, f"{path}: {sorted(named - declared)} not in settings.py"
        if path.name == "settings.py":
            continue
        tree = ast.parse(text)
        ours = _sparkpoint_names(tree)
        for key in _environment_reads(tree):
            read = ast.unparse(key)
            assert "SPARKPOINT_" not in read and read not in ours, \
                f"{path}: reads {read} from the environment; read it through settings.py"
