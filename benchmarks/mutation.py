"""Mutation testing of sparkpoint's protocol modules with mutmut: which small changes to a
module (an operator, a constant, a condition, a removed call) its tests fail to notice.

    .venv/bin/python benchmarks/mutation.py                      # the six default modules
    .venv/bin/python benchmarks/mutation.py sinks/gaps.py sinks/rewind.py
    .venv/bin/python benchmarks/mutation.py storage/lease.py \\
        --tests storage/lease.py=tests/integration/test_lease_fencing.py   # adds Spark tests
    .venv/bin/python benchmarks/mutation.py --list               # modules and their tests

Not part of the test suite and not run by CI: one module takes minutes to an hour on two
cores. Modules are named relative to src/sparkpoint/. Each is run on its own, in a copy of
src/ and tests/ under ``--work`` (default .cache/mutation/<module>), against the test files
that guard it (TESTS below; ``--tests MODULE=PATH`` adds a file or a test id, and may name
a module that has no default). The default files are unit tests and tests against moto's
S3 server: no JVM per mutant. Their HDFS cases (a MiniDFSCluster, a JVM per mutant) are
left out with ``-k "not hdfs"`` unless ``--hdfs``, and tests marked ``spark`` with
``-m "not spark"`` unless the module has tests added with ``--tests`` (a Spark test then
starts a JVM for every mutant it runs against: minutes a mutant).

mutmut runs, for each mutant, the tests that reached the mutated function while it
collected its statistics. Many protocol tests run sparkpoint in processes of their own (CLI
commands, contenders for a lease, crash points); mutation_hooks/ makes those processes run
the mutated code and count as reaching what they reached.

mutmut changes expressions; it never removes a statement, so a check or a read left out
(``self.check()``, a second listing) is not among its mutants. ``--deletions`` adds that
kind: each call statement and assignment of the module's functions (``--functions`` names
some) is replaced by ``pass`` in turn, and the module's tests run in a process of their own
against it (a clean run first, to know their time; three times that is a timeout).

It prints, per module: mutants, killed, survived, timeouts and those no chosen test
reaches ("no tests"), then each survivor as ``file:line`` with the line before and after
the mutation, and the functions no chosen test reached. ``--json FILE`` writes the same.
It exits 0 whatever it finds: it reports, it does not judge.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
HOOKS = Path(__file__).resolve().parent / "mutation_hooks"
HITS_ENV = "SPARKPOINT_MUTATION_HITS"

# Each module and the test files that guard it (in-process calls and CLI processes).
TESTS: dict[str, list[str]] = {
    "storage/lease.py": ["tests/unit/test_job_lease.py", "tests/unit/test_lease_renewal.py",
                         "tests/unit/test_lease_edges.py", "tests/unit/test_lease_records.py",
                         "tests/unit/test_lost_answers.py::"
                         "test_a_lease_taken_by_a_create_whose_answer_was_lost_is_held"],
    "snapshot/collection.py": ["tests/unit/test_collection_handshake.py",
                               "tests/unit/test_remote_snapshot_crashes.py",
                               "tests/unit/test_collection_announcements.py"],
    "snapshot/object_store.py": ["tests/unit/test_collection_handshake.py",
                                 "tests/unit/test_remote_snapshot_crashes.py",
                                 "tests/unit/test_in_store_copies.py"],
    "startpoints/store.py": ["tests/unit/test_startpoint_sets.py",
                             "tests/unit/test_file_startpoints.py",
                             "tests/unit/test_startpoint_store_records.py"],
    "sinks/gaps.py": ["tests/unit/test_sink_gaps.py", "tests/unit/test_sink_log_stores.py",
                      "tests/unit/test_sink_history.py", "tests/unit/test_state_partitions.py"],
    "sinks/rewind.py": ["tests/unit/test_sink_rewind.py"],
}
# What each mutmut status is counted as in the report.
COUNTED = {"killed": "killed", "survived": "survived", "timeout": "timeouts",
           "not checked": "not_checked",
           "no tests": "no_tests", "suspicious": "suspicious", "segfault": "killed_by_signal",
           "caught by type check": "killed", "skipped": "skipped"}
# Entries of the repository a test may read beside src/ and tests/ (the jars of
# scripts/test-deps.sh, the examples), linked into the mutated tree.
LINKED = (".cache", "examples", "java", "scripts", "benchmarks", "README.md")


@dataclass
class Survivor:
    location: str  # src/sparkpoint/...py:LINE
    function: str
    before: str
    after: str
    mutant: str


@dataclass
class ModuleResult:
    module: str
    tests: list[str]
    seconds: float
    mutants: int = 0
    counts: dict[str, int] = field(default_factory=dict)
    survivors: list[Survivor] = field(default_factory=list)
    unreached: dict[str, int] = field(default_factory=dict)  # function -> mutants
    error: str | None = None


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    parser.add_argument("modules", nargs="*", default=list(TESTS),
                        help="modules relative to src/sparkpoint/ (default: %(default)s)")
    parser.add_argument("--tests", action="append", default=[], metavar="MODULE=PATH",
                        help="add a test file or test id to a module's tests (repeatable)")
    parser.add_argument("--stores", default="",
                        help="only the tests of these stores, e.g. 'local' (comma-separated, "
                             "of local, s3, hdfs): a first pass in a fraction of the time, "
                             "whose survivors are then run against every store's tests")
    parser.add_argument("--again", type=Path, metavar="JSON",
                        help="run only the mutants an earlier run (its --json) left alive: "
                             "its survivors and those of the functions it did not reach")
    parser.add_argument("--deselect", action="append", default=[], metavar="TEST_ID",
                        help="leave a test out (pytest's --deselect; repeatable)")
    parser.add_argument("--hdfs", action="store_true",
                        help="keep the tests' HDFS cases (a MiniDFSCluster JVM per mutant)")
    parser.add_argument("--jobs", type=int, default=2, help="mutants run at once")
    parser.add_argument("--work", type=Path, default=REPO / ".cache" / "mutation")
    parser.add_argument("--json", type=Path, help="also write the results here")
    parser.add_argument("--list", action="store_true", help="print the modules and tests")
    parser.add_argument("--deletions", action="store_true",
                        help="statement deletions instead of mutmut's mutants")
    parser.add_argument("--functions", default="",
                        help="with --deletions: only in these functions (comma-separated, "
                             "Class.method for a method)")
    parser.add_argument("--report", action="store_true",
                        help="only report what an earlier run (or one still running) left "
                             "in --work; mutants not yet run count as not checked")
    return parser.parse_args(argv)


def tests_by_module(args: argparse.Namespace) -> tuple[dict[str, list[str]], set[str]]:
    """Each requested module's tests, and the modules that have tests added by hand."""
    chosen = {module: list(TESTS.get(module, [])) for module in args.modules}
    added: set[str] = set()
    for item in args.tests:
        module, sep, path = item.partition("=")
        if not sep or module not in chosen:
            raise SystemExit(f"mutation: --tests {item}: expected MODULE=PATH with MODULE one "
                             f"of the modules to run ({', '.join(chosen)})")
        chosen[module].append(path)
        added.add(module)
    for module, tests in chosen.items():
        if not (REPO / "src" / "sparkpoint" / module).is_file():
            raise SystemExit(f"mutation: {module}: no such file under src/sparkpoint/")
        if not tests:
            raise SystemExit(f"mutation: {module} has no default tests: name them with "
                             f"--tests {module}=tests/...")
    return chosen, added


