#!/usr/bin/env bash
# deploy/kafka_jars.sh DEST KIND
#
# Gathers the Apache Kafka jars (from Maven Central, through `mvn`) that kanal's
# compatibility tests run against, into DEST/KIND.
#
#   KIND=clients  kafka-clients + kafka-tools (console tools) + slf4j-simple
#   KIND=server   kafka-clients + kafka-tools + kafka_2.13 + kafka-storage (a
#                 KRaft broker) + log4j-slf4j-impl: the broker logs through
#                 log4j2 like the Apache distribution does (configure it with
#                 -Dlog4j2.configurationFile=...), so no slf4j-simple there
#                 (two slf4j bindings would make slf4j pick one at random).
#   KIND=mirrormaker  MirrorMaker 2 at MM2_VERSION: connect-mirror,
#                 connect-mirror-client, connect-runtime (and what they need)
#                 + log4j-slf4j-impl, for the same reason as server. Run it in
#                 dedicated mode as: java -cp 'DEST/mirrormaker/*'
#                 org.apache.kafka.connect.mirror.MirrorMaker mm2.properties
#                 (benchmarks/mirror_mm2_bench.py does).
#
# Idempotent: DEST/KIND/.complete is written last; when it is present and names
# the same set of artifacts, nothing is done.
#
# Environment overrides:
#   KAFKA_VERSION   (default 4.4.0)
#   SLF4J_VERSION   (default 1.7.36, the slf4j-api that kafka-clients 4.4.0 declares)
#   LOG4J_VERSION   (default 2.25.5, the log4j-core that kafka-tools 4.4.0 brings)
#   MM2_VERSION     (default 4.3.1) the Kafka version of the mirrormaker kind. Not
#                   KAFKA_VERSION: Maven Central serves no connect-mirror jar for
#                   4.4.0 or 4.3.2 (tried 2026-12-08; connect-runtime 4.4.0 is
#                   there), and 4.3.1 is the newest that resolves. Its whole set
#                   is 4.3.1 (connect-runtime, kafka-clients) so that no two
#                   versions of one Kafka module meet on the classpath; 4.3
#                   clients speak to the 4.4 brokers of the server kind.
#   MVN             (default: mvn on PATH)
#   MVN_ARGS        extra arguments for mvn, e.g. -Dmaven.repo.local=/some/dir
set -euo pipefail

usage() { echo "usage: $0 DEST clients|server|mirrormaker" >&2; exit 2; }
[ $# -eq 2 ] || usage
DEST=$1
KIND=$2
KAFKA_VERSION=${KAFKA_VERSION:-4.4.0}
SLF4J_VERSION=${SLF4J_VERSION:-1.7.36}
LOG4J_VERSION=${LOG4J_VERSION:-2.25.5}
MM2_VERSION=${MM2_VERSION:-4.3.1}
DEP_PLUGIN_VERSION=3.8.1   # works with Maven 3.6.3+ (Debian bookworm ships 3.8.7)

case "$KIND" in
  clients) ARTIFACTS="org.apache.kafka:kafka-clients:$KAFKA_VERSION org.apache.kafka:kafka-tools:$KAFKA_VERSION org.slf4j:slf4j-simple:$SLF4J_VERSION" ;;
  server)  ARTIFACTS="org.apache.kafka:kafka-clients:$KAFKA_VERSION org.apache.kafka:kafka-tools:$KAFKA_VERSION org.apache.kafka:kafka_2.13:$KAFKA_VERSION org.apache.kafka:kafka-storage:$KAFKA_VERSION org.apache.logging.log4j:log4j-slf4j-impl:$LOG4J_VERSION" ;;
  mirrormaker)
    ARTIFACTS=""
    for n in connect-mirror connect-mirror-client connect-runtime; do
      ARTIFACTS="$ARTIFACTS org.apache.kafka:$n:$MM2_VERSION"
    done
    ARTIFACTS="${ARTIFACTS# } org.apache.logging.log4j:log4j-slf4j-impl:$LOG4J_VERSION" ;;
  *) usage ;;
