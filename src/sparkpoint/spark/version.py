"""The pyspark versions sparkpoint is tested with, the guard every Spark-using command
passes before a JVM starts, and the RocksDB version a session's Spark reads state with.

sparkpoint reads and writes Spark's checkpoint files itself; their formats are Spark
internals that change between releases, so an untested pyspark could misread state silently.
"""

from __future__ import annotations

import logging
from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING

from sparkpoint import settings
from sparkpoint.errors import UnsupportedSparkError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

SUPPORTED_PYSPARK = ("4.3.0",)
ALLOW_UNTESTED_ENV = settings.ALLOW_UNTESTED_PYSPARK.name

_log = logging.getLogger(__name__)
_warned: set[str] = set()


def installed_pyspark_version() -> str:
    """The installed pyspark's version: the one place the guard and manifests read it."""
    try:
        return version("pyspark")
    except PackageNotFoundError:
        return "none"


def require_supported_pyspark() -> str:
    """Refuse an untested pyspark (unless the override is set: then warn once)."""
    found = installed_pyspark_version()
    if found in SUPPORTED_PYSPARK:
        return found
    supported = ", ".join(SUPPORTED_PYSPARK)
    if settings.ALLOW_UNTESTED_PYSPARK.get():
        if found not in _warned:
            _warned.add(found)
            _log.warning("pyspark %s is not a version sparkpoint is tested with (%s); "
                         "%s=1 is set, so going on: state may be misread", found, supported,
                         ALLOW_UNTESTED_ENV)
        return found
    raise UnsupportedSparkError(
        f"pyspark {found} is installed, sparkpoint supports pyspark {supported}; install it "
        f"(pip install pyspark=={SUPPORTED_PYSPARK[0]}), or set {ALLOW_UNTESTED_ENV}=1 to "
        "go on at your own risk")


def spark_rocksdb_version(spark: SparkSession) -> tuple[int, int, int]:
    """The RocksDB version of the session's ``rocksdbjni`` (9.8.4 in Spark 4.3), the one
    Spark's provider opens state stores with. ``rocksdbVersion()`` is null until the native
    library is loaded (Spark's provider loads it on first use too)."""
    jvm = spark._jvm
    assert jvm is not None
    rocksdb = jvm.org.rocksdb.RocksDB
    rocksdb.loadLibrary()
    version = rocksdb.rocksdbVersion()
    return int(version.getMajor()), int(version.getMinor()), int(version.getPatch())