def slug(module: str) -> str:
    return module.removesuffix(".py").replace("/", ".")


def prepare(work: Path, module: str, tests: list[str], pytest_args: list[str]) -> None:
    """A fresh copy of src/, tests/ and pyproject.toml (with mutmut's settings) in ``work``,
    and the links a test may follow from the mutated tree mutmut makes in work/mutants."""
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    shutil.copytree(REPO / "src", work / "src", ignore=ignore)
    shutil.copytree(REPO / "tests", work / "tests", ignore=ignore)
    settings = {
        "source_paths": ["src"],
        "only_mutate": [f"src/sparkpoint/{module}"],
        "pytest_add_cli_args_test_selection": tests,
        "pytest_add_cli_args": pytest_args,
        # Mutants are forked from a server process that ignores the exit of children it did
        # not fork: the tests leave processes of their own (contenders, crashed commands),
        # and mutmut's plain fork runner fails on the first such exit it reaps.
        "process_isolation": "forkserver",
    }
    toml = "\n".join(f"{key} = {json.dumps(value)}" for key, value in settings.items())
    text = (REPO / "pyproject.toml").read_text()
    (work / "pyproject.toml").write_text(f"{text}\n[tool.mutmut]\n{toml}\n")
    mutants = work / "mutants"
    # Made now, not by mutmut: a directory on PYTHONPATH that is missing when Python starts
    # is remembered as missing, and the mutated code would not be imported.
    (mutants / "src").mkdir(parents=True)
    for name in LINKED:
        if (REPO / name).exists():
            (mutants / name).symlink_to(REPO / name)


