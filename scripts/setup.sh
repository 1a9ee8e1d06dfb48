#!/usr/bin/env bash
# Create .venv at the repository root with pyspark 4.3.0 and sparkpoint (editable, with the
# development tools and the documentation site's). Re-running is cheap: it reinstalls only when pyproject.toml changed.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON="${PYTHON:-}"
if [[ -z "$PYTHON" ]]; then
  for candidate in python3.11 python3.12 python3.13 python3; do
    if command -v "$candidate" >/dev/null 2>&1 &&
       "$candidate" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)'; then
      PYTHON="$candidate"; break
    fi
  done
fi
if [[ -z "$PYTHON" ]]; then
  echo "setup: Python 3.11 or newer is required; install it and re-run" >&2; exit 2
fi
if ! command -v java >/dev/null 2>&1; then
  echo "setup: Java 17 is required by Spark 4.3; install a JDK 17 and re-run" >&2; exit 2
fi

if [[ ! -x .venv/bin/python ]]; then
  "$PYTHON" -m venv .venv
fi
stamp=".venv/.sparkpoint-installed"
want="$(sha256sum pyproject.toml | cut -d' ' -f1)"
if [[ ! -f "$stamp" || "$(cat "$stamp")" != "$want" ]]; then
  .venv/bin/python -m pip install --quiet --upgrade pip
  .venv/bin/python -m pip install --quiet -e '.[dev,docs]'
  echo "$want" > "$stamp"
fi
