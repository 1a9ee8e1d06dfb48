"""Building the SparkSession a managed job runs in, and the SQL confs sparkpoint owns."""

from __future__ import annotations

import logging
import os
import re
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sparkpoint.checkpoint.logs import SOURCE_EVOLUTION_CONF
from sparkpoint.checkpoint.rocksdb_state import ROCKSDB_PROVIDER
from sparkpoint.spark import own_jar
from sparkpoint.spark.version import require_supported_pyspark

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

PROVIDER_CONF = "spark.sql.streaming.stateStore.providerClass"

# Session-level settings: loopback only, no UI unless asked for.
SESSION_DEFAULTS = {
    "spark.driver.host": "127.0.0.1",
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
}

# Query-level settings every managed job needs; user --conf wins where it makes sense.
QUERY_DEFAULTS = {
    SOURCE_EVOLUTION_CONF: "true",
    PROVIDER_CONF: ROCKSDB_PROVIDER,
}


LOG_FILE_PROPERTY = "sparkpoint.log.file"
# PySpark's Python loggers that print an exception with its JVM stack trace to stderr.
_PYSPARK_ERROR_LOGGERS = ("DataFrameQueryContextLogger", "SQLQueryContextLogger")

# The log file of the JVM this process started (one JVM per process; later sessions share it).
_session_log: Path | None = None


UI_CONF = "spark.ui.enabled"
WORKER_PYTHON_ENV = "PYSPARK_PYTHON"


# The master of a job run without --master (and outside spark-submit).
DEFAULT_MASTER = "local[2]"

def use_own_python_for_workers() -> None:
    """Python workers run the interpreter that runs sparkpoint, which has pandas, pyarrow and
    sparkpoint itself; a bare ``python3`` on the PATH usually has none of them. A
    ``PYSPARK_PYTHON`` the user set wins. Must happen before the JVM starts: the worker
    command is fixed when the SparkContext is created."""
    if not os.environ.get(WORKER_PYTHON_ENV):
        os.environ[WORKER_PYTHON_ENV] = sys.executable


def _log_config_option(log_file: Path | None) -> str:
    resources = Path(__file__).resolve().parent.parent / "resources"
    if log_file is None:
        return f'-Dlog4j.configurationFile="file:{resources / "log4j2.properties"}"'
    return (f'-Dlog4j.configurationFile="file:{resources / "log4j2-file.properties"}" '
            f'-D{LOG_FILE_PROPERTY}="{log_file}"')


class _LazyFileHandler(logging.FileHandler):
    """Opens (and creates the directory of) its file at the first record only."""

    def __init__(self, path: Path) -> None:
        super().__init__(path, delay=True)

    def _open(self) -> Any:
        Path(self.baseFilename).parent.mkdir(parents=True, exist_ok=True)
        return super()._open()


def _route_pyspark_loggers(log_file: Path) -> None:
    from pyspark.logger import PySparkLogger

    for name in _PYSPARK_ERROR_LOGGERS:
        logger = PySparkLogger.getLogger(name)
        for handler in list(logger.handlers):
            logger.removeHandler(handler)
        logger.addHandler(_LazyFileHandler(log_file))
        logger.propagate = False


SPARK_CONF_DIR_ENV = "SPARK_CONF_DIR"
DEFAULTS_FILE = "spark-defaults.conf"
# A Java properties line: key, then '=', ':' or blanks, then the value.
_PROPERTY = re.compile(r"([^\s=:]+)\s*[=:\s]\s*(.*)")


def spark_defaults_path() -> Path:
    """Spark's rule (``SparkSubmitArguments``): ``$SPARK_CONF_DIR/spark-defaults.conf``, else
    ``$SPARK_HOME/conf/spark-defaults.conf``, where ``SPARK_HOME`` is pyspark's own when
    unset."""
    conf_dir = os.environ.get(SPARK_CONF_DIR_ENV)
    if conf_dir:
        return Path(conf_dir) / DEFAULTS_FILE
    spark_home = os.environ.get("SPARK_HOME")
    if not spark_home:
        import pyspark

        spark_home = str(Path(pyspark.__file__).parent)
    return Path(spark_home) / "conf" / DEFAULTS_FILE


