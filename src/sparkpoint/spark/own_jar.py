"""sparkpoint's own classes for Spark's JVM (java/, shipped built as
resources/sparkpoint-spark.jar by scripts/build-jar.sh).

The sessions sparkpoint starts carry the jar (``spark.jars``: the driver and every
executor). A caller's session started without it has none of the classes: the code that
uses them checks with :func:`loadable` and falls back to a slower way to the same result,
or says what to add."""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

JARS_CONF = "spark.jars"


def jar_path() -> Path:
    """The built jar inside the installed package."""
    return Path(str(resources.files("sparkpoint.resources") / "sparkpoint-spark.jar"))


def with_jar(conf: dict[str, str]) -> dict[str, str]:
    """``conf`` with the jar added to ``spark.jars`` (for a session about to start)."""
    jars = [jar for jar in conf.get(JARS_CONF, "").split(",") if jar]
    return {**conf, JARS_CONF: ",".join([*jars, str(jar_path())])}


def loadable(spark: SparkSession, class_name: str) -> bool:
    """Whether the session's JVM can load one of the jar's classes."""
    jvm = spark._jvm
    assert jvm is not None
    return bool(jvm.org.apache.spark.util.Utils.classIsLoadable(class_name))
