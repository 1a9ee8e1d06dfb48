"""A pytest plugin of mutation runs (``-p mutation_hits``, benchmarks/mutation.py): before
mutmut files the functions a test reached, the hits of the processes the test started
(sitecustomize.py beside this file) are added to them."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

HITS_ENV = "SPARKPOINT_MUTATION_HITS"


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_teardown(item: Any, nextitem: Any) -> None:
    directory = os.environ.get(HITS_ENV)
    if os.environ.get("MUTANT_UNDER_TEST") != "stats" or not directory:
        return
    from mutmut.state import state

    for hits in Path(directory).glob("*.hits"):
        state()._stats.update(hits.read_text().split())
        hits.unlink()
