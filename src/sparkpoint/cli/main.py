"""``sparkpoint`` command line: parsing, rendering, exit codes. Logic lives in ``api``."""

from __future__ import annotations

import functools
import logging
import sys
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import click

from sparkpoint import api, crash_points, progress, settings
from sparkpoint.cli import render
from sparkpoint.crash_points import CRASH_POINTS, STEPS_LOGGER
from sparkpoint.errors import (
    EXIT_PRECONDITION,
    EXIT_UNEXPECTED,
    EXIT_VALIDATION,
    SparkpointError,
    UsageError,
)
from sparkpoint.startpoints.store import PositionKind
from sparkpoint.storage.fileio import store_unreachable
from sparkpoint.storage.home import Home

F = TypeVar("F", bound=Callable[..., Any])
# rehearse --fail-on-diff: the new version's output differs from the old job's.
EXIT_DIFFERENCE = 5

# Set to print the traceback of an unexpected error (for a bug report).
TRACEBACK_ENV = settings.TRACEBACK.name


def _echo(message: str) -> None:
    progress.write(message)


class _StepsHandler(logging.Handler):
    """Step lines written so that a progress bar being drawn stays intact."""

    def emit(self, record: logging.LogRecord) -> None:
        progress.write(self.format(record))


def _json_error(code: str, message: str, exit_code: int, **details: Any) -> None:
    """Under --json an error is one JSON object on stdout, with the same exit code."""
    error = {"code": code, "message": message, "exit_code": exit_code, **details}
    click.echo(render.as_json({"error": error}))
    sys.exit(exit_code)


def _fail(error: SparkpointError, as_json: bool = False) -> None:
    if as_json:
        _json_error(**error.to_dict())
    click.echo(f"error: {error}", err=True)
    sys.exit(error.exit_code)


def _json_requested(argv: list[str]) -> bool:
    """--json is an option of each command, so a usage error found while parsing (before
    the command's own parameters exist) looks for it among the arguments."""
    return "--json" in argv[: argv.index("--") if "--" in argv else len(argv)]


def _fail_usage(exc: click.ClickException, as_json: bool) -> None:
    if not as_json:
        raise exc
    _json_error("USAGE", exc.format_message(), exc.exit_code)


@dataclass(frozen=True)
class Output:
    """What a command prints: ``data`` as one JSON document under --json, else the text
    ``text`` makes; then the exit code, when it is not 0. Commands return it and
    ``handle_errors`` prints it, so each command says what it has to show once."""

    data: Any
    text: Callable[[], str]
    exit_code: int | None = None


def handle_errors(func: F) -> F:
    """Typed errors become one line and their exit code; anything else exit 1, one line.
    With --json the same error is a JSON object on stdout."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        as_json = bool(kwargs.get("as_json"))
        try:
            result = func(*args, **kwargs)
            if isinstance(result, Output):
                # The one place that chooses between the JSON document and the text.
                click.echo(render.as_json(result.data) if as_json else result.text())
                if result.exit_code is not None:
                    sys.exit(result.exit_code)
                return None
            return result
        except SparkpointError as exc:
            _fail(exc, as_json)
        except click.ClickException as exc:
            _fail_usage(exc, as_json)
        except (click.exceptions.Exit, SystemExit):
            raise
        except KeyboardInterrupt:
            click.echo("interrupted", err=True)
            sys.exit(130)
        except Exception as exc:
            unreachable = store_unreachable(exc)
            if unreachable is not None:
                _fail(unreachable, as_json)
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
            message = f"unexpected {exc.__class__.__name__}: {first}"
            if settings.TRACEBACK.get():
                traceback.print_exc(file=sys.stderr)
            if as_json:
                _json_error("UNEXPECTED", message, EXIT_UNEXPECTED)
            click.echo(f"error: {message}", err=True)
            sys.exit(EXIT_UNEXPECTED)

    return wrapper  # type: ignore[return-value]


def _pairs(values: tuple[str, ...], option: str) -> dict[str, str]:
    result = {}
    for item in values:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"expected key=value, found {item!r}", param_hint=option)
        result[key] = value
    return result


def show_steps() -> None:
    """Step lines (``STEPS_LOGGER``) on stderr as they are, beside the command's output."""
    steps = logging.getLogger(STEPS_LOGGER)
    handler = _StepsHandler()
    handler.setFormatter(logging.Formatter("%(message)s"))
    steps.addHandler(handler)
    steps.setLevel(logging.INFO)
    steps.propagate = False


