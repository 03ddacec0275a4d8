"""One Apache Kafka broker (KRaft, from the jars of `bash deploy/kafka_jars.sh .kafka-jars server`) for a
test module: `with apache_kafka(workdir) as bootstrap:` starts it (benchmarks/apache_kafka.py) and stops it
by PID."""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator
from pathlib import Path

from benchmarks.apache_kafka import start_kafka, stop_kafka


@contextlib.contextmanager
def apache_kafka(workdir: Path) -> Iterator[str]:
    process, bootstrap = start_kafka(workdir, heap="512m")
    try:
        yield bootstrap
    finally:
        gc.collect()  # the module's librdkafka clients gone first, not left reconnecting to a stopped broker
        stop_kafka(process)
