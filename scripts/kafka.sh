#!/usr/bin/env bash
# Fetches the Apache Kafka broker (the kafka_2.13 artifact) and Kafka's
# tools (kafka-tools: ProducerPerformance, which pcapsync bench kafka runs),
# with their runtime dependencies, from Maven Central into a cache, for the
# tests that start a real single-node KRaft broker
# (internal/testutil/kafkatest) and the Kafka benchmarks. Prints the
# directory of the jars. The cache survives between runs; a second call
# does nothing. A cache without one of the jars (from an older version of
# this script) is fetched again, into a new directory that then replaces
# it, so that a broker starting meanwhile still finds every jar.
#
#   scripts/kafka.sh            fetch if missing, print the libs directory
#
# PCAPSYNC_KAFKA_LIBS overrides where the jars go (and where the tests
# look for them).
set -euo pipefail
version="${PCAPSYNC_KAFKA_VERSION:-4.1.1}"
libs="${PCAPSYNC_KAFKA_LIBS:-${XDG_CACHE_HOME:-$HOME/.cache}/pcapsync/kafka-$version/libs}"
if [ -f "$libs/kafka_2.13-$version.jar" ] && [ -f "$libs/kafka-tools-$version.jar" ] && [ -f "$libs/.complete" ]; then
	echo "$libs"
	exit 0
fi
command -v mvn >/dev/null || { echo "kafka.sh: needs Maven (mvn) and a Java 17 runtime" >&2; exit 1; }
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
new="$libs.new.$$"
trap 'rm -rf "$work" "$new"' EXIT
cat >"$work/pom.xml" <<POM
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>pcapsync.test</groupId>
  <artifactId>kafka-broker</artifactId>
  <version>1</version>
  <dependencies>
    <dependency>
      <groupId>org.apache.kafka</groupId>
      <artifactId>kafka_2.13</artifactId>
      <version>$version</version>
    </dependency>
    <dependency>
      <groupId>org.apache.kafka</groupId>
      <artifactId>kafka-tools</artifactId>
      <version>$version</version>
    </dependency>
  </dependencies>
</project>
POM
echo "kafka.sh: fetching Apache Kafka $version from Maven Central into $libs" >&2
mkdir -p "$new"
mvn -q -B -f "$work/pom.xml" dependency:copy-dependencies -DincludeScope=runtime -DoutputDirectory="$new" >&2
touch "$new/.complete"
# Replace the old cache by renames: no moment without a complete one
# but between the two.
if [ -e "$libs" ]; then
	mv "$libs" "$libs.old.$$"
fi
mkdir -p "$(dirname "$libs")"
mv "$new" "$libs"
rm -rf "$libs.old.$$"
echo "$libs"