def _home(ctx: click.Context) -> Home:
    home: Home = ctx.obj["home"]
    return home


def _json_flag(_ctx: click.Context, _param: click.Parameter, value: bool) -> bool:
    if value:
        progress.quiet()  # the output must stay one JSON document
    return value


json_option = click.option("--json", "as_json", is_flag=True, callback=_json_flag,
                           help="Print one JSON document.")


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--home", "home", default=None, metavar="DIR|URL",
              help="sparkpoint home: a directory, s3://bucket/prefix or hdfs://host:port/path "
                   "(default: $SPARKPOINT_HOME, else ./.sparkpoint)")
@click.option("--snapshots", "snapshots", default=None, metavar="URL",
              help="Where snapshots live: a path, s3://bucket/prefix or hdfs://host:port/path "
                   "(default: $SPARKPOINT_SNAPSHOTS, else the home's snapshots/).")
@click.option("--verbose", is_flag=True,
              help="Also print each internal step of a command on stderr (what snapshot "
                   "create reads and copies).")
@click.pass_context
def cli(ctx: click.Context, home: str | None, snapshots: str | None, verbose: bool) -> None:
    """Savepoints for Spark Structured Streaming jobs."""
    logging.basicConfig(level=logging.WARNING, format="warning: %(message)s")
    if verbose:
        show_steps()
    ctx.ensure_object(dict)
    try:
        if ctx.invoked_subcommand != "debug":  # debug crash-points lists the names to fix
            settings.check_environment()
            crash_points.check_environment()
        ctx.obj["home"] = Home.resolve(home, snapshots)
    except SparkpointError as exc:  # a variable, home or store refused: one line, as any error
        _fail(exc, _json_requested(ctx.obj.get("argv", [])))
    ctx.obj.setdefault("spark", None)


def _batch_options(func: F) -> F:
    for option in reversed([
        click.option("--renumber-batches", is_flag=True,
                     help="Number the new job's batches past those its file sink already "
                          "holds (with --from-snapshot/--resume-point; not with "
                          "--first-batch or --rewind-output)."),
        click.option("--first-batch", type=click.IntRange(min=0), default=None, metavar="K",
                     help="The new job's first batch id, after the snapshot's batch (with "
                          "--from-snapshot/--resume-point; not with --renumber-batches or "
                          "--rewind-output)."),
        click.option("--rewind-output", is_flag=True,
                     help="Take the file sink's output back to the snapshot's batch: the "
                          "later batches' files and log entries move aside under "
                          "OUTPUT/_sparkpoint_rewound (with --from-snapshot/--resume-point; "
                          "not with --renumber-batches or --first-batch)."),
    ]):
        func = option(func)
    return func


accept_data_loss_option = click.option(
    "--accept-data-loss", is_flag=True,
    help="Go on without the input the sources no longer hold (Kafka offsets the broker "
         "deleted: those partitions resume at the earliest offset held; input files that "
         "were removed); recorded in the job's lineage (for an import: in the snapshot). "
         "Without it such a start is refused (exit 4).")