def mutants_again(previous: Path, module: str) -> list[str]:
    """The mutants of ``module`` an earlier run (its ``--json``) left alive: its survivors,
    and every mutant of the functions its tests did not reach (as mutmut's patterns)."""
    dotted = "sparkpoint." + slug(module)
    for result in json.loads(previous.read_text()):
        if result["module"] == module:
            names = [survivor["mutant"] for survivor in result["survivors"]]
            for function in result["unreached"]:
                cls, _, method = function.rpartition(".")
                mangled = f"xǁ{cls}ǁ{method}" if cls else f"x_{method}"
                names.append(f"{dotted}.{mangled}__mutmut_*")
            return names
    raise SystemExit(f"mutation: {previous} holds no results of {module}")


def run_mutmut(work: Path, jobs: int, log: Path, mutants: list[str] | None = None) -> int:
    hits = work / "hits"
    hits.mkdir()
    env = dict(os.environ, **{HITS_ENV: str(hits)})
    # The tests' own processes import the mutated code and record what they reach.
    env["PYTHONPATH"] = os.pathsep.join(
        [str(HOOKS), str(work / "mutants" / "src"),
         *filter(None, [os.environ.get("PYTHONPATH")])])
    env.setdefault("PYSPARK_PYTHON", sys.executable)
    mutmut = Path(sys.executable).parent / "mutmut"
    with open(log, "wb") as out:
        done = subprocess.run([str(mutmut), "run", "--max-children", str(jobs),
                               *(mutants or [])], cwd=work,
                              env=env, stdout=out, stderr=subprocess.STDOUT, check=False)
    return done.returncode


def mutmut_results(work: Path) -> dict[str, str]:
    """Every mutant's name and status (``mutmut results --all true``)."""
    mutmut = Path(sys.executable).parent / "mutmut"
    done = subprocess.run([str(mutmut), "results", "--all", "true"], cwd=work,
                          capture_output=True, text=True, check=True)
    found = {}
    for line in done.stdout.splitlines():
        name, sep, status = line.strip().rpartition(": ")
        if sep and "__mutmut_" in name:
            found[name] = status
    return found


def function_of(mutant: str) -> str:
    """``pkg.mod.x_fill_gap__mutmut_8`` -> ``fill_gap``; ``pkg.mod.xǁLeaseǁrenew__mutmut_3``
    -> ``Lease.renew``."""
    mangled = mutant.rsplit(".", 1)[1].rsplit("__mutmut_", 1)[0]
    if "ǁ" in mangled:  # a method: xǁClassǁname
        return mangled.removeprefix("x").strip("ǁ").replace("ǁ", ".")
    return mangled.removeprefix("x_")


def function_lines(source: str) -> dict[str, tuple[int, int]]:
    """Each function's and method's (first, last) line: ``name`` or ``Class.name``."""
    spans: dict[str, tuple[int, int]] = {}

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                spans[prefix + child.name] = (child.lineno, child.end_lineno or child.lineno)
            elif isinstance(child, ast.ClassDef):
                visit(child, f"{prefix}{child.name}.")

    visit(ast.parse(source), "")
    return spans


_HUNK = re.compile(r"^@@ -(\d+)(?:,\d+)? \+\d+(?:,\d+)? @@")


