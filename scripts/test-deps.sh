#!/usr/bin/env bash
# Fetch what the tests need besides Python packages: the jars of an HDFS minicluster
# (tests/servers/hdfs/pom.xml), copied by Maven to .cache/hdfs-minicluster/lib. Silent and
# quick when the jars for the current pom are already there.
set -euo pipefail
cd "$(dirname "$0")/.."

pom="tests/servers/hdfs/pom.xml"
cache=".cache/hdfs-minicluster"
stamp="$cache/pom.sha256"
want="$(sha256sum "$pom" | cut -d' ' -f1)"
if [[ -f "$stamp" && "$(cat "$stamp")" == "$want" && -d "$cache/lib" ]]; then
  exit 0
fi
if ! command -v mvn >/dev/null 2>&1; then
  echo "test-deps: Maven (mvn) is required to fetch the HDFS minicluster jars; install it and re-run" >&2
  exit 2
fi

echo "test-deps: fetching the HDFS minicluster jars with Maven (once; ~115 MB)" >&2
mkdir -p "$cache"
# Copy into a fresh directory and swap it in, so an interrupted fetch never leaves a
# half-filled lib/ that looks complete.
staging="$cache/lib.partial"
rm -rf "$staging"
log="$cache/maven.log"
if ! mvn -B -Dstyle.color=never --no-transfer-progress -f "$pom" dependency:copy-dependencies \
    -DincludeScope=runtime -DoutputDirectory="$PWD/$staging" >"$log" 2>&1; then
  tail -n 40 "$log" >&2
  echo "test-deps: Maven could not fetch the HDFS minicluster jars; see $log" >&2
  exit 2
fi
rm -rf "$cache/lib"
mv "$staging" "$cache/lib"
echo "$want" > "$stamp"
