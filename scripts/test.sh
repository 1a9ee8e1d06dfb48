#!/usr/bin/env bash
# Set up .venv and the test servers' jars if needed, then run the whole test suite (unit and
# real-Spark integration).
#
# --fast: the lane for a change's own loop (under 3 minutes on 2 cores): the unit tests, with
# their cases on local disk and on moto's S3 server, none on HDFS (a MiniDFSCluster JVM per
# test process) and none that needs Spark; no jars fetched, no JVM archive built. CI runs
# everything.
set -euo pipefail
cd "$(dirname "$0")/.."
fast=0
if [[ "${1:-}" == "--fast" ]]; then
  fast=1
  shift
  set -- tests/unit -k "not hdfs" -m "not spark and not cluster" "$@"
fi
bash scripts/setup.sh
export PYSPARK_PYTHON="$PWD/.venv/bin/python"
if [[ "$fast" == 0 ]]; then
  bash scripts/test-deps.sh
  # Spark's driver JVMs start from a class-data-sharing archive built once here (about 30 s):
  # the suite starts hundreds of them (tests/support/jvm_archive.py). Empty if none was built.
  PYSPARK_SUBMIT_ARGS="$(.venv/bin/python -m tests.support.jvm_archive)"
  if [[ -n "$PYSPARK_SUBMIT_ARGS" ]]; then export PYSPARK_SUBMIT_ARGS; else unset PYSPARK_SUBMIT_ARGS; fi
fi
# Two test processes (SPARKPOINT_TEST_WORKERS=0 for one); each file stays in one process so
# that module fixtures and the servers a file starts are made once.
workers="${SPARKPOINT_TEST_WORKERS:-2}"
parallel=()
if [[ "$workers" != 0 ]]; then parallel=(-n "$workers" --dist loadfile); fi
# The slowest tests are listed at the end: where the suite's time goes.
exec .venv/bin/python -m pytest -q -p no:cacheprovider --durations=25 "${parallel[@]}" "$@"
