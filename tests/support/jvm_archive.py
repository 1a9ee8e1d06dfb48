"""A class-data-sharing archive of Spark's driver JVM for the test suite's many short runs.

Most of a short CLI run's time is its JVM starting: loading and verifying some twenty
thousand classes of Spark's jars. Java 17 can dump the classes one JVM loaded into an archive
(``-XX:ArchiveClassesAtExit``) that later JVMs map instead (``-XX:SharedArchiveFile``):
measured on the 2-core machine, a managed run of the clicks job took 15.0-16.1 s without it
and 10.5-11.1 s with it. Nothing else changes: a JVM whose class path does not match the
archive's (one started with ``spark.driver.extraClassPath``) or whose archive is missing
just loads its classes as before, silently (``-Xlog:cds=off``).

The options reach every driver JVM that PySpark starts through ``PYSPARK_SUBMIT_ARGS`` as
``spark.driver.defaultJavaOptions``, Spark's setting for options an administrator puts
before a job's own ``spark.driver.extraJavaOptions`` (which sparkpoint uses for its log
configuration). Not through ``SPARK_CONF_DIR``: that directory goes on the class path, and
the JVM refuses an archive whose class path holds a non-empty directory.

``python -m tests.support.jvm_archive`` builds the archive once per pyspark and Java
version (by one managed run of a stateful job, which loads what the suite's runs load) and
prints the ``PYSPARK_SUBMIT_ARGS`` to export; it prints nothing when it cannot build one.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
ARCHIVE_DIR = REPO / ".cache" / "jvm"
QUIET = "-Xlog:cds=off -Xlog:cds+dynamic=off"


def _submit_args(java_options: str) -> str:
    escaped = java_options.replace(" ", "\\ ")  # PySpark splits the variable as a shell does
    return f"--conf spark.driver.defaultJavaOptions={escaped} pyspark-shell"


def archive_path() -> Path:
    """The archive for this pyspark and this Java: another of either needs its own."""
    import pyspark

    java = subprocess.run(["java", "-version"], capture_output=True, text=True, check=True)
    # The JVM maps an archive only while every jar it was built from has the same size and
    # modification time (else it loads each class from the jars again, silently): a
    # reinstalled pyspark needs its own archive even at the same version.
    jars = Path(pyspark.__file__).parent / "jars"
    stamps = "".join(f"{jar.name} {jar.stat().st_size} {jar.stat().st_mtime_ns}\n"
                     for jar in sorted(jars.glob("*.jar")))
    key = hashlib.sha256(f"{pyspark.__version__}\n{java.stderr}\n{stamps}".encode()
                         ).hexdigest()[:12]
    return ARCHIVE_DIR / f"spark-{pyspark.__version__}-{key}.jsa"


def build(archive: Path) -> bool:
    """One managed run of the clicks job (windows, dedup, RocksDB, a parquet sink) in a JVM
    that dumps the classes it loaded into ``archive`` when it exits."""
    from sparkpoint.testing import write_clicks

    archive.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="sparkpoint-jvm-archive-") as scratch:
        root = Path(scratch)
        write_clicks(root / "in", range(0, 2))
        partial = archive.with_suffix(".partial")
        env = dict(os.environ, PYSPARK_PYTHON=sys.executable,
                   PYSPARK_SUBMIT_ARGS=_submit_args(f"-XX:ArchiveClassesAtExit={partial} {QUIET}"))
        done = subprocess.run(
            [sys.executable, "-m", "sparkpoint.cli.main", "--home", str(root / "home"), "run",
             str(REPO / "examples" / "clicks_job.py"), "--job", "warm", "--param",
             f"input={root / 'in'}", "--param", f"output={root / 'out'}", "--conf",
             "spark.sql.shuffle.partitions=2", "--until-caught-up"],
            capture_output=True, text=True, env=env, timeout=600)
        if done.returncode != 0 or not partial.is_file():
            partial.unlink(missing_ok=True)
            sys.stderr.write(f"no JVM class archive (the run exited {done.returncode}); the "
                             f"tests start their JVMs without one:\n{done.stderr[-2000:]}\n")
            return False
        partial.replace(archive)
    for stale in archive.parent.glob("*.jsa"):
        if stale != archive:  # of a pyspark or Java no longer installed here (about 190 MB)
            stale.unlink(missing_ok=True)
    return True


def main() -> None:
    archive = archive_path()
    if archive.is_file() or build(archive):
        print(_submit_args(f"-XX:SharedArchiveFile={archive} {QUIET}"))


if __name__ == "__main__":
    main()