esac

OUT="$DEST/$KIND"
MARKER="$OUT/.complete"
if [ -f "$MARKER" ] && [ "$(head -n1 "$MARKER")" = "$ARTIFACTS" ]; then
  echo "kafka_jars: $OUT already complete ($(du -sh "$OUT" | cut -f1)), nothing to do" >&2
  exit 0
fi

start=$(date +%s)

MVN=${MVN:-mvn}
if ! command -v "$MVN" >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "kafka_jars: mvn missing, installing Debian's maven package" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >&2
    apt-get install -y -qq --no-install-recommends maven >&2
    MVN=mvn
  else
    echo "kafka_jars: mvn not found (and cannot install it: not root or no apt-get)" >&2
    exit 1
  fi
fi
command -v java >/dev/null 2>&1 || { echo "kafka_jars: java not found" >&2; exit 1; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

{
  cat <<EOF
<?xml version="1.0" encoding="UTF-8"?>
<project xmlns="http://maven.apache.org/POM/4.0.0"
         xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance"
         xsi:schemaLocation="http://maven.apache.org/POM/4.0.0 http://maven.apache.org/xsd/maven-4.0.0.xsd">
  <modelVersion>4.0.0</modelVersion>
  <groupId>kanal.compat</groupId>
  <artifactId>kafka-jars-$KIND</artifactId>
  <version>1</version>
  <packaging>pom</packaging>
  <build>
    <pluginManagement>
      <plugins>
        <plugin>
          <groupId>org.apache.maven.plugins</groupId>
          <artifactId>maven-dependency-plugin</artifactId>
          <version>$DEP_PLUGIN_VERSION</version>
        </plugin>
      </plugins>
    </pluginManagement>
  </build>
  <dependencies>
EOF
  for a in $ARTIFACTS; do
    IFS=: read -r g n v <<<"$a"
    printf '    <dependency><groupId>%s</groupId><artifactId>%s</artifactId><version>%s</version></dependency>\n' "$g" "$n" "$v"
  done
  cat <<EOF
  </dependencies>
</project>
EOF
} >"$work/pom.xml"

# Start from an empty directory so that a half-finished earlier run or an older
# version leaves no stray jars behind.
rm -rf "$OUT"
mkdir -p "$OUT"
OUT_ABS=$(cd "$OUT" && pwd)

# Debian's mvn 3.8.7 prints stray colour escapes even with -q -B: keep its
# output in a log and show it only when it fails.
if ! (cd "$work" && "$MVN" -q -B -Dstyle.color=never ${MVN_ARGS:-} -f pom.xml dependency:copy-dependencies \
      -DincludeScope=runtime -DoutputDirectory="$OUT_ABS") >"$work/mvn.log" 2>&1; then
  cat "$work/mvn.log" >&2
  echo "kafka_jars: mvn dependency:copy-dependencies failed" >&2
  exit 1
fi

n=$(find "$OUT" -maxdepth 1 -name '*.jar' | wc -l)
if [ "$n" -eq 0 ]; then
  echo "kafka_jars: no jars were copied into $OUT" >&2
  exit 1
fi
for a in $ARTIFACTS; do
  IFS=: read -r g n2 v <<<"$a"
  [ -f "$OUT/$n2-$v.jar" ] || { echo "kafka_jars: $n2-$v.jar missing in $OUT" >&2; exit 1; }
done

{ echo "$ARTIFACTS"; date -u +%Y-%m-%dT%H:%M:%SZ; } >"$MARKER.tmp"
mv "$MARKER.tmp" "$MARKER"

end=$(date +%s)
echo "kafka_jars: $KIND: $n jars, $(du -sh "$OUT" | cut -f1) in $OUT, took $((end - start)) s" >&2
