#!/usr/bin/env bash
# Build src/sparkpoint/resources/sparkpoint-spark.jar, sparkpoint's own classes for Spark's
# JVM (java/: a local file system for state rewrites, spark/local_fs.py; a SQL function
# giving a key's UnsafeRow bytes and the tasks removing RocksDB keys with Spark's rocksdbjni,
# spark/state_prune.py), against the jars pyspark ships. The
# jar is committed, so installing sparkpoint needs no Java compiler; its manifest records the
# sources' SHA-256, which tests/unit/test_own_jar.py checks against the sources: edit a
# source, run this script, commit both.
set -euo pipefail
cd "$(dirname "$0")/.."
python="${PYTHON:-.venv/bin/python}"
jars="$("$python" -c 'import pyspark, os; print(os.path.join(os.path.dirname(pyspark.__file__), "jars"))')"
build="$(mktemp -d)"
trap 'rm -rf "$build"' EXIT
mapfile -t sources < <(find java -name '*.java' | LC_ALL=C sort)
javac --release 17 -nowarn -cp "$jars/*" -d "$build/classes" "${sources[@]}"
digest="$(cat "${sources[@]}" | sha256sum | cut -d' ' -f1)"
printf 'Source-SHA256: %s\n' "$digest" > "$build/manifest.txt"
# Fixed timestamps: the same sources and compiler give the same jar.
find "$build/classes" -exec touch -d '2000-01-01T00:00:00Z' {} +
jar --create --file src/sparkpoint/resources/sparkpoint-spark.jar \
  --manifest "$build/manifest.txt" --date 2000-01-01T00:00:02Z -C "$build/classes" .
echo "built src/sparkpoint/resources/sparkpoint-spark.jar (sources $digest)"
