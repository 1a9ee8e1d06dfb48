"""A file or directory of a home on S3 or HDFS, used where a local ``pathlib.Path`` is.

A home's jobs (records, intents, progress, checkpoints) are read and written where they
live, whatever the store: code that takes a job's or a checkpoint's directory takes a
``Location``, either a local ``Path`` (a home on local disk) or a ``StorePath`` (a URL of a
home on S3 or HDFS read and written through its FileIO). ``StorePath`` offers the part of
``pathlib.Path``'s interface that sparkpoint's readers and writers use, with the same
meaning, so one piece of code serves both; each call is a request to the store, never a
look at a local copy.

Writes replace a whole file atomically (FileIO.write_bytes: one PUT on S3, a temp file
renamed on HDFS). A directory on S3 is a key prefix: it exists while a file is under it,
and ``mkdir`` has nothing to do.
"""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from sparkpoint.storage import local
from sparkpoint.storage.fileio import FileIO, is_local, join
from sparkpoint.storage.fileio import local_path as local_text
from sparkpoint.storage.stores import file_io


@dataclass(frozen=True)
class StoreStat:
    st_size: int
    # The store's own modification time (seconds since the epoch); 0.0 when it gives none.
    st_mtime: float


@dataclass(frozen=True)
class StorePath:
    io: FileIO
    url: str

    @classmethod
    def of(cls, url: str) -> StorePath:
        return cls(file_io(url), url.rstrip("/"))

    def __truediv__(self, part: str) -> StorePath:
        return StorePath(self.io, join(self.url, str(part)))

    def __str__(self) -> str:
        return self.url

    @property
    def name(self) -> str:
        return self.url.rstrip("/").rsplit("/", 1)[-1]

    @property
    def parent(self) -> StorePath:
        return StorePath(self.io, self.url.rstrip("/").rsplit("/", 1)[0])

    def as_posix(self) -> str:
        return self.url

    def relative_to(self, other: StorePath) -> Path:
        base = other.url.rstrip("/") + "/"
        if not self.url.startswith(base):
            raise ValueError(f"{self.url} is not under {other.url}")
        return Path(self.url[len(base):])

    # --- reading -------------------------------------------------------------------------

    def is_file(self) -> bool:
        return self.io.is_file(self.url)

    def is_dir(self) -> bool:
        return bool(self.io.list_names(self.url))

    def exists(self) -> bool:
        return self.is_file() or self.is_dir()

    def iterdir(self) -> Iterator[StorePath]:
        for name in self.io.list_names(self.url):
            yield self / name

    def read_bytes(self) -> bytes:
        return self.io.read_bytes(self.url)

    def read_text(self, encoding: str = "utf-8") -> str:
        return self.read_bytes().decode(encoding)

    def stat(self) -> StoreStat:
        size, modified = self.io.stat(self.url)
        return StoreStat(size, modified or 0.0)

    def rglob(self, pattern: str) -> Iterator[StorePath]:
        """Every file under this directory (``pattern`` must be '*': all that is used)."""
        if pattern != "*":
            raise ValueError(f"rglob({pattern!r}): only '*' is supported")
        for rel in sorted(self.io.walk_sizes(self.url)):
            yield self / rel

    def __lt__(self, other: StorePath) -> bool:
        return self.url < other.url

    def glob(self, pattern: str) -> Iterator[StorePath]:
        """The paths matching ``pattern``: '/'-separated parts, each a name or '*'."""
        found = [self]
        for part in pattern.split("/"):
            if part == "*":
                found = [child for base in found for child in base.iterdir()]
            else:
                found = [base / part for base in found if (base / part).exists()]
        yield from found

    # --- writing -------------------------------------------------------------------------

    def write_bytes(self, data: bytes) -> int:
        self.io.write_bytes(self.url, data)
        return len(data)

    def write_text(self, text: str, encoding: str = "utf-8") -> int:
        return self.write_bytes(text.encode(encoding))

    def unlink(self, missing_ok: bool = False) -> None:
        if not missing_ok and not self.is_file():
            raise FileNotFoundError(self.url)
        self.io.delete(self.url)

    def mkdir(self, parents: bool = False, exist_ok: bool = False) -> None:
        with contextlib.suppress(FileExistsError):
            self.io.makedirs(self.url)


# What a job's or a checkpoint's directory is: local, or in a store.
Location = Path | StorePath


def location_at(text: str) -> Location:
    """The directory a user named: a local path (made absolute), or a URL of a store
    sparkpoint reads (``s3a://`` and ``s3://`` alike, ``hdfs://``...) kept as written, so
    that messages and records name it as the user and Spark do. An unknown scheme is a
    UsageError naming the schemes that work."""
    if is_local(text):
        return Path(local_text(text))
    return StorePath.of(text)


def local_path(location: Location) -> Path:
    """``location`` as a local path, where only a local directory can be meant (a snapshot's
    staging directory, a checkpoint being built): a StorePath there is a bug."""
    if not isinstance(location, Path):
        raise TypeError(f"{location}: a local directory was expected here")
    return location


def numbered_files(directory: Location) -> list[int]:
    """Batch ids of files named by a plain number, as in Spark's metadata logs (one listing:
    a directory's entries named by a number are Spark's log files, never directories)."""
    if isinstance(directory, Path):
        return local.numbered_files(directory)
    return sorted(int(entry.name) for entry in directory.iterdir() if entry.name.isdigit())


def write_atomic(path: Location, data: bytes) -> None:
    """Replace the whole file; a reader sees the old or the new content, never a part."""
    if isinstance(path, Path):
        local.write_atomic(path, data)
    else:
        path.write_bytes(data)


def remove_checksum_sibling(path: Location) -> None:
    """Remove Hadoop's ``.<name>.crc`` of ``path``: a checksum of old content must not outlive
    it."""
    (path.parent / f".{path.name}.crc").unlink(missing_ok=True)


def replace_file(path: Location, data: bytes) -> None:
    """Rewrite a file of a Spark checkpoint (its Hadoop checksum sibling dropped)."""
    remove_checksum_sibling(path)
    write_atomic(path, data)


def copy_into(pairs: list[tuple[Location, Path]]) -> None:
    """Each source to its local destination: a local file hard-linked (Spark never rewrites
    a checkpoint file in place, so a link is as good as a copy), a file in a store fetched
    (several at once)."""
    fetched: dict[int, tuple[FileIO, list[tuple[str, Path]]]] = {}
    for src, dst in pairs:
        if isinstance(src, Path):
            local.link_or_copy(src, dst)
        else:
            fetched.setdefault(id(src.io), (src.io, []))[1].append((src.url, dst))
    for io, transfers in fetched.values():
        io.get_files(transfers)


def copy_file(src: Location, dst: Location) -> None:
    """Copy one file, within a store or between local disk and a store."""
    if isinstance(src, Path) and isinstance(dst, Path):
        local.copy_file(src, dst)
    elif isinstance(dst, Path):
        assert isinstance(src, StorePath)
        src.io.get_files([(src.url, dst)])
    elif isinstance(src, Path):
        dst.io.put_files([(src, dst.url)])
    else:
        dst.write_bytes(src.read_bytes())


def tree_bytes(root: Location) -> int:
    """Bytes of every file under ``root`` (0 when it does not exist)."""
    if isinstance(root, Path):
        return local.tree_bytes(root)
    return sum(root.io.walk_sizes(root.url).values())


def remove_tree(root: Location) -> None:
    if isinstance(root, Path):
        shutil.rmtree(root, ignore_errors=True)
    else:
        root.io.delete_tree(root.url)
