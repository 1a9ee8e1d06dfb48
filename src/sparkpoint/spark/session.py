"""Building the SparkSession a managed job runs in, and the SQL confs sparkpoint owns."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from sparkpoint.checkpoint.rocksdb_state import ROCKSDB_PROVIDER
from sparkpoint.spark.version import require_supported_pyspark

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

PROVIDER_CONF = "spark.sql.streaming.stateStore.providerClass"
SOURCE_EVOLUTION_CONF = "spark.sql.streaming.queryEvolution.enableSourceEvolution"

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


def _log_config_option() -> str:
    path = Path(__file__).resolve().parent.parent / "resources" / "log4j2.properties"
    return f"-Dlog4j.configurationFile=file:{path}"


UI_CONF = "spark.ui.enabled"
WORKER_PYTHON_ENV = "PYSPARK_PYTHON"


def use_own_python_for_workers() -> None:
    """Python workers run the interpreter that runs sparkpoint, which has pandas, pyarrow and
    sparkpoint itself; a bare ``python3`` on the PATH usually has none of them. A
    ``PYSPARK_PYTHON`` the user set wins. Must happen before the JVM starts: the worker
    command is fixed when the SparkContext is created."""
    if not os.environ.get(WORKER_PYTHON_ENV):
        os.environ[WORKER_PYTHON_ENV] = sys.executable


def create_session(
    master: str | None, conf: Mapping[str, str], app_name: str, ui: bool = False
) -> SparkSession:
    require_supported_pyspark()
    from pyspark.sql import SparkSession

    use_own_python_for_workers()
    builder = SparkSession.builder.appName(app_name).master(master or "local[2]")
    defaults = {**SESSION_DEFAULTS, "spark.driver.extraJavaOptions": _log_config_option()}
    if ui:
        defaults[UI_CONF] = "true"
    for key, value in {**defaults, **conf}.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def apply_query_conf(spark: SparkSession, conf: Mapping[str, str]) -> dict[str, str | None]:
    """Set the SQL confs a query records in its offsets log (they win on restart); return
    the values they replaced, for a session that outlives the job."""
    previous: dict[str, str | None] = {}
    for key, value in {**QUERY_DEFAULTS, **conf}.items():
        if key.startswith("spark.sql."):
            previous[key] = spark.conf.get(key, None)
            spark.conf.set(key, value)
    return previous


def restore_conf(spark: SparkSession, previous: Mapping[str, str | None]) -> None:
    for key, value in previous.items():
        if value is None:
            spark.conf.unset(key)
        else:
            spark.conf.set(key, value)
