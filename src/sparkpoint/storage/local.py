"""Filesystem access for sparkpoint's home and Spark checkpoints.

Local paths (and ``file:`` URIs): a local home, or the local working copy of a home on S3
or HDFS (storage/remote_home.py); remote stores themselves go through storage/fileio.py.
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlparse

import xxhash

from sparkpoint.errors import UsageError

_COPY_CHUNK = 1 << 20


def to_path(location: str | os.PathLike[str]) -> Path:
    """Turn a path or ``file:`` URI into an absolute local path."""
    text = os.fspath(location)
    if "://" in text or text.startswith("file:"):
        parsed = urlparse(text)
        if parsed.scheme != "file":
            raise UsageError(
                f"{text}: expected a local path or file: URI here, found scheme "
                f"'{parsed.scheme}'; give a local directory (a home may be s3:// or hdfs://, "
                "see --home)"
            )
        text = parsed.path
    return Path(text).expanduser().absolute()


def is_hidden_or_temp(name: str) -> bool:
    """Hadoop's ``.crc`` siblings, ``.tmp`` files and dot-files are not data."""
    return name.startswith(".") or name.startswith("_") or name.endswith(".tmp")


def numbered_files(directory: Path) -> list[int]:
    """Batch ids of files named by a plain number, as in Spark's metadata logs."""
    if not directory.is_dir():
        return []
    ids = []
    for entry in directory.iterdir():
        if entry.is_file() and entry.name.isdigit():
            ids.append(int(entry.name))
    return sorted(ids)


def _durable_temp(path: Path, data: bytes) -> Path:
    """``data`` written and synced under a temp name beside ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.parent / f".{path.name}.{uuid.uuid4().hex}.tmp"
    with open(tmp, "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())
    return tmp


def write_atomic(path: Path, data: bytes) -> None:
    """Write under a temp name in the same directory, then rename over the target."""
    os.replace(_durable_temp(path, data), path)


def write_new(path: Path, data: bytes) -> bool:
    """Create ``path`` with ``data`` unless it exists; False when it did. A complete temp file
    is linked to the name: link() refuses an existing name, so of two creators exactly one
    wins and nobody sees a half-written file."""
    tmp = _durable_temp(path, data)
    try:
        os.link(tmp, path)
    except FileExistsError:
        return False
    finally:
        tmp.unlink(missing_ok=True)
    return True


def remove_checksum_sibling(path: Path) -> None:
    """Remove Hadoop's ``.<name>.crc`` of ``path``: a checksum of old content must not outlive
    it (Spark 4.3 did not check it for local files, Hadoop readers that verify would)."""
    (path.parent / f".{path.name}.crc").unlink(missing_ok=True)


def replace_file(path: Path, data: bytes) -> None:
    """Rewrite a file of a Spark checkpoint: checksum sibling dropped, content renamed in."""
    remove_checksum_sibling(path)
    write_atomic(path, data)


CHECKSUM_ALGORITHM = "xxh3_128"


def checksum_of(path: Path) -> tuple[int, str]:
    """(bytes, xxh3-128 hex digest) of a file.

    xxh3 detects corruption as well as a cryptographic hash does for our purpose (no
    adversary) at memory speed, which keeps snapshot creation bound by the copy.
    """
    with open(path, "rb", buffering=0) as reader:
        # Most checkpoint files are small: read whole, no chunk buffer to allocate.
        head = reader.read(_COPY_CHUNK)
        if len(head) < _COPY_CHUNK and not (more := reader.read(_COPY_CHUNK)):
            return len(head), xxhash.xxh3_128_hexdigest(head)
        digest = xxhash.xxh3_128(head)
        size = len(head)
        if len(head) < _COPY_CHUNK:
            digest.update(more)
            size += len(more)
        buffer = bytearray(_COPY_CHUNK)
        view = memoryview(buffer)
        while count := reader.readinto(buffer):
            digest.update(view[:count])
            size += count
    return size, digest.hexdigest()


def copy_file(src: Path, dst: Path) -> None:
    """Copy through the kernel (copy_file_range/sendfile) and make the copy durable."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(src, dst)
    shutil.copystat(src, dst)
    with open(dst, "rb") as handle:
        os.fsync(handle.fileno())


def link_or_copy(src: Path, dst: Path) -> None:
    """Hard-link an immutable file, or copy it when linking is impossible.

    Spark never rewrites a checkpoint file in place: it writes new files and renames over
    or deletes old ones, which leaves another link to the same data untouched. A link is
    therefore as good as a copy for files of a committed batch, and costs no I/O.
    """
    dst.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(src, dst)
    except OSError:
        copy_file(src, dst)


def walk_files(root: Path) -> Iterator[Path]:
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            yield Path(dirpath) / name


def tree_bytes(root: Path) -> int:
    """Bytes of every file under ``root`` (0 when it does not exist)."""
    return sum(path.stat().st_size for path in walk_files(root)) if root.is_dir() else 0


def fsync_dir(path: Path) -> None:
    """Make a rename in ``path`` durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
