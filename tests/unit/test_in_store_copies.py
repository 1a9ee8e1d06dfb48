"""Which of a snapshot's files the store copies itself, and how a copied file is named and
checked: S3's CopyObject takes up to 5 GiB in one request, so larger state files go through
the process as before; a copied file's blob is named by its source's ETag, apart from the
blobs named by a checksum; a local copy is checked by the checksum its entry has."""

from __future__ import annotations

import base64
import hashlib
from pathlib import Path

import pytest

from sparkpoint.snapshot.export import COPY_REQUEST_LIMIT, InStoreCopies
from sparkpoint.snapshot.manifest import FileEntry, content_mismatch
from sparkpoint.snapshot.object_store import blob_name, is_state_data
from sparkpoint.storage.fileio import StoredFile
from sparkpoint.storage.local_io import LocalFileIO
from sparkpoint.storage.location import StorePath


def test_files_above_one_copy_request_are_fetched_the_rest_copied() -> None:
    io = LocalFileIO()
    copies = InStoreCopies(io)
    pdir = StorePath(io, "/ckpt/state/0/1")
    listed = {
        "5.zip": StoredFile("/ckpt/state/0/1/5.zip", 1000, None, "e1"),
        "SSTs/a.sst": StoredFile("/ckpt/state/0/1/SSTs/a.sst", COPY_REQUEST_LIMIT + 1, None,
                                 "e2"),
    }
    total = copies.take(pdir, "state/0/1", ["5.zip", "SSTs/a.sst"], listed)
    assert total == 1000 + COPY_REQUEST_LIMIT + 1
    assert set(copies.files) == {"state/0/1/5.zip"}
    assert copies.fetched == {"state/0/1/SSTs/a.sst": pdir / "SSTs/a.sst"}
    # A file the listing lacks was deleted meanwhile: the export starts over.
    with pytest.raises(FileNotFoundError):
        copies.take(pdir, "state/0/1", ["6.zip"], listed)


def test_a_copied_files_blob_is_named_apart_from_checksummed_ones() -> None:
    copied = FileEntry(path="checkpoint/state/0/0/1.zip", bytes=7, etag="abc-2",
                       sha256="x")
    hashed = FileEntry(path="checkpoint/state/0/0/1.zip", bytes=7, xxh3_128="ab" * 16)
    assert blob_name(copied) == "etag/abc-2-7"
    assert blob_name(hashed) == f"ab/{'ab' * 16}-7"
    with pytest.raises(ValueError, match="xxh3_128 checksum or its store's etag"):
        FileEntry(path="p", bytes=1)


@pytest.mark.parametrize(("path", "state"), [
    ("checkpoint/state/0/3/12.zip", True),
    ("checkpoint/state/0/3/SSTs/000010-x.sst", True),
    ("checkpoint/state/1/0/left/4.delta", True),
    ("checkpoint/state/0/_metadata/metadata", False),
    ("checkpoint/state/0/3/_metadata/schema", False),
    ("checkpoint/state/0/_stateSchema/default/0_x", False),
    ("checkpoint/offsets/4", False),
])
def test_state_data_is_what_a_start_may_leave_in_the_store(path: str, state: bool) -> None:
    assert is_state_data(path) == state


def test_a_local_copy_is_checked_by_the_checksum_its_entry_has(tmp_path: Path) -> None:
    data = b"state bytes"
    path = tmp_path / "f"
    path.write_bytes(data)
    sha = base64.b64encode(hashlib.sha256(data).digest()).decode()
    md5 = hashlib.md5(data).hexdigest()
    assert content_mismatch(path, FileEntry(path="f", bytes=len(data), etag=md5,
                                            sha256=sha)) is None
    # Without the store's SHA-256, a single-part ETag is the bytes' MD5.
    assert content_mismatch(path, FileEntry(path="f", bytes=len(data), etag=md5)) is None
    path.write_bytes(b"state bytez")
    found = content_mismatch(path, FileEntry(path="f", bytes=len(data), etag=md5, sha256=sha))
    assert found is not None and "sha256" in found
    assert content_mismatch(path, FileEntry(path="f", bytes=len(data), etag=md5)) is not None
