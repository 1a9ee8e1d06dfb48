"""Loading a job file and calling its ``build`` function."""

from __future__ import annotations

import importlib.util
import inspect
import sys
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sparkpoint.errors import JobFileError
from sparkpoint.runtime.context import JobContext

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming.readwriter import DataStreamWriter


def load_build(job_file: Path) -> Any:
    if not job_file.is_file():
        raise JobFileError(f"{job_file}: job file not found; pass the path of a Python file")
    module_name = f"sparkpoint_job_{uuid.uuid4().hex[:8]}"
    spec = importlib.util.spec_from_file_location(module_name, job_file)
    if spec is None or spec.loader is None:
        raise JobFileError(f"{job_file}: expected a Python source file, found something else")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        raise JobFileError(
            f"{job_file}: importing the job file failed with {exc.__class__.__name__}: {exc}"
        ) from exc
    # Python workers cannot import a module loaded from a path under a generated name: UDFs
    # and state functions defined in the job file travel by value instead.
    from pyspark import cloudpickle

    cloudpickle.register_pickle_by_value(module)  # type: ignore[no-untyped-call]
    build = getattr(module, "build", None)
    if build is None or not callable(build):
        raise JobFileError(
            f"{job_file}: expected a function 'build(spark, ctx)' returning an unstarted "
            "DataStreamWriter, found none; add one (see README)"
        )
    if len(inspect.signature(build).parameters) != 2:
        raise JobFileError(
            f"{job_file}: expected 'build' to take two arguments (spark, ctx), found "
            f"{len(inspect.signature(build).parameters)}"
        )
    return build


def build_writer(
    build: Any, job_file: Path, spark: SparkSession, ctx: JobContext
) -> DataStreamWriter:
    """Call a loaded ``build`` and check that it returned an unstarted DataStreamWriter."""
    from pyspark.sql.streaming.readwriter import DataStreamWriter

    try:
        writer = build(spark, ctx)
    except JobFileError:
        raise
    except Exception as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        raise JobFileError(
            f"{job_file}: build() raised {exc.__class__.__name__}: {first}"
        ) from exc
    if not isinstance(writer, DataStreamWriter):
        raise JobFileError(
            f"{job_file}: build() must return an unstarted DataStreamWriter "
            f"(df.writeStream...), found {type(writer).__name__}; return the writer, "
            "do not call start()"
        )
    return writer
