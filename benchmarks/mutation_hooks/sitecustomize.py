"""Started in every Python process of a mutation run (benchmarks/mutation.py puts this
directory on PYTHONPATH): while mutmut collects which tests reach which function, a
sparkpoint process that a test started (a CLI command, a contender, a crash point) records
the functions it reached in a file of its own, so that the test counts as reaching them.

mutmut records a hit in the memory of the process that made it, and the tests of the
protocols run sparkpoint in processes of its own; without this, a function reached only
there has "no tests" and its mutants are never run. The record goes to a file at once
(not at exit): a process cut off at a crash point leaves no exit handler to run.
"""

from __future__ import annotations

import os

HITS_ENV = "SPARKPOINT_MUTATION_HITS"


def _record_hits_in_a_file(directory: str) -> None:
    import mutmut.mutation.trampoline as trampoline

    seen: set[str] = set()
    path = os.path.join(directory, f"{os.getpid()}.hits")

    def record(name: str, caller: str | None = None) -> None:
        if name in seen:
            return
        seen.add(name)
        # One write of one line with O_APPEND: whole even if the process dies right after.
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            os.write(fd, (name + "\n").encode())
        finally:
            os.close(fd)

    trampoline.record_trampoline_hit = record  # type: ignore[assignment]


if os.environ.get("MUTANT_UNDER_TEST") == "stats" and os.environ.get(HITS_ENV):
    _record_hits_in_a_file(os.environ[HITS_ENV])