def spark_defaults() -> dict[str, str]:
    """The settings of Spark's ``spark-defaults.conf``, as spark-submit reads them for every
    session sparkpoint starts. Spark applies the file itself; sparkpoint reads it only for
    the ``spark.jars`` its own jar is added to (``own_jar.with_jar``). Lines continued with
    a backslash are not joined."""
    path = spark_defaults_path()
    try:
        text = path.read_text()
    except OSError:
        return {}
    settings = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line[0] in "#!":
            continue
        match = _PROPERTY.fullmatch(line)
        if match is not None:
            settings[match.group(1)] = match.group(2).strip()
    return settings


def session_log_file() -> Path | None:
    """Where Spark's own log of this process goes, when sparkpoint started its JVM."""
    return _session_log


def create_session(
    master: str | None, conf: Mapping[str, str], app_name: str, ui: bool = False,
    log_file: Path | None = None,
) -> SparkSession:
    """A session for managed jobs. With ``log_file``, Spark's errors and stack traces (JVM
    and PySpark's) go there instead of the terminal; the file exists once one is logged."""
    global _session_log
    require_supported_pyspark()
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    use_own_python_for_workers()
    starts_jvm = SparkContext._active_spark_context is None
    if not starts_jvm:
        log_file = None  # the running JVM keeps the log configuration it started with
    builder = SparkSession.builder.appName(app_name).master(master or DEFAULT_MASTER)
    defaults = {**SESSION_DEFAULTS, "spark.driver.extraJavaOptions": _log_config_option(log_file)}
    if ui:
        defaults[UI_CONF] = "true"
    settings = {**defaults, **conf}
    if starts_jvm:
        settings = own_jar.with_jar(settings, spark_defaults())
    if starts_jvm:
        for key, value in settings.items():
            builder = builder.config(key, value)
        spark = builder.getOrCreate()
    else:
        spark = _own_session(settings)
    if log_file is not None:
        _session_log = log_file
        _route_pyspark_loggers(log_file)
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def _own_session(settings: Mapping[str, str]) -> SparkSession:
    """A session of the command's own over the JVM this process already runs (a notebook's,
    a test's, spark-submit's): ``getOrCreate`` would hand back the process's default session
    and set this command's confs on it (PySpark's ``Builder.getOrCreate``), so that its
    provider, fences and Hadoop settings held for every later query of the process.

    ``newSession`` shares the SparkContext and starts from the SparkConf, as a session of a
    fresh JVM would; the settings are applied the way ``getOrCreate`` applies them to an
    existing session (``SparkSession.applyModifiableSettings``: runtime SQL confs set, static
    ones left as the JVM started with them)."""
    from pyspark.sql import SparkSession

    running = SparkSession.getActiveSession() or SparkSession.builder.getOrCreate()
    return SparkSession(running.sparkContext, running._jsparkSession.newSession(),
                        options=dict(settings))


HADOOP_PREFIX = "spark.hadoop."


def apply_query_conf(spark: SparkSession, conf: Mapping[str, str]) -> None:
    """Set the SQL confs a query records in its offsets log (they win on restart), in a
    session of sparkpoint's own: never a caller's (``spark/job_session.py``).

    ``spark.hadoop.X`` settings (the s3a settings of a home on S3, the user's) are set as
    ``X`` too: Spark strips the prefix only when it creates the SparkContext, so in a copy of
    a caller's session they would be silently lost. Each query's Hadoop configuration
    (checkpoint, state store, file sources and sinks) is the SparkContext's plus every conf
    of its session (``SessionState.newHadoopConf``), so ``X`` reaches this job's queries and
    no other session's."""
    for key, value in {**QUERY_DEFAULTS, **conf}.items():
        if key.startswith("spark.sql."):
            spark.conf.set(key, value)
        elif key.startswith(HADOOP_PREFIX) and len(key) > len(HADOOP_PREFIX):
            spark.conf.set(key[len(HADOOP_PREFIX):], value)
