#!/usr/bin/env bash
# Set up .venv and the test servers' jars if needed, then run the whole test suite (unit and
# real-Spark integration).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/test-deps.sh
export PYSPARK_PYTHON="$PWD/.venv/bin/python"
# Spark's driver JVMs start from a class-data-sharing archive built once here (about 30 s):
# the suite starts hundreds of them (tests/support/jvm_archive.py). Empty if none was built.
PYSPARK_SUBMIT_ARGS="$(.venv/bin/python -m tests.support.jvm_archive)"
if [[ -n "$PYSPARK_SUBMIT_ARGS" ]]; then export PYSPARK_SUBMIT_ARGS; else unset PYSPARK_SUBMIT_ARGS; fi
# Two test processes (SPARKPOINT_TEST_WORKERS=0 for one); each file stays in one process so
# that module fixtures and the servers a file starts are made once.
workers="${SPARKPOINT_TEST_WORKERS:-2}"
parallel=()
if [[ "$workers" != 0 ]]; then parallel=(-n "$workers" --dist loadfile); fi
# The slowest tests are listed at the end: where the suite's time goes.
exec .venv/bin/python -m pytest -q -p no:cacheprovider --durations=25 "${parallel[@]}" "$@"