@cli.command()
@click.argument("job_file", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--job", required=True, help="Job name; its checkpoint lives in the home.")
@click.option("--param", "params", multiple=True, metavar="K=V", help="Job parameter.")
@click.option("--conf", "confs", multiple=True, metavar="K=V", help="Spark setting.")
@click.option("--master", default=None, help="Spark master URL (default local[2]).")
@click.option("--from-snapshot", default=None, metavar="SNAP",
              help="Start this new job from a snapshot's state and offsets.")
@click.option("--resume-point", type=click.Path(dir_okay=False, path_type=Path), default=None,
              metavar="FILE", help="Start this new job as a resume point file says.")
@click.option("--until-caught-up", is_flag=True,
              help="Process the input available at start, then stop (not with --max-batches).")
@click.option("--max-batches", type=click.IntRange(min=1), default=None,
              help="Stop after N batches (not with --until-caught-up).")
@_batch_options
@accept_data_loss_option
@click.option("--ui", is_flag=True, help="Turn the Spark UI on and print its address.")
@click.pass_context
@handle_errors
def run(ctx: click.Context, job_file: Path, job: str, params: tuple[str, ...],
        confs: tuple[str, ...], master: str | None, from_snapshot: str | None,
        resume_point: Path | None, until_caught_up: bool, max_batches: int | None,
        renumber_batches: bool, first_batch: int | None, rewind_output: bool,
        accept_data_loss: bool, ui: bool) -> None:
    """Run JOB_FILE as job JOB until stopped (Ctrl-C stops cleanly).

    A job that exists runs again with its stored --param, --conf and --master; the ones
    given replace them (each change is printed)."""
    if until_caught_up and max_batches is not None:
        raise click.UsageError("use either --until-caught-up or --max-batches, not both")
    submitted = ctx.obj.get("spark")
    if submitted is not None and (master is not None or ui):
        raise click.UsageError(
            "under spark-submit, give --master and the UI settings to spark-submit, not to "
            "'sparkpoint run'")
    api.run(
        _home(ctx), job_file, job, params=_pairs(params, "--param"),
        conf=_pairs(confs, "--conf"),
        # Recorded for 'jobs show'; the session spark-submit made is on it already.
        master=submitted.sparkContext.master if submitted is not None else master,
        from_snapshot=from_snapshot,
        resume_point=resume_point, until_caught_up=until_caught_up, max_batches=max_batches,
        ui=ui, echo=_echo, renumber_batches=renumber_batches, first_batch=first_batch,
        rewind_output=rewind_output, accept_data_loss=accept_data_loss, spark=submitted,
    )


def _job_options(func: F) -> F:
    for option in reversed([
        click.option("--param", "params", multiple=True, metavar="K=V", help="Job parameter."),
        click.option("--conf", "confs", multiple=True, metavar="K=V", help="Spark setting."),
        click.option("--master", default=None, help="Spark master URL (default local[2])."),
    ]):
        func = option(func)
    return func


@cli.command("plan")
@click.argument("job_file", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--from-snapshot", default=None, metavar="SNAP",
              help="Start from a snapshot's state and offsets (its default resume point); this "
                   "or --resume-point.")
@click.option("--resume-point", type=click.Path(dir_okay=False, path_type=Path), default=None,
              metavar="FILE", help="Start as a resume point file says; this or --from-snapshot.")
@_job_options
@_batch_options
@accept_data_loss_option
@json_option
@click.pass_context
@handle_errors
def plan_command(ctx: click.Context, job_file: Path, from_snapshot: str | None,
                 resume_point: Path | None, params: tuple[str, ...], confs: tuple[str, ...],
                 master: str | None, renumber_batches: bool, first_batch: int | None,
                 rewind_output: bool, accept_data_loss: bool, as_json: bool) -> Output:
    """Dry run: what resumes, initializes, is dropped, and every problem (exit 3 if any).

    --conf not given is taken from the record of the job the snapshots were taken of."""
    result = api.plan(_home(ctx), job_file, params=_pairs(params, "--param"),
                      conf=_pairs(confs, "--conf"), master=master, from_snapshot=from_snapshot,
                      resume_point=resume_point, echo=_echo, renumber_batches=renumber_batches,
                      first_batch=first_batch, rewind_output=rewind_output,
                      accept_data_loss=accept_data_loss)
    return Output(result.to_dict(), lambda: render.plan_text(result),
                  None if result.ok else EXIT_VALIDATION)


@cli.command("rehearse")
@click.argument("job_file", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--against", required=True, metavar="JOB",
              help="The old job whose input is replayed and whose output is compared.")
@click.option("--from-snapshot", default=None, metavar="SNAP",
              help="Start from a snapshot's state and offsets (its default resume point); this "
                   "or --resume-point.")
@click.option("--resume-point", type=click.Path(dir_okay=False, path_type=Path), default=None,
              metavar="FILE", help="Start as a resume point file says; this or --from-snapshot.")
@_job_options
@click.option("--keep", is_flag=True, help="Keep the scratch job and output (path printed).")
@click.option("--fail-on-diff", is_flag=True,
              help=f"Exit {EXIT_DIFFERENCE} when the outputs differ (for CI pipelines).")
@click.option("--float-tolerance", default=None, metavar="REL",
              help="Float and double values are equal within this relative difference "
                   "(default 1e-9; 0: exactly). NaN equals NaN.")
@json_option
@click.pass_context
@handle_errors
def rehearse_command(ctx: click.Context, job_file: Path, against: str,
                     from_snapshot: str | None, resume_point: Path | None,
                     params: tuple[str, ...], confs: tuple[str, ...], master: str | None,
                     keep: bool, fail_on_diff: bool, float_tolerance: str | None,
                     as_json: bool) -> Output:
    """Run JOB_FILE from a snapshot over the input job JOB read after it, in scratch space,
    and compare its output with JOB's. Params, conf and master default to JOB's."""
    from sparkpoint.cli.rehearse_text import rehearsal_text
    from sparkpoint.rehearse.match import DEFAULT_FLOAT_TOLERANCE, parse_float_tolerance

    tolerance = (DEFAULT_FLOAT_TOLERANCE if float_tolerance is None
                 else parse_float_tolerance(float_tolerance))
    result = api.rehearse(_home(ctx), job_file, against, from_snapshot=from_snapshot,
                          resume_point=resume_point, params=_pairs(params, "--param"),
                          conf=_pairs(confs, "--conf"), master=master, keep=keep, echo=_echo,
                          float_tolerance=tolerance)
    return Output(result.to_dict(), lambda: rehearsal_text(result),
                  EXIT_DIFFERENCE if fail_on_diff and result.equal is False else None)


@cli.group("resume-point")
def resume_point_group() -> None:
    """Resume points: which snapshot state and offsets a new job takes."""


@resume_point_group.command("build")
@click.argument("job_file", type=click.Path(dir_okay=False, path_type=Path))
@click.argument("snapshot")
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write to FILE instead of standard output.")
@_job_options
@click.pass_context
@handle_errors
def resume_point_build(ctx: click.Context, job_file: Path, snapshot: str, output: Path | None,
                       params: tuple[str, ...], confs: tuple[str, ...],
                       master: str | None) -> None:
    """Write the default resume point of JOB_FILE from SNAPSHOT, for you to edit.

    --conf not given is taken from the record of the job SNAPSHOT was taken of."""
    text = api.resume_point_build(_home(ctx), job_file, snapshot,
                                  params=_pairs(params, "--param"),
                                  conf=_pairs(confs, "--conf"), master=master, echo=_echo)
    if output is None:
        click.echo(text, nl=False)
    else:
        output.write_text(text)
        click.echo(f"wrote {output}", err=True)


@cli.group()
def jobs() -> None:
    """Jobs known to this home."""


@jobs.command("list")
@json_option
@click.pass_context
@handle_errors
def jobs_list(ctx: click.Context, as_json: bool) -> Output:
    """Every job of the home: its state, last batch, processing rate, lag per source, run id
    and the snapshot it was started from."""
    views = api.jobs_list(_home(ctx))
    return Output([view.to_dict() for view in views], lambda: render.job_list_text(views))


@jobs.command("show")
@click.argument("name")
@json_option
@click.pass_context
@handle_errors
def jobs_show(ctx: click.Context, name: str, as_json: bool) -> Output:
    """Job NAME: its record, runs, last batch's progress, lag per source, the batches that
    can be snapshotted with their times, and a state check per operator."""
    view = api.job_view(_home(ctx), name)
    return Output(view.to_dict(), lambda: render.job_show_text(view))


@jobs.command("stop")
@click.argument("name")
@click.option("--wait", is_flag=True, help="Return once the job has stopped.")
@json_option
@click.pass_context
@handle_errors
def jobs_stop(ctx: click.Context, name: str, wait: bool, as_json: bool) -> Output:
    """Ask job NAME to stop after its last committed batch (exit 4 if it is not running)."""
    result = api.jobs_stop(_home(ctx), name, wait=wait, echo=_echo)
    if result["stopped"]:
        return Output(result, lambda: f"job '{name}' {result['status']} at batch "
                      f"{result['batch']}")
    return Output(result, lambda: f"job '{name}' asked to stop; 'sparkpoint jobs show {name}' "
                  "tells when")


@jobs.command("delete")
@click.argument("name")
@json_option
@click.pass_context
@handle_errors
def jobs_delete(ctx: click.Context, name: str, as_json: bool) -> Output:
    """Remove job NAME and its checkpoint (refused while it runs); its snapshots stay."""
    result = api.jobs_delete(_home(ctx), name)
    return Output(result, lambda: f"job '{name}' deleted "
                  f"({render.human_bytes(result['checkpoint_bytes'])} of checkpoint removed); "
                  "its snapshots are kept")


@cli.group()
def snapshot() -> None:
    """Named, durable snapshots of a job's state and offsets."""


@snapshot.command("create")
@click.argument("job")
@click.argument("name")
@click.option("--cancel", is_flag=True, help="Stop a running job, then snapshot its last batch.")
@click.option("--batch", "batch", type=click.IntRange(min=0), default=None, metavar="K",
              help="Snapshot the earlier committed batch K, if the checkpoint still holds it "
                   "('jobs show JOB' lists those batches).")
@click.option("--at", "at", default=None, metavar="TIME",
              help="Snapshot the newest batch whose time (Spark's batch timestamp, as "
                   "'jobs show JOB' lists it) is at or before TIME, ISO 8601 "
                   "(2026-11-23T14:05, 2026-11-23T14:05:00Z, ...+01:00); a time without a "
                   "zone is this machine's local time.")
@json_option
@click.pass_context
@handle_errors
def snapshot_create(ctx: click.Context, job: str, name: str, cancel: bool, batch: int | None,
                    at: str | None, as_json: bool) -> Output:
    """Snapshot JOB's latest committed batch as NAME (the job may keep running)."""
    manifest = api.snapshot_create(_home(ctx), job, name, cancel=cancel, echo=_echo,
                                   batch=batch, at=at)
    return Output(render.snapshot_row(manifest), lambda: f"snapshot '{manifest.name}' of job "
                  f"'{job}' at batch {manifest.batch_id}: "
                  f"{render.human_bytes(manifest.total_bytes)}, {len(manifest.files)} files")


@snapshot.command("import")
@click.argument("checkpoint")
@click.argument("name")
@click.option("--job-file", required=True, type=click.Path(dir_okay=False, path_type=Path),
              help="The sparkpoint version of the query that wrote the checkpoint.")
@_job_options
@accept_data_loss_option
@json_option
@click.pass_context
@handle_errors
def snapshot_import(ctx: click.Context, checkpoint: str, name: str, job_file: Path,
                    params: tuple[str, ...], confs: tuple[str, ...], master: str | None,
                    accept_data_loss: bool, as_json: bool) -> Output:
    """Snapshot CHECKPOINT, written by a query that plain Spark ran, as NAME.

    CHECKPOINT is the query's checkpointLocation: a local directory, s3a://bucket/path or
    hdfs://namenode:port/path, read where it is. Its sources and stateful operators are
    matched with JOB_FILE's by position, kind and schema and take their names; the
    checkpoint is only read. Continue it with
    'sparkpoint run JOB_FILE --job NEW --from-snapshot NAME'."""
    manifest = api.snapshot_import(
        _home(ctx), checkpoint, name, job_file, params=_pairs(params, "--param"),
        conf=_pairs(confs, "--conf"), master=master, echo=_echo,
        accept_data_loss=accept_data_loss)
    return Output(render.snapshot_row(manifest), lambda: (
                   f"snapshot '{manifest.name}' imported from {checkpoint} at batch "
                   f"{manifest.batch_id}: {render.human_bytes(manifest.total_bytes)}, "
                   f"{len(manifest.files)} files"))


@snapshot.command("prune")
@click.argument("name")
@click.argument("new_name")
@click.option("--operator", required=True, metavar="NAME",
              help="The stateful operator whose keys are removed (see 'snapshot show').")
@click.option("--where", "where", required=True, metavar="SQL",
              help="A Spark SQL condition on the operator's key columns, e.g. "
                   "\"window.end < '2026-01-01'\" or \"user IN ('test1', 'test2')\".")
@click.option("--master", default=None,
              help="Spark master URL the rewrite runs on, one task per state partition "
                   "(default local[2]).")
@click.option("--conf", "confs", multiple=True, metavar="K=V", help="Spark setting.")
@json_option
@click.pass_context
@handle_errors
def snapshot_prune(ctx: click.Context, name: str, new_name: str, operator: str, where: str,
                   master: str | None, confs: tuple[str, ...], as_json: bool) -> Output:
    """Write NEW_NAME: snapshot NAME without OPERATOR's keys that match --where.

    NAME is left unchanged; NEW_NAME holds the same batch, offsets and other state, so a job
    started from it behaves as if those keys had never been there."""
    result = api.snapshot_prune(_home(ctx), name, new_name, operator, where, echo=_echo,
                                master=master, conf=_pairs(confs, "--conf"))
    return Output(result.to_dict(), lambda: (
        f"snapshot '{result.new_snapshot}' written from '{result.snapshot}' (batch "
        f"{result.batch}): operator '{result.operator}' {result.rows_before} -> "
        f"{result.rows_after} rows ({result.rows_removed} removed), "
        f"{render.human_bytes(result.bytes_before)} -> "
        f"{render.human_bytes(result.bytes_after)}"))


@snapshot.command("diff")
@click.argument("a")
@click.argument("b")
@click.option("--operator", default=None, metavar="NAME", help="Only this stateful operator.")
@click.option("--rows", type=click.IntRange(min=0), default=0, metavar="N",
              help="Also show up to N keys of each kind: only in A, only in B, changed.")
@click.option("--master", default=None,
              help="Spark master URL the comparison runs on (default local[2]).")
@json_option
@click.pass_context
@handle_errors
def snapshot_diff(ctx: click.Context, a: str, b: str, operator: str | None, rows: int,
                  master: str | None, as_json: bool) -> Output:
    """What differs between the state of snapshots A and B, per operator (matched by name):
    keys only in A, only in B, and in both with other values, counted by Spark's state
    reader; a stream-stream join's buffered rows per side. Both snapshots are only read."""
    diff = api.snapshot_diff(_home(ctx), a, b, operator=operator, rows=rows, echo=_echo,
                             master=master)
    return Output(diff.to_dict(), lambda: render.diff_text(diff))


@snapshot.command("list")
@click.option("--job", default=None, help="Only this job's snapshots.")
@json_option
@click.pass_context
@handle_errors
def snapshot_list(ctx: click.Context, job: str | None, as_json: bool) -> Output:
    """The snapshots of the snapshot store: job, batch, time and size of each."""
    manifests = api.snapshot_list(_home(ctx), job)
    return Output([render.snapshot_row(m) for m in manifests],
                  lambda: render.snapshot_list_text(manifests))


@snapshot.command("show")
@click.argument("name")
@click.option("--count", is_flag=True,
              help="Also count each operator's rows by reading the snapshot's state (the "
                   "manifest's rows come from Spark's progress of the batch when it had one).")
@json_option
@click.pass_context
@handle_errors
def snapshot_show(ctx: click.Context, name: str, count: bool, as_json: bool) -> Output:
    """Snapshot NAME's manifest: job, batch, sources and offsets, operators with their rows
    and bytes, and the bytes it shares with other snapshots."""
    manifest = api.snapshot_show(_home(ctx), name)
    sharing = api.snapshot_sharing(_home(ctx), name)
    where = _home(ctx).snapshots_location
    counted = api.snapshot_count_rows(_home(ctx), name) if count else None
    return Output(render.snapshot_show_dict(manifest, sharing, where, counted),
                  lambda: render.snapshot_show_text(manifest, sharing, where, counted))


@snapshot.command("inspect")
@click.argument("name")
@click.option("--operator", default=None, metavar="NAME", help="Only this stateful operator.")
@click.option("--rows", type=click.IntRange(min=0), default=0, metavar="N",
              help="Also show N decoded keys and values per operator.")
@click.option("--all-partitions", is_flag=True,
              help="List every partition (by default, more than 10 are summarised: the "
                   "largest 5 and a total; --json always lists all).")
@json_option
@click.pass_context
@handle_errors
def snapshot_inspect(ctx: click.Context, name: str, operator: str | None, rows: int,
                     all_partitions: bool, as_json: bool) -> Output:
    """What snapshot NAME's state holds: rows, bytes and key skew per operator and partition,
    the event-time range of the keys, and state that no watermark, timeout or TTL bounds."""
    report = api.snapshot_inspect(_home(ctx), name, operator=operator, rows=rows)
    return Output(report.to_dict(), lambda: render.inspect_text(report, all_partitions))


@snapshot.command("verify")
@click.argument("name")
@json_option
@click.pass_context
@handle_errors
def snapshot_verify(ctx: click.Context, name: str, as_json: bool) -> Output:
    """Check every file of snapshot NAME against its manifest (presence, size, checksum) and
    that a runnable checkpoint's files are all there; exit 3 naming each damaged file."""
    problems = api.snapshot_verify(_home(ctx), name)
    return Output(render.problems_dict(name, problems), lambda: "\n".join(
        f"DAMAGED {problem.path}: {problem.message}" for problem in problems)
        or f"snapshot '{name}' is complete and intact",
        EXIT_VALIDATION if problems else None)


@snapshot.command("delete")
@click.argument("name")
@click.option("-y", "--yes", is_flag=True, help="Do not ask for confirmation.")
@click.pass_context
@handle_errors
def snapshot_delete(ctx: click.Context, name: str, yes: bool) -> None:
    """Delete snapshot NAME (asks first on a terminal, unless --yes)."""
    # Only an interactive terminal is asked: scripts and pipes keep working unattended.
    if not yes and sys.stdin.isatty():
        manifest = api.snapshot_show(_home(ctx), name)
        if not click.confirm(f"delete snapshot '{name}' of job '{manifest.job}' (batch "
                             f"{manifest.batch_id}, "
                             f"{render.human_bytes(manifest.total_bytes)})?", err=True):
            click.echo(f"snapshot '{name}' not deleted", err=True)
            sys.exit(EXIT_PRECONDITION)
    api.snapshot_delete(_home(ctx), name)
    click.echo(f"snapshot '{name}' deleted")


@cli.command("drain")
@click.argument("job")
@click.option("--snapshot", "snapshot_name", default=None, metavar="SNAP",
              help="Snapshot the drained state as SNAP.")
@json_option
@click.pass_context
@handle_errors
def drain(ctx: click.Context, job: str, snapshot_name: str | None, as_json: bool) -> Output:
    """Stop JOB with every event-time window and timer fired and nothing in flight."""
    record = api.drain(_home(ctx), job, snapshot=snapshot_name,
                       echo=_echo)
    return Output(render.drain_dict(job, record), lambda: render.drain_text(job, record))


@cli.group()
def startpoint() -> None:
    """Out-of-band start positions per source, applied once at the job's next start."""


@startpoint.command("set")
@click.argument("job")
@click.argument("source")
@click.option("--offset", "offset", default=None, metavar="JSON|N",
              help='Offset in the source\'s format: {"topic":{"0":42}}, {"logOffset":3}; '
                   "with --partition, that partition's offset as a number N.")
@click.option("--timestamp", default=None, metavar="ISO8601",
              help="First record (Kafka) or file modified at or after this time.")
@click.option("--earliest", is_flag=True, help="The beginning: read everything again.")
@click.option("--latest", is_flag=True, help="The end: skip what has not been read yet.")
@click.option("--group", default=None, metavar="GROUP",
              help="Kafka: the offsets consumer group GROUP committed (where a consumer "
                   "application left off), read from the broker when applied.")
@click.option("--partition", default=None, metavar="P",
              help="Only this partition (Kafka: P or TOPIC:P).")
@click.option("--dry-run", is_flag=True, help="Show what it resolves to; store nothing.")
@json_option
@click.pass_context
@handle_errors
def startpoint_set(ctx: click.Context, job: str, source: str, offset: str | None,
                   timestamp: str | None, earliest: bool, latest: bool, group: str | None,
                   partition: str | None, dry_run: bool, as_json: bool) -> Output:
    """Set where SOURCE of JOB starts at the job's next start."""
    given: list[tuple[PositionKind, str | None]] = []
    if offset is not None:
        given.append(("offset", offset))
    if timestamp is not None:
        given.append(("timestamp", timestamp))
    if earliest:
        given.append(("earliest", None))
    if latest:
        given.append(("latest", None))
    if group is not None:
        given.append(("group", group))
    if len(given) != 1:
        raise UsageError("give exactly one of --offset JSON, --timestamp ISO8601, --earliest, "
                         "--latest, --group GROUP")
    kind, value = given[0]
    preview = api.startpoint_set(_home(ctx), job, source, kind, value, partition, dry_run)
    return Output(preview.to_dict(), lambda: render.startpoint_text(preview))


@startpoint.command("list")
@click.argument("job")
@json_option
@click.pass_context
@handle_errors
def startpoint_list(ctx: click.Context, job: str, as_json: bool) -> Output:
    """Startpoints waiting for JOB's next start."""
    pending = api.startpoint_list(_home(ctx), job)
    return Output([s.model_dump(mode="json") for entries in pending.values() for s in entries],
                  lambda: "\n".join(f"{entry.describe()}  (set {entry.set_at})"
                                    for entries in pending.values() for entry in entries)
                  or f"no startpoints pending for job '{job}'")


@startpoint.command("clear")
@click.argument("job")
@click.argument("source")
@click.pass_context
@handle_errors
def startpoint_clear(ctx: click.Context, job: str, source: str) -> None:
    """Remove SOURCE's pending startpoints."""
    api.startpoint_clear(_home(ctx), job, source)
    click.echo(f"startpoint of source '{source}' of job '{job}' cleared")


@cli.group()
def debug() -> None:
    """Tools for testing sparkpoint itself."""


@cli.command("submit-entry")
def submit_entry() -> None:
    """Print the path of the script to hand to spark-submit:

    \b
        spark-submit [spark options] "$(sparkpoint submit-entry)" [--home DIR] run JOB.py ...
    """
    from sparkpoint.cli import submit

    click.echo(submit.__file__)


@debug.command("crash-points")
def debug_crash_points() -> None:
    """Every name SPARKPOINT_CRASH_AT accepts, one per line."""
    for name in CRASH_POINTS:
        click.echo(name)


def main(argv: list[str] | None = None, spark: Any = None) -> None:
    """The CLI; ``spark``: a session this process already has (under spark-submit), which
    ``run`` uses instead of starting one."""
    argv = sys.argv[1:] if argv is None else argv
    try:
        result = cli.main(args=argv, prog_name="sparkpoint", standalone_mode=False,
                          obj={"spark": spark, "argv": argv})
    except click.ClickException as exc:
        if _json_requested(argv):
            _json_error("USAGE", exc.format_message(), exc.exit_code)
        exc.show()
        sys.exit(exc.exit_code)
    except click.exceptions.Abort:
        click.echo("Aborted!", err=True)
        sys.exit(EXIT_UNEXPECTED)
    sys.exit(result if isinstance(result, int) else 0)


if __name__ == "__main__":
    main()
