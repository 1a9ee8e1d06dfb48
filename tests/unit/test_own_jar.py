"""The committed jar was built from the committed Java sources (scripts/build-jar.sh records
their SHA-256 in its manifest)."""

from __future__ import annotations

import hashlib
import zipfile
from pathlib import Path

import pytest

from sparkpoint.spark.local_fs import NIO_LOCAL_FS
from sparkpoint.spark.own_jar import jar_path, with_jar
from sparkpoint.spark.session import spark_defaults
from sparkpoint.spark.state_prune import UNSAFE_ROW_BYTES

SOURCES = Path(__file__).resolve().parents[2] / "java"


def _manifest(jar: Path) -> dict[str, str]:
    text = zipfile.ZipFile(jar).read("META-INF/MANIFEST.MF").decode()
    # Manifest lines longer than 72 bytes continue on lines that start with a space.
    joined = text.replace("\r\n", "\n").replace("\n ", "")
    return dict(line.split(": ", 1) for line in joined.splitlines() if ": " in line)


def test_jar_matches_the_sources() -> None:
    # scripts/build-jar.sh hashes them in byte order of their paths (LC_ALL=C sort).
    sources = sorted(SOURCES.rglob("*.java"), key=lambda path: str(path).encode())
    digest = hashlib.sha256(b"".join(path.read_bytes() for path in sources)).hexdigest()
    assert _manifest(jar_path())["Source-SHA256"] == digest, (
        "java/ changed since the jar was built: run scripts/build-jar.sh")


def test_jar_holds_the_classes_spark_is_given() -> None:
    names = zipfile.ZipFile(jar_path()).namelist()
    for name in (NIO_LOCAL_FS, UNSAFE_ROW_BYTES):
        assert name.replace(".", "/") + ".class" in names


def test_the_jars_of_spark_defaults_conf_are_kept_beside_the_own_jar(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # PySpark's --conf spark.jars would replace the file's: a connector given there once
    # must still reach every session sparkpoint starts; a spark.jars given wins, as in Spark.
    (tmp_path / "spark-defaults.conf").write_text(
        "# the connector, for every command\n"
        "spark.jars   local:/opt/a.jar, local:/opt/b.jar\n"
        "spark.sql.shuffle.partitions=7\n! another comment\nspark.master: local[3]\n")
    monkeypatch.setenv("SPARK_CONF_DIR", str(tmp_path))
    defaults = spark_defaults()
    assert defaults == {"spark.jars": "local:/opt/a.jar, local:/opt/b.jar",
                        "spark.sql.shuffle.partitions": "7", "spark.master": "local[3]"}
    own = str(jar_path())
    assert with_jar({}, defaults)["spark.jars"] == f"local:/opt/a.jar,local:/opt/b.jar,{own}"
    assert with_jar({"spark.jars": "/x.jar"}, defaults)["spark.jars"] == f"/x.jar,{own}"
    monkeypatch.setenv("SPARK_CONF_DIR", str(tmp_path / "none"))
    assert spark_defaults() == {}
