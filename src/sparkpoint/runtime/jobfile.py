"""Loading a job file and calling its ``build`` function.

A job file is read twice. ``check_job_file`` parses it without running it, before any JVM
starts, so a syntax error, a missing ``build`` or a missing required ``--param`` fails in
milliseconds. ``load_build`` imports it once a SparkSession exists: module-level UDFs with a
DDL return type (``@F.pandas_udf("long")``) are parsed by PySpark with the active session and
cannot be imported before one exists.
"""

from __future__ import annotations

import ast
import importlib.util
import inspect
import sys
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sparkpoint.errors import JobFileError
from sparkpoint.runtime.context import JobContext

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming.readwriter import DataStreamWriter

# How a job record names a build function given by a Python caller instead of a job file.
PYTHON_BUILD_PREFIX = "python:"


BUILD = "build"
REQUIRE_PARAM = "require_param"
# Statements and expressions under which a call may not run: a require_param inside them is
# conditional and not checked before the JVM starts (build itself still checks it).
_CONDITIONAL = (ast.If, ast.IfExp, ast.For, ast.AsyncFor, ast.While, ast.Try, ast.BoolOp,
                ast.Lambda, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp,
                ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Match)


@dataclass(frozen=True)
class JobFileShape:
    """What parsing a job file tells without running it."""

    path: Path
    # --param names ``build`` always asks for with ctx.require_param("literal").
    required_params: tuple[str, ...]


def _missing_file(job_file: Path) -> JobFileError:
    return JobFileError(f"{job_file}: job file not found; pass the path of a Python file")


def _no_build(job_file: Path) -> JobFileError:
    return JobFileError(
        f"{job_file}: expected a function 'build(spark, ctx)' returning an unstarted "
        "DataStreamWriter, found none; add one (see README)"
    )


def _binds_build(node: ast.stmt) -> bool:
    """Whether a module-level statement other than ``def`` binds the name ``build``."""
    if isinstance(node, ast.Import | ast.ImportFrom):
        return any((alias.asname or alias.name) == BUILD for alias in node.names)
    if isinstance(node, ast.Assign | ast.AnnAssign):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        return any(isinstance(t, ast.Name) and t.id == BUILD for t in targets)
    return False


def _unconditional_required_params(build: ast.FunctionDef | ast.AsyncFunctionDef) -> list[str]:
    found: list[str] = []

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and node.func.attr == REQUIRE_PARAM and node.args \
                and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str):
            found.append(node.args[0].value)
        for child in ast.iter_child_nodes(node):
            if not isinstance(child, _CONDITIONAL):
                visit(child)

    for statement in build.body:
        if not isinstance(statement, _CONDITIONAL):
            visit(statement)
    return list(dict.fromkeys(found))


def check_job_file(job_file: Path) -> JobFileShape:
    """Parse the job file without running it: syntax, ``build`` present, required params."""
    if not job_file.is_file():
        raise _missing_file(job_file)
    try:
        tree = ast.parse(job_file.read_bytes(), filename=str(job_file))
    except (SyntaxError, ValueError) as exc:
        where = f" (line {exc.lineno})" if isinstance(exc, SyntaxError) and exc.lineno else ""
        raise JobFileError(
            f"{job_file}: the job file is not valid Python{where}: "
            f"{exc.msg if isinstance(exc, SyntaxError) else exc}; fix it and retry"
        ) from None
    definitions = [node for node in tree.body if isinstance(node, ast.FunctionDef |
                   ast.AsyncFunctionDef) and node.name == BUILD]
    if not definitions:
        if any(_binds_build(node) for node in tree.body):
            return JobFileShape(job_file, ())  # bound some other way: the import checks it
        raise _no_build(job_file)
    build = definitions[-1]
    arguments = build.args
    count = len(arguments.posonlyargs) + len(arguments.args)
    if count != 2 and arguments.vararg is None:
        raise JobFileError(
            f"{job_file}: expected 'build' to take two arguments (spark, ctx), found {count}"
        )
    return JobFileShape(job_file, tuple(_unconditional_required_params(build)))


def described_by_command(job_file: Path, command: str) -> str:
    """How messages name a job file that a command reads without any job being involved."""
    return f"{job_file.name} (read by '{command}'; no job is involved)"


def check_required_params(shape: JobFileShape, job: str, params: Mapping[str, str],
                          described: str | None = None) -> None:
    missing = [name for name in shape.required_params if name not in params]
    if missing:
        flags = " ".join(f"--param {name}=..." for name in missing)
        raise JobFileError(
            f"{described or f'job {job!r}'} needs {flags} ({shape.path.name} calls "
            "ctx.require_param); pass it on the command line"
        )


def load_build(job_file: Path) -> Any:
    """Import the job file (with a SparkSession active) and return its ``build``."""
    if not job_file.is_file():
        raise _missing_file(job_file)
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
    build = getattr(module, BUILD, None)
    if build is None or not callable(build):
        raise _no_build(job_file)
    if len(inspect.signature(build).parameters) != 2:
        raise JobFileError(
            f"{job_file}: expected 'build' to take two arguments (spark, ctx), found "
            f"{len(inspect.signature(build).parameters)}"
        )
    return build


def build_writer(
    build: Any, job_file: Path, spark: SparkSession, ctx: JobContext
) -> DataStreamWriter:
    """Call a loaded ``build`` and check that it returned an unstarted DataStreamWriter.
    ``build`` gets ``spark`` with sparkpoint's own source formats registered on demand
    (spark/own_formats.py)."""
    from pyspark.sql.streaming.readwriter import DataStreamWriter

    from sparkpoint.spark.own_formats import formats_on_demand

    try:
        writer = build(formats_on_demand(spark), ctx)
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
