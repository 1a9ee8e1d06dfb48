"""Progress bars (sparkpoint.progress): drawn on stderr only when it is a terminal and the
process was not made quiet (``--json``), never changing what the loop they count yields."""

from __future__ import annotations

import io
import re
import sys

import pytest

from sparkpoint import progress
from sparkpoint.errors import UsageError


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def _on_a_terminal(monkeypatch: pytest.MonkeyPatch) -> _Terminal:
    # In the test's body: pytest puts its own capture back on sys.stderr after fixtures ran.
    screen = _Terminal()
    monkeypatch.setattr(sys, "stderr", screen)
    monkeypatch.setattr(progress, "_enabled", True)
    monkeypatch.setenv(progress.SHOW_AFTER_ENV, "0")
    return screen


def test_a_bar_counts_the_items_on_a_terminal_and_yields_them_all(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    terminal = _on_a_terminal(monkeypatch)
    assert list(progress.track(range(7), "prune: rewriting 'seen'", unit="partition")) == \
        list(range(7))
    drawn = terminal.getvalue()
    assert "prune: rewriting 'seen'" in drawn and "/7 " in drawn and "partition/s" in drawn


def test_nothing_is_drawn_off_a_terminal_or_when_quiet(monkeypatch: pytest.MonkeyPatch) -> None:
    terminal = _on_a_terminal(monkeypatch)
    monkeypatch.setattr(terminal, "isatty", lambda: False)
    assert list(progress.track(iter("abc"), "inspect: x", total=3)) == ["a", "b", "c"]
    with progress.phase("drain: batch 4"):
        pass
    progress.write("a step line")
    assert terminal.getvalue() == "a step line\n"

    monkeypatch.setattr(terminal, "isatty", lambda: True)
    progress.quiet()
    assert list(progress.track([1, 2], "inspect: x")) == [1, 2]
    assert not progress.shown()
    assert terminal.getvalue() == "a step line\n"


def test_short_work_draws_nothing_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    terminal = _on_a_terminal(monkeypatch)
    monkeypatch.delenv(progress.SHOW_AFTER_ENV)
    assert progress.show_after() == progress.DEFAULT_SHOW_AFTER_SECONDS
    assert sum(progress.track(range(1000), "snapshot: checksums")) == sum(range(1000))
    assert terminal.getvalue() == ""
    monkeypatch.setenv(progress.SHOW_AFTER_ENV, "-3")
    assert progress.show_after() == 0.0
    monkeypatch.setenv(progress.SHOW_AFTER_ENV, "soon")
    with pytest.raises(UsageError, match=re.escape(
            "SPARKPOINT_PROGRESS_AFTER='soon': expected a number of seconds, found 'soon'; "
            "set it to e.g. 1 or unset it")):
        progress.show_after()


def test_a_phase_is_drawn_with_its_name_and_a_line_written_beside_a_bar_keeps_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    terminal = _on_a_terminal(monkeypatch)
    with progress.phase("repartition: Spark's offline repartition"):
        progress.write("repartitioning state from 4 to 3 partitions")
    drawn = terminal.getvalue()
    assert "repartition: Spark's offline repartition" in drawn
    assert "repartitioning state from 4 to 3 partitions\n" in drawn
