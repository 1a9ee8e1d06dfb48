"""JVM flags for the Spark drivers the tests start (the in-process session and every CLI
process), and only for them: sparkpoint's own JVM settings are not touched.

Test drivers live seconds to a minute on tiny data, so most of their CPU goes to starting up:
the C2 compiler optimising code that runs a few times, and parallel GC threads. The client
compiler alone (``TieredStopAtLevel=1``) and the serial collector cut a CLI run's CPU by about
a third without changing what Spark computes: both are standard HotSpot modes, not Spark
settings. Without Hadoop's native library, Hadoop's local file system starts a ``chmod`` or
``readlink`` process for most files it touches: a plain run of Spark's stream-stream join
example at its 200 partitions starts about 17,000. ``vfork`` starts each without the JDK's
``jspawnhelper`` in between (a JVM-level choice; the processes and their results are the
same): measured 1.4-1.6 ms a process against 2.7 ms, and that plain run 66-70 s against
71-75 s. Spark's launcher adds ``SPARK_SUBMIT_OPTS`` to the driver JVM's command line and
``SPARK_LAUNCHER_OPTS`` to the short JVM that builds that command line; unlike
``JDK_JAVA_OPTIONS`` neither prints a notice on stderr, which the tests read.
"""

from __future__ import annotations

import os
from collections.abc import MutableMapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pytest

FAST_START_FLAGS = ("-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC",
                    "-Djdk.lang.Process.launchMechanism=VFORK")
JVM_OPTION_VARIABLES = ("SPARK_SUBMIT_OPTS", "SPARK_LAUNCHER_OPTS")


def use_fast_start_jvms(environ: MutableMapping[str, str] = os.environ) -> None:
    """Add the flags to the variables (after any value already set, which they then win
    over), once: child processes inherit the environment, so every driver gets them."""
    for variable in JVM_OPTION_VARIABLES:
        present = environ.get(variable, "").split()
        missing = [flag for flag in FAST_START_FLAGS if flag not in present]
        environ[variable] = " ".join([*present, *missing])


class SparkSessionStarted(AssertionError):
    """A command made a Spark session where it should have refused before any."""


def forbid_spark_sessions(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make every way sparkpoint creates a Spark session fail (its factory wherever it is
    imported, and PySpark's builder), so that a test sees a refusal come before a JVM
    would have started."""
    import sys

    from pyspark.sql import SparkSession

    def started(*_args: object, **_kwargs: object) -> None:
        raise SparkSessionStarted("a Spark session was asked for")

    started.forbids_sessions = True  # type: ignore[attr-defined]  # seen by tests/support/cli.py
    monkeypatch.setattr(SparkSession.Builder, "getOrCreate", started)
    for name, module in list(sys.modules.items()):
        if name.startswith("sparkpoint") and hasattr(module, "create_session"):
            monkeypatch.setattr(module, "create_session", started)
