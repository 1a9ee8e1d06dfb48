#!/usr/bin/env bash
# Set up .venv if needed, then run the demo: a real upgrade of a stateful job on local Spark.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/python scripts/demo.py "$@"
