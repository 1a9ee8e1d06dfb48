"""The input files of Spark's file source, listed the way the source lists them.

The source keeps every file it has read in its log (``sources/<name>/<k>``) and, on each
trigger, reads the files of its directory that are not in the log, ordered by modification
time in milliseconds. A position of a file source is therefore a set of files it considers
read: a log entry listing files makes the source skip them.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

from sparkpoint.errors import ValidationError


@dataclass(frozen=True)
class InputFile:
    uri: str
    mtime_ms: int


def _hidden(name: str) -> bool:
    # Spark's InMemoryFileIndex.shouldFilterOutPathName: "_x" (unless a partition "k=v" or
    # Parquet summary metadata), ".x" and files still being copied are not input.
    if name.startswith("_metadata") or name.startswith("_common_metadata"):
        return False
    return ((name.startswith("_") and "=" not in name) or name.startswith(".")
            or name.endswith("._COPYING_"))


def local_directory(path: str, source: str) -> Path:
    """The local directory of a file source's ``path`` option (a path or a file: URI)."""
    parsed = urlparse(path)
    if parsed.scheme not in ("", "file"):
        raise ValidationError(
            f"source '{source}': its path {path} is not on the local file system; sparkpoint "
            "resolves file positions on local paths only")
    directory = Path(parsed.path if parsed.scheme else path).absolute()
    if any(ch in str(directory) for ch in "*?[{"):
        raise ValidationError(
            f"source '{source}': its path {path} is a glob; sparkpoint resolves file positions "
            "on a plain directory only")
    return directory


def input_files(directory: Path) -> list[InputFile]:
    """Every input file under ``directory`` (recursively, as Spark lists), oldest first."""
    found: list[InputFile] = []
    if not directory.is_dir():
        return found
    for root, dirs, files in os.walk(directory):
        dirs[:] = sorted(d for d in dirs if not _hidden(d))
        for name in files:
            if _hidden(name):
                continue
            path = Path(root) / name
            mtime_ms = path.stat().st_mtime_ns // 1_000_000
            found.append(InputFile(path.as_uri(), mtime_ms))
    return sorted(found, key=lambda f: (f.mtime_ms, f.uri))

