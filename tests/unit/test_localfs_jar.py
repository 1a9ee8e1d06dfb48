"""The committed jar was built from the committed Java sources (scripts/build-localfs-jar.sh
records their SHA-256 in its manifest)."""

from __future__ import annotations

import hashlib
import zipfile
from pathlib import Path

from sparkpoint.spark.local_fs import NIO_LOCAL_FS, jar_path

SOURCES = Path(__file__).resolve().parents[2] / "java" / "sparkpoint" / "hadoop"


def _manifest(jar: Path) -> dict[str, str]:
    text = zipfile.ZipFile(jar).read("META-INF/MANIFEST.MF").decode()
    # Manifest lines longer than 72 bytes continue on lines that start with a space.
    joined = text.replace("\r\n", "\n").replace("\n ", "")
    return dict(line.split(": ", 1) for line in joined.splitlines() if ": " in line)


def test_jar_matches_the_sources() -> None:
    sources = sorted(SOURCES.glob("*.java"))
    digest = hashlib.sha256(b"".join(path.read_bytes() for path in sources)).hexdigest()
    assert _manifest(jar_path())["Source-SHA256"] == digest, (
        "java/ changed since the jar was built: run scripts/build-localfs-jar.sh")


def test_jar_holds_the_class_spark_is_given() -> None:
    names = zipfile.ZipFile(jar_path()).namelist()
    assert NIO_LOCAL_FS.replace(".", "/") + ".class" in names
