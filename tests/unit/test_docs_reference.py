"""The documentation's generated reference (scripts/gen_docs_reference.py, run by the site's
build) lists every command, error code, SPARKPOINT_* variable and crash point, each found
here independently of the generator (from the click tree, the source of errors.py, the
source files, the crash_point calls): a new one that is missing, or has no words for the
reference (a command without help, an error without a fix), fails here. The site's strict
build (.ci/run) checks the links."""

from __future__ import annotations

import ast
import re
import runpy
from pathlib import Path
from typing import Any

import click
import pytest
import yaml

from sparkpoint.cli.main import cli

REPO = Path(__file__).resolve().parents[2]
SOURCE = REPO / "src" / "sparkpoint"


@pytest.fixture(scope="module")
def generator() -> dict[str, Any]:
    return runpy.run_path(str(REPO / "scripts" / "gen_docs_reference.py"), run_name="docs")


@pytest.fixture(scope="module")
def pages(generator: dict[str, Any]) -> dict[str, str]:
    generated: dict[str, str] = generator["pages"]()
    return generated


def _all_commands(group: click.Group, prefix: str) -> list[tuple[str, click.Command]]:
    found = []
    for name, command in group.commands.items():
        found.append((f"{prefix} {name}", command))
        if isinstance(command, click.Group):
            found += _all_commands(command, f"{prefix} {name}")
    return found


def test_every_command_and_option_is_in_the_cli_reference_with_its_help(
    pages: dict[str, str],
) -> None:
    page = pages["reference/cli.md"]
    commands = _all_commands(cli, "sparkpoint")
    assert len(commands) >= 25
    for full, command in commands:
        assert f"# `{full}`\n" in page, f"{full} is not in the CLI reference"
        assert (command.help or "").strip(), f"{full} has no help text for the reference"
        for param in command.params:
            if isinstance(param, click.Option):
                assert param.help, f"{full} {param.opts[0]} has no help text"
                assert f"`{param.opts[0]}" in page or f", {param.opts[0]}" in page


def _error_codes() -> dict[str, tuple[str, str | None]]:
    """Class name -> (code, docstring) of every class errors.py defines a code in."""
    tree = ast.parse((SOURCE / "errors.py").read_text())
    codes = {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            for statement in node.body:
                if isinstance(statement, ast.Assign) and \
                        [ast.unparse(t) for t in statement.targets] == ["code"]:
                    codes[node.name] = (ast.literal_eval(statement.value),
                                        ast.get_docstring(node))
    return codes


def test_every_error_code_is_in_the_reference_with_its_meaning_and_fix(
    pages: dict[str, str],
) -> None:
    page = pages["reference/errors.md"]
    codes = _error_codes()
    assert len(codes) >= 30
    for name, (code, doc) in codes.items():
        assert doc and "Fix:" in doc and doc.index("Fix:") > 10, \
            f"{name} ({code}) needs a docstring: what it means, then 'Fix: what to do'"
        row = next((line for line in page.splitlines() if line.startswith(f"| `{code}` |")),
                   None)
        assert row is not None, f"{code} is not in the errors reference"
        meaning, fix = row.split(" | ")[2:4]
        assert meaning.strip() and fix.strip(" |"), row
    # Codes the CLI gives outside errors.py.
    for code in ("UNEXPECTED", "USAGE"):
        assert f"| `{code}` |" in page


def test_every_sparkpoint_variable_in_the_code_is_in_the_environment_reference(
    pages: dict[str, str],
) -> None:
    page = pages["reference/environment.md"]
    named = set()
    for path in SOURCE.rglob("*.py"):
        named |= set(re.findall(r"SPARKPOINT_[A-Z_]+", path.read_text()))
    named.discard("SPARKPOINT_ERROR")  # the root error's code, not a variable
    assert len(named) >= 12
    for name in sorted(named):
        row = next((line for line in page.splitlines() if line.startswith(f"| `{name}` |")),
                   None)
        assert row is not None, f"{name} is not in the environment reference"
        assert row.count(" | ") == 4 and "|  |" not in row, row


def test_every_crash_point_the_code_calls_is_in_the_reference(pages: dict[str, str]) -> None:
    page = pages["reference/crash-points.md"]
    called = set()
    for path in SOURCE.rglob("*.py"):
        called |= set(re.findall(r"crash_point\(\s*\"([a-z_]+\.[a-z_]+)\"", path.read_text()))
    assert len(called) >= 40
    for name in sorted(called):
        assert f"| `{name}` |" in page, f"crash point {name} is not in the reference"


def test_every_page_is_in_the_site_and_the_readme_lists_every_command(
    pages: dict[str, str],
) -> None:
    config = yaml.load((REPO / "mkdocs.yml").read_text(), Loader=yaml.BaseLoader)

    def listed(entries: Any) -> list[str]:
        if isinstance(entries, str):
            return [entries]
        if isinstance(entries, dict):
            return [page for value in entries.values() for page in listed(value)]
        return [page for entry in entries for page in listed(entry)]

    in_nav = set(listed(config["nav"]))
    written = {str(path.relative_to(REPO / "docs")) for path in (REPO / "docs").rglob("*.md")}
    assert in_nav == written | set(pages), (in_nav ^ (written | set(pages)))
    assert "scripts/gen_docs_reference.py" in (REPO / "mkdocs.yml").read_text()

    readme = (REPO / "README.md").read_text()
    for full, command in _all_commands(cli, "sparkpoint"):
        if not isinstance(command, click.Group):
            assert f"`{full}" in readme, f"README's command list lacks {full}"
