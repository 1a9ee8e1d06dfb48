"""The ``sparkpoint`` CLI run as a function in the test's process (``tests/support/cli.py``
says when): its exit code, its stdout and stderr, the environment set for the call only."""

from __future__ import annotations

import faulthandler
import itertools
import logging
import sys
import traceback
from collections.abc import Mapping, Sequence
from pathlib import Path

from click.testing import CliRunner

from sparkpoint import progress, settings
from sparkpoint.cli.main import main
from sparkpoint.runtime import lock
from sparkpoint.spark.state_stores import close_idle_state_stores
from tests.support import spark_session

# Commands that may start Spark: they run in the process's JVM, started first if need be,
# so that no command starts it with its own settings (its log file, its jars) for the rest
# of the process.
SPARK_COMMANDS = {("run",), ("plan",), ("rehearse",), ("drain",), ("resume-point", "build"),
                  ("snapshot", "import"), ("snapshot", "prune"), ("snapshot", "diff"),
                  ("snapshot", "inspect")}
# Settings a command reads in Python only, at each use: set for the call, they hold for it.
IN_PROCESS_SETTINGS = {setting.name for setting in (
    settings.HOME, settings.SNAPSHOTS, settings.SCRATCH, settings.LEASE_SECONDS,
    settings.LEASE_LOG, settings.WEBHDFS_URL, settings.PROGRESS_AFTER, settings.TRACEBACK)}
# Settings of a process: it exits or stops itself at a point, or claims another machine.
PROCESS_SETTINGS = (settings.CRASH_AT, settings.FREEZE_AT, settings.HOST,
                    settings.ALLOW_UNTESTED_PYSPARK)
# Options a running JVM cannot take (it has its master, its UI, its class path).
PROCESS_OPTIONS = {"--master", "--ui"}
PROCESS_CONF_PREFIXES = ("spark.sql.", "spark.hadoop.")
STEPS_LOGGER = "sparkpoint.steps"


# The CLI's own options that take a value (before the command's words).
GLOBAL_VALUE_OPTIONS = {"--home", "--snapshots"}


def _command_words(args: Sequence[str]) -> tuple[str, ...]:
    words: list[str] = []
    skip = False
    for arg in args:
        if skip:
            skip = False
        elif arg in GLOBAL_VALUE_OPTIONS:
            skip = True
        elif not arg.startswith("-"):
            words.append(arg)
    return tuple(words[:2])


def needs_spark(args: Sequence[str]) -> bool:
    words = _command_words(args)
    return words[:1] in SPARK_COMMANDS or words[:2] in SPARK_COMMANDS


def _jars_on_class_path(value: str) -> bool:
    dirs = {str(lib) for lib in spark_session.CLASS_PATH_JAR_DIRS}
    return all(str(Path(jar.removeprefix("local:")).parent) in dirs
               for jar in value.split(",") if jar)


def _conf_fits(args: Sequence[str]) -> bool:
    for flag, value in itertools.pairwise(args):
        if flag != "--conf":
            continue
        key, _, setting = value.partition("=")
        if key == "spark.jars" and _jars_on_class_path(setting):
            continue
        if not key.startswith(PROCESS_CONF_PREFIXES):
            return False
    return True


def _forbidden_sessions() -> bool:
    from pyspark.sql import SparkSession

    return bool(getattr(SparkSession.Builder.getOrCreate, "forbids_sessions", False))


def allowed(args: Sequence[str], worker_python: bool, env: Mapping[str, str] | None) -> bool:
    """Whether the command can run in this process and behave as its own process would."""
    import os

    if os.environ.get("SPARKPOINT_TEST_CLI") == "process" or not worker_python:
        return False
    if lock._held:
        # A thread of this process holds a job (the test's own run or drain): the command
        # is another process's, which meets the kernel lock or the lease, not this
        # process's wait for its own threads.
        return False
    if any(setting.name in os.environ or setting.name in (env or {})
           for setting in PROCESS_SETTINGS):
        return False
    if any(name not in IN_PROCESS_SETTINGS for name in env or {}):
        return False
    if any(arg in PROCESS_OPTIONS or arg.split("=")[0] in PROCESS_OPTIONS for arg in args):
        return False
    return _conf_fits(args) and "submit-entry" not in _command_words(args)


def run(argv: list[str], env: Mapping[str, str], timeout: float) -> tuple[int, str, str]:
    from pyspark import SparkContext

    spark = needs_spark(argv) and not _forbidden_sessions()
    if spark:
        spark_session.shared_session()
    jvm_before = SparkContext._active_spark_context is not None
    steps = logging.getLogger(STEPS_LOGGER)
    saved_steps = (list(steps.handlers), steps.level, steps.propagate)
    saved_progress = progress._enabled
    root = logging.getLogger()
    saved_root_level = root.level
    runner = CliRunner()
    # A hung command fails the test with every thread's stack instead of hanging the run.
    faulthandler.dump_traceback_later(timeout, exit=True)
    try:
        with runner.isolation(env=dict(env)) as (out, err, _mixed):
            # A process's `logging.basicConfig` (the CLI's) is a no-op under pytest's
            # handlers: the CLI's warnings reach its stderr through this one.
            warnings = logging.StreamHandler(sys.stderr)
            warnings.setFormatter(logging.Formatter("warning: %(message)s"))
            warnings.setLevel(logging.WARNING)
            root.addHandler(warnings)
            try:
                main(list(argv))
                code = 0
            except SystemExit as exit_:
                code = exit_.code if isinstance(exit_.code, int) else (
                    0 if exit_.code is None else 1)
            except Exception:  # as Python's own exit would print it
                traceback.print_exc(file=sys.stderr)
                code = 1
            finally:
                root.removeHandler(warnings)
                sys.stdout.flush()
                sys.stderr.flush()
            texts = (out.getvalue().decode(), err.getvalue().decode(errors="replace"))
    finally:
        faulthandler.cancel_dump_traceback_later()
        steps.handlers[:], steps.level, steps.propagate = saved_steps
        progress._enabled = saved_progress
        root.setLevel(saved_root_level)
        if spark:
            # As the process's end would: readers' providers too (spark/state_stores.py).
            close_idle_state_stores(spark_session.shared_session())
    if not jvm_before and SparkContext._active_spark_context is not None:
        # The JVM, started with this command's settings, would serve every later test of
        # the process: the command must be known to need Spark.
        raise AssertionError(f"'{' '.join(argv[2:])}' started Spark in the test process; "
                             "add its command to SPARK_COMMANDS in tests/support/in_process.py")
    return code, texts[0], texts[1]
