#!/usr/bin/env bash
# Set up kanal in ./.venv on a fresh machine: `bash deploy/bootstrap.sh [EXTRAS]`, e.g. `test`.
# With pyspark installed (extras `spark` or `test`) it also builds kanal-log's JVM table (spark/jvm_jar.py)
# with javac, installing Debian's JDK when javac is missing (as root); without one kanal-log runs as the
# Python source.
# Needs Python >= 3.11; installs Debian's python3-venv when the venv module is missing (as root), and gcc
# and the Python headers when missing (as root), so pip builds the clients' C hot paths
# (clients/_producer_fast.c, clients/_consumer_fast.c). Without them the install still works, on the
# pure-Python paths.
# `bash deploy/bootstrap.sh chaos` also installs (as root, with apt-get) what `kanal chaos run` needs beside
# Python: iproute2 (`ip`), iptables, and fuse3 (`fusermount3`, for the power faults).
set -euo pipefail
cd "$(dirname "$0")/.."
extras="${1:-}"
python="${PYTHON:-python3}"

"$python" -c 'import sys; sys.exit(sys.version_info < (3, 11))' || {
  echo "kanal needs Python >= 3.11; $python is $("$python" --version 2>&1)" >&2
  exit 1
}
if [ ! -x .venv/bin/python ]; then
  if ! "$python" -m venv .venv 2>/dev/null; then
    rm -rf .venv
    if command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
      apt-get update -qq && apt-get install -y -qq python3-venv >/dev/null
      "$python" -m venv .venv
    else
      echo "python3 -m venv failed: install your distribution's python3-venv package" >&2
      exit 1
    fi
  fi
fi
# The clients' C extensions need a C compiler and Python.h for this interpreter.
has_headers() { "$python" -c 'import os, sys, sysconfig
sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))'; }
if ! { command -v gcc >/dev/null || command -v cc >/dev/null; } || ! has_headers; then
  if command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq gcc python3-dev >/dev/null || true
  fi
fi
case ",$extras," in
  *,chaos,*)
    missing=""
    command -v ip >/dev/null || missing="$missing iproute2"
    command -v iptables >/dev/null || missing="$missing iptables"
    command -v fusermount3 >/dev/null || missing="$missing fuse3"
    if [ -n "$missing" ]; then
      if command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing >/dev/null
      else
        echo "kanal chaos needs the Debian packages:$missing (run this as root, or install them)" >&2
        exit 1
      fi
    fi
    ;;
esac
.venv/bin/python -m pip install -q --upgrade pip
if [ -n "$extras" ]; then
  .venv/bin/python -m pip install -q -e ".[$extras]"
else
  .venv/bin/python -m pip install -q -e .
fi
.venv/bin/python -c 'from kanal.clients import consumer, producer
from kanal.broker import batch_validation
for name, m in (("producer", producer), ("consumer", consumer), ("broker'"'"'s record validation", batch_validation)):
    print(f"kanal: the {name} runs its C hot path" if m.NATIVE else f"kanal: the {name} runs pure Python ({m.NATIVE_IMPORT_ERROR})")'
if .venv/bin/python -c 'import pyspark' 2>/dev/null; then
  if ! command -v javac >/dev/null && command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
    mkdir -p /usr/share/man/man1  # minimal images drop it, and openjdk's packages fail without it
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openjdk-17-jdk-headless >/dev/null || true
  fi
  if jar=$(.venv/bin/python -m kanal.spark.jvm_jar); then
    echo "kanal: kanal-log runs as the JVM table ($jar)"
  else
    echo "kanal: kanal-log runs as the Python data source (no javac to build spark/jvm)"
  fi
fi
# The test extras test the Kafka listener with Apache Kafka's own Java client and console tools, and the
# mirror with an Apache Kafka broker as its source (jars from Maven Central, fetched with Debian's maven;
# tests/harness/KafkaDriver.java is compiled with the JDK above)
# and with kcat (Debian's package): fetched here, so a fresh machine's suite has them.
case ",$extras," in
  *,test,*)
    bash deploy/kafka_jars.sh .kafka-jars clients
    # A KRaft Apache Kafka broker: the source of tests/deploy/mirror/test_kafka_source.py and the mirror's
    # Kafka-to-kanal test (benchmarks/apache_kafka.py starts it).
    bash deploy/kafka_jars.sh .kafka-jars server
    if ! command -v kcat >/dev/null && command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
      apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq kcat >/dev/null
    fi
    ;;
esac