def describe(work: Path, module: str, mutant: str, lines: list[str],
             spans: dict[str, tuple[int, int]]) -> Survivor:
    """The mutant's place in the module and its change, from ``mutmut show``: its diff is
    of the function's text, numbered from the function's ``def`` line."""
    mutmut = Path(sys.executable).parent / "mutmut"
    diff = subprocess.run([str(mutmut), "show", mutant], cwd=work, capture_output=True,
                          text=True, check=True).stdout.splitlines()
    function = function_of(mutant)
    first, last = spans.get(function, (1, len(lines)))
    before = [line[1:] for line in diff if line.startswith("-") and not line.startswith("---")]
    after = [line[1:] for line in diff if line.startswith("+") and not line.startswith("+++")]
    number = first
    for index, line in enumerate(diff):
        hunk = _HUNK.match(line)
        if hunk is None:
            continue
        offset = int(hunk.group(1))
        for body in diff[index + 1:]:
            if body.startswith("-"):
                break
            offset += 1
        number = first + offset - 1
        break
    if before and not (first <= number <= last and lines[number - 1] == before[0]):
        # Not where the numbering says: the first line of the function with that text.
        number = next((n for n in range(first, last + 1) if lines[n - 1] == before[0]), number)
    return Survivor(location=f"src/sparkpoint/{module}:{number}", function=function,
                    before=" / ".join(line.strip() for line in before),
                    after=" / ".join(line.strip() for line in after), mutant=mutant)


def run_module(module: str, tests: list[str], pytest_args: list[str], args: argparse.Namespace
               ) -> ModuleResult:
    work = args.work / slug(module)
    log = work / "mutmut.log"
    began = time.monotonic()
    if args.report:
        code = 0 if (work / "mutants").is_dir() else 1
    else:
        prepare(work, module, tests, pytest_args)
        again = mutants_again(args.again, module) if args.again else None
        code = run_mutmut(work, args.jobs, log, again)
    result = ModuleResult(module, tests, round(time.monotonic() - began, 1))
    if code != 0:
        tail = log.read_text(errors="replace")[-2000:]
        result.error = f"mutmut exited {code}; see {log}:\n{tail}"
        return result
    statuses = mutmut_results(work)
    if args.again:  # only what was run again counts
        statuses = {name: status for name, status in statuses.items()
                    if status != "not checked"}
    result.mutants = len(statuses)
    counts = Counter(COUNTED.get(status, status.replace(" ", "_"))
                     for status in statuses.values())
    result.counts = {key: counts.get(key, 0) for key in
                     ("killed", "survived", "timeouts", "no_tests")} | \
        {key: value for key, value in counts.items()
         if key not in ("killed", "survived", "timeouts", "no_tests")}
    source = (REPO / "src" / "sparkpoint" / module).read_text()
    lines, spans = source.splitlines(), function_lines(source)
    for mutant, status in statuses.items():
        if status == "survived":
            result.survivors.append(describe(work, module, mutant, lines, spans))
        elif status == "no tests":
            function = function_of(mutant)
            result.unreached[function] = result.unreached.get(function, 0) + 1
    result.survivors.sort(key=lambda s: int(s.location.rsplit(":", 1)[1]))
    return result


def deletable(source: str, functions: set[str]) -> list[tuple[str, ast.stmt]]:
    """Each call statement and assignment in the module's functions (and methods), with the
    function's name: what a deletion mutant replaces by ``pass``."""
    found: list[tuple[str, ast.stmt]] = []
    for name, (first, last) in function_lines(source).items():
        if functions and name not in functions:
            continue
        node = next(n for n in ast.walk(ast.parse(source))
                    if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)
                    and n.lineno == first and (n.end_lineno or n.lineno) == last)
        for statement in ast.walk(node):
            if (isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Call)) or \
                    isinstance(statement, ast.Assign | ast.AugAssign | ast.AnnAssign):
                found.append((name, statement))
    return sorted(found, key=lambda item: item[1].lineno)


