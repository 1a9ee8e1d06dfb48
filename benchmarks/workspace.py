"""Work directories and key inputs shared by the benchmark scripts."""

from __future__ import annotations

import itertools
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def work_dir(prefix: str, keep: bool) -> Iterator[Path]:
    """A new temporary directory, removed afterwards unless ``keep`` (then its path is
    printed)."""
    work = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        yield work
    finally:
        if keep:
            print(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


def write_keys(directory: Path, keys: int, files: int, first: int = 0) -> None:
    """N distinct keys (``k0000000000`` ... from key number ``first``) over ``files`` parquet
    files, each key once, written a file at a time (bounded memory); files are numbered on
    from those ``directory`` already holds."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    directory.mkdir(parents=True, exist_ok=True)
    held = len(list(directory.glob("part-*.parquet")))
    bounds = [first + keys * i // files for i in range(files + 1)]
    for index, (start, end) in enumerate(itertools.pairwise(bounds), start=held):
        table = pa.table({"key": pa.array([f"k{n:010d}" for n in range(start, end)])})
        pq.write_table(table, directory / f"part-{index:03d}.parquet")


def tree_bytes(root: Path) -> int:
    """Bytes of every file under ``root``."""
    return sum(os.path.getsize(os.path.join(dirpath, name))
               for dirpath, _dirs, files in os.walk(root) for name in files)
