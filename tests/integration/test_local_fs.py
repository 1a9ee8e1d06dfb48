"""sparkpoint's local file system for its own state rewrites (spark/local_fs.py).

The facts it rests on, measured on pyspark 4.3.0: pyspark ships no Hadoop native library,
so Hadoop's local file system sets every permission by starting ``chmod``; the class sets
them through java.nio instead, with the same bits and Hadoop's checksum files."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from sparkpoint.spark import local_fs, own_jar

pytestmark = pytest.mark.spark


def _file_system(spark: object, impl: str) -> object:
    jvm = spark._jvm  # type: ignore[attr-defined]
    conf = spark._jsparkSession.sessionState().newHadoopConf()  # type: ignore[attr-defined]
    conf.set("fs.file.impl", impl)
    conf.set("fs.file.impl.disable.cache", "true")
    return jvm.org.apache.hadoop.fs.FileSystem.get(jvm.java.net.URI.create("file:///"), conf)


def test_pyspark_has_no_hadoop_native_library_so_permissions_start_processes(spark) -> None:
    """Why the class exists: without libhadoop, RawLocalFileSystem.setPermission runs
    ``chmod`` (Shell.execCommand) for each file and directory Hadoop creates."""
    jvm = spark._jvm
    assert not jvm.org.apache.hadoop.util.NativeCodeLoader.isNativeCodeLoaded()
    assert not jvm.org.apache.hadoop.io.nativeio.NativeIO.isAvailable()


@pytest.mark.parametrize("impl", ["org.apache.hadoop.fs.LocalFileSystem", local_fs.NIO_LOCAL_FS])
def test_files_and_directories_get_the_permissions_hadoop_gives(spark, tmp_path: Path,
                                                                impl: str) -> None:
    """Hadoop's own class and sparkpoint's give the same bytes, modes and checksum files."""
    jvm = spark._jvm
    fs = _file_system(spark, impl)
    permission = jvm.org.apache.hadoop.fs.permission.FsPermission
    directory = jvm.org.apache.hadoop.fs.Path(f"file://{tmp_path}/made/deeper")
    assert fs.mkdirs(directory, permission.createImmutable(0o750))
    target = jvm.org.apache.hadoop.fs.Path(f"file://{tmp_path}/made/deeper/data.bin")
    out = fs.create(target, permission.createImmutable(0o640), False, 4096, 1, 1 << 20, None)
    out.write(bytearray(b"state bytes"))
    out.close()
    fs.setPermission(target, permission.createImmutable(0o604))

    made = tmp_path / "made" / "deeper"
    assert stat.S_IMODE(os.stat(made).st_mode) == 0o750
    assert stat.S_IMODE(os.stat(made / "data.bin").st_mode) == 0o604
    assert (made / "data.bin").read_bytes() == b"state bytes"
    assert (made / ".data.bin.crc").is_file()  # checksummed, as Hadoop's local file system
    assert fs.getFileStatus(target).getLen() == len(b"state bytes")


def test_sessions_sparkpoint_starts_carry_the_class(spark) -> None:
    """The test session is started by sparkpoint's create_session, which adds the jar."""
    assert own_jar.jar_path().is_file()
    settings = local_fs.rewrite_settings(spark)
    assert settings["fs.file.impl"] == local_fs.NIO_LOCAL_FS
    assert settings[local_fs.FILE_MANAGER_CONF] == local_fs.FILE_SYSTEM_MANAGER


def test_the_settings_hold_only_inside_the_block(spark) -> None:
    spark.conf.set(local_fs.FILE_MANAGER_CONF, "kept.by.the.caller")
    try:
        with local_fs.in_session(spark):
            assert spark.conf.get(local_fs.FILE_MANAGER_CONF) == local_fs.FILE_SYSTEM_MANAGER
            assert spark.conf.get("fs.file.impl") == local_fs.NIO_LOCAL_FS
        assert spark.conf.get(local_fs.FILE_MANAGER_CONF) == "kept.by.the.caller"
        assert spark.conf.get("fs.file.impl", None) is None
    finally:
        spark.conf.unset(local_fs.FILE_MANAGER_CONF)
