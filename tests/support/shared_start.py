"""A starting state several tests of a module begin from (a job run over its input, a
snapshot of it, a plain Spark run's checkpoint...), built once per module and handed to each
test as a fresh copy: the build's Spark runs are paid once, not once per test.

The copy lies at the very path the state was built at: a checkpoint and a home record
absolute paths (the file source's log names its input files, the file sink's log its output
files, a job record its parameters), so a copy elsewhere would be another input and another
output. Each test therefore starts by putting the saved copy back in place. A module fixture
belongs to one test process (each xdist worker builds its own) and a process runs its tests
one after the other, so no two tests use the directory at the same time. Files are copied
with their modification times, which Spark's file source orders and remembers its files by.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest


@dataclass(frozen=True)
class SharedStart:
    root: Path  # where the tests work; the state's recorded paths point under it
    saved: Path  # the state as built, never used in place

    def fresh(self) -> Path:
        """``root`` as the build left it, whatever an earlier test did there."""
        shutil.rmtree(self.root, ignore_errors=True)
        shutil.copytree(self.saved, self.root, symlinks=True)
        return self.root


def build_once(factory: pytest.TempPathFactory, name: str,
               build: Callable[[Path], None]) -> SharedStart:
    """Runs ``build`` in a new directory, then saves what it left there."""
    base = factory.mktemp(name)
    root, saved = base / "work", base / "saved"
    root.mkdir()
    build(root)
    shutil.copytree(root, saved, symlinks=True)
    return SharedStart(root, saved)