def without(lines: list[str], statement: ast.stmt) -> str:
    """The module with ``statement`` replaced by ``pass`` (the line numbers kept)."""
    changed = list(lines)
    first, last = statement.lineno - 1, (statement.end_lineno or statement.lineno) - 1
    start, end = statement.col_offset, statement.end_col_offset or len(lines[last])
    changed[first] = lines[first][:start] + "pass" + lines[last][end:]
    for index in range(first + 1, last + 1):
        changed[index] = ""
    return "\n".join(changed) + "\n"


def run_deletions(module: str, tests: list[str], pytest_args: list[str],
                  args: argparse.Namespace) -> ModuleResult:
    work = args.work / f"{slug(module)}-deletions"
    shutil.rmtree(work, ignore_errors=True)
    shutil.copytree(REPO / "src", work / "src",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    target = work / "src" / "sparkpoint" / module
    source = target.read_text()
    lines = source.splitlines()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(work / "src"), *filter(None, [os.environ.get("PYTHONPATH")])]))
    env.setdefault("PYSPARK_PYTHON", sys.executable)
    command = [sys.executable, "-m", "pytest", "-x", "-q", *pytest_args, *tests]

    def tests_pass(timeout: float | None) -> bool | None:
        try:
            done = subprocess.run(command, cwd=REPO, env=env, capture_output=True,
                                  timeout=timeout, check=False)
        except subprocess.TimeoutExpired:
            return None
        return done.returncode == 0

    began = time.monotonic()
    result = ModuleResult(module, tests, 0.0)
    if not tests_pass(None):
        result.error = "the tests fail without a mutant: " + " ".join(command)
        return result
    timeout = 3 * (time.monotonic() - began) + 30
    functions = {name for name in args.functions.split(",") if name}
    counts = Counter[str]()
    for function, statement in deletable(source, functions):
        target.write_text(without(lines, statement))
        passed = tests_pass(timeout)
        counts["timeouts" if passed is None else "survived" if passed else "killed"] += 1
        if passed:
            text = " / ".join(line.strip() for line in
                              lines[statement.lineno - 1:statement.end_lineno])
            result.survivors.append(Survivor(
                location=f"src/sparkpoint/{module}:{statement.lineno}", function=function,
                before=text, after="pass", mutant="deletion"))
    target.write_text(source)
    result.mutants = sum(counts.values())
    result.counts = {key: counts.get(key, 0) for key in ("killed", "survived", "timeouts")}
    result.seconds = round(time.monotonic() - began, 1)
    return result


def report(result: ModuleResult) -> str:
    out = [f"== {result.module}: tests {' '.join(result.tests)} ({result.seconds:.0f} s)"]
    if result.error:
        return "\n".join([*out, f"   failed: {result.error}"])
    counts = ", ".join(f"{value} {key.replace('_', ' ')}" for key, value in
                       result.counts.items())
    out.append(f"   {result.mutants} mutants: {counts}")
    for survivor in result.survivors:
        out.append(f"   survived {survivor.location} ({survivor.function}): "
                   f"{survivor.before}  ->  {survivor.after}")
    for function, mutants in sorted(result.unreached.items()):
        out.append(f"   no test reaches {function} ({mutants} mutants)")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    chosen, added = tests_by_module(args)
    if args.list:
        for module, tests in chosen.items():
            print(f"{module}: {' '.join(tests)}")
        return 0
    results = []
    for module, tests in chosen.items():
        pytest_args = ["-p", "no:cacheprovider"] + \
            ([] if args.deletions else ["-p", "mutation_hits"])
        if args.stores:
            # Only the tests of these stores (fixtures' parameters), and tests of no store.
            left_out = sorted({"local", "s3", "hdfs"} - set(args.stores.split(",")))
            pytest_args += ["-k", " and ".join(f"not {store}" for store in left_out)]
        elif not args.hdfs:
            pytest_args += ["-k", "not hdfs"]
        if module not in added:
            pytest_args += ["-m", "not spark"]
        for test in args.deselect:
            pytest_args += ["--deselect", test]
        run = run_deletions if args.deletions else run_module
        result = run(module, tests, pytest_args, args)
        print(report(result), flush=True)
        results.append(result)
    if args.json:
        args.json.write_text(json.dumps([asdict(r) for r in results], indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
