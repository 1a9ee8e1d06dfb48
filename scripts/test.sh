#!/usr/bin/env bash
# Set up .venv and the test servers' jars if needed, then run the whole test suite (unit and
# real-Spark integration).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/test-deps.sh
export PYSPARK_PYTHON="$PWD/.venv/bin/python"
exec .venv/bin/python -m pytest -q -p no:cacheprovider "$@"
