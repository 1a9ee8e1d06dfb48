"""sparkpoint's own classes for Spark's JVM (java/, shipped built as
resources/sparkpoint-spark.jar by scripts/build-jar.sh).

The sessions sparkpoint starts carry the jar (``spark.jars``: the driver and every
executor). A caller's session started without it has none of the classes: the code that
uses them checks with :func:`loadable` and falls back to a slower way to the same result,
or says what to add."""

from __future__ import annotations

from collections.abc import Mapping
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

JARS_CONF = "spark.jars"


def jar_path() -> Path:
    """The built jar inside the installed package."""
    return Path(str(resources.files("sparkpoint.resources") / "sparkpoint-spark.jar"))


def with_jar(conf: dict[str, str], defaults: Mapping[str, str] | None = None
             ) -> dict[str, str]:
    """``conf`` with the jar added to ``spark.jars`` (for a session about to start).

    PySpark hands the session's settings to spark-submit as ``--conf``, which replaces the
    ``spark.jars`` of Spark's ``spark-defaults.conf`` (``defaults``): the jars listed there
    (a connector given once for every command) are kept unless ``conf`` sets its own, as
    Spark decides between the two."""
    listed = conf[JARS_CONF] if JARS_CONF in conf else (defaults or {}).get(JARS_CONF, "")
    jars = [jar.strip() for jar in listed.split(",") if jar.strip()]
    return {**conf, JARS_CONF: ",".join([*jars, str(jar_path())])}


def loadable(spark: SparkSession, class_name: str) -> bool:
    """Whether the session's JVM can load one of the jar's classes."""
    jvm = spark._jvm
    assert jvm is not None
    return bool(jvm.org.apache.spark.util.Utils.classIsLoadable(class_name))
