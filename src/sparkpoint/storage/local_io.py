"""The local filesystem as a store: atomic renames, hard links, create-if-absent by a hard
link (storage/local.py), paths or ``file://`` URLs."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Sequence
from pathlib import Path

import fsspec

from sparkpoint.storage.fileio import Capabilities, FileIO, local_path
from sparkpoint.storage.local import write_atomic, write_new


class LocalFileIO(FileIO):
    def __init__(self) -> None:
        super().__init__(
            fsspec.filesystem("file"),
            Capabilities(atomic_rename=True, hard_links=True, server_side_copy=False,
                         conditional_create=True),
        )

    def path(self, location: str) -> str:
        return local_path(location)

    def _write_bytes(self, location: str, data: bytes) -> None:
        write_atomic(Path(self.path(location)), data)

    def _remove_empty_dir(self, location: str) -> None:
        with contextlib.suppress(OSError):  # absent, or not empty
            os.rmdir(self.path(location))

    def _create_exclusive(self, location: str, data: bytes) -> bool:
        return write_new(Path(self.path(location)), data)

    def _put_files(self, pairs: Sequence[tuple[Path, str]], show_progress: bool,
                   description: str, fence: Callable[[], None]) -> None:
        for _, location in pairs:
            Path(self.path(location)).parent.mkdir(parents=True, exist_ok=True)
        super()._put_files(pairs, show_progress, description, fence)
