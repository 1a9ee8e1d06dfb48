#!/usr/bin/env bash
# Fetch what the tests need besides Python packages: the jars of the test servers, each
# described by a pom under tests/servers/ and copied by Maven to .cache/<name>/lib:
#   tests/servers/hdfs/pom.xml  -> .cache/hdfs-minicluster/lib  (MiniDFSCluster, ~115 MB)
#   tests/servers/kafka/pom.xml -> .cache/kafka-broker/lib      (Apache Kafka broker, ~43 MB)
#   tests/servers/s3a/pom.xml   -> .cache/s3a/lib               (hadoop-aws + AWS SDK, for s3a)
#   tests/servers/kafka-connector/pom.xml -> .cache/kafka-connector/lib
#                                         (Spark's Kafka connector, for format("kafka") jobs)
#   tests/servers/delta/pom.xml -> .cache/delta/lib             (Delta Lake, ~13 MB)
# Silent and quick when the jars for the current poms are already there.
set -euo pipefail
cd "$(dirname "$0")/.."

# fetch POM CACHE WHAT SIZE
fetch() {
  local pom="$1" cache="$2" what="$3" size="$4"
  local stamp="$cache/pom.sha256" want
  want="$(sha256sum "$pom" | cut -d' ' -f1)"
  if [[ -f "$stamp" && "$(cat "$stamp")" == "$want" && -d "$cache/lib" ]]; then
    return 0
  fi
  if ! command -v mvn >/dev/null 2>&1; then
    echo "test-deps: Maven (mvn) is required to fetch the $what jars; install it and re-run" >&2
    exit 2
  fi
  echo "test-deps: fetching the $what jars with Maven (once; ~$size)" >&2
  mkdir -p "$cache"
  # Copy into a fresh directory and swap it in, so an interrupted fetch never leaves a
  # half-filled lib/ that looks complete.
  local staging="$cache/lib.partial" log="$cache/maven.log"
  rm -rf "$staging"
  if ! mvn -B -Dstyle.color=never --no-transfer-progress -f "$pom" dependency:copy-dependencies \
      -DincludeScope=runtime -DoutputDirectory="$PWD/$staging" >"$log" 2>&1; then
    tail -n 40 "$log" >&2
    echo "test-deps: Maven could not fetch the $what jars; see $log" >&2
    exit 2
  fi
  rm -rf "$cache/lib"
  mv "$staging" "$cache/lib"
  echo "$want" > "$stamp"
}

fetch tests/servers/hdfs/pom.xml .cache/hdfs-minicluster "HDFS minicluster" "115 MB"
fetch tests/servers/kafka/pom.xml .cache/kafka-broker "Kafka broker" "43 MB"
fetch tests/servers/s3a/pom.xml .cache/s3a "s3a connector (hadoop-aws + AWS SDK bundle)" "690 MB"
fetch tests/servers/kafka-connector/pom.xml .cache/kafka-connector "Spark Kafka connector" "10 MB"
fetch tests/servers/delta/pom.xml .cache/delta "Delta Lake" "13 MB"
