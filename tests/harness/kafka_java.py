"""Apache Kafka's Java client and console tools, run against a kanal cluster's Kafka listener.

The jars are in `.kafka-jars/clients` (deploy/kafka_jars.sh, run by `deploy/bootstrap.sh test`);
KafkaDriver.java (beside this module) is compiled once per source version into `.kafka-jars/driver-<hash>`.
Every run is a process with a deadline; its JSON lines are parsed for the test."""

from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
JARS = ROOT / ".kafka-jars" / "clients"
DRIVER_SOURCE = Path(__file__).with_name("KafkaDriver.java")
_QUIET = "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn"

TOPICS = "org.apache.kafka.tools.TopicCommand"
CONSOLE_PRODUCER = "org.apache.kafka.tools.ConsoleProducer"
CONSOLE_CONSUMER = "org.apache.kafka.tools.consumer.ConsoleConsumer"
CONSUMER_GROUPS = "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand"
GET_OFFSETS = "org.apache.kafka.tools.GetOffsetShell"


def _classpath(*extra: Path) -> str:
    if not (JARS / ".complete").exists():
        raise RuntimeError(f"Apache Kafka's jars are missing in {JARS}: run `bash deploy/bootstrap.sh test`")
    return ":".join([*(str(p) for p in extra), f"{JARS}/*"])


def driver_classes() -> Path:
    """The compiled driver's directory (compiled now if this source version was never compiled)."""
    digest = hashlib.sha256(DRIVER_SOURCE.read_bytes()).hexdigest()[:16]
    out = ROOT / ".kafka-jars" / f"driver-{digest}"
    if not (out / "KafkaDriver.class").exists():
        tmp = out.with_name(out.name + ".tmp")
        subprocess.run(
            ["javac", "-nowarn", "-cp", _classpath(), "-d", str(tmp), str(DRIVER_SOURCE)],
            check=True,
            capture_output=True,
            timeout=300,
        )
        tmp.rename(out)
    return out


def driver(*args: str, config: dict[str, str] | None = None, timeout_s: float = 120) -> list[dict]:
    """Run KafkaDriver `args` (produce / consume / admin / txn); its JSON lines. A non-zero exit fails with
    the driver's error line and stderr."""
    extra = [f"--config={k}={v}" for k, v in (config or {}).items()]
    result = subprocess.run(
        ["java", _QUIET, "-cp", _classpath(driver_classes()), "KafkaDriver", *args, *extra],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )
    lines = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    if result.returncode != 0:
        raise AssertionError(
            f"KafkaDriver {' '.join(args)} exited {result.returncode}: {lines[-1:]}\n{result.stderr[-3000:]}"
        )
    return lines


def tool(main_class: str, *args: str, stdin: str | None = None, timeout_s: float = 120) -> str:
    """Run one of Kafka's console tools; its stdout. A non-zero exit fails with its stderr."""
    result = subprocess.run(
        ["java", _QUIET, "-cp", _classpath(), main_class, *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )
    if result.returncode != 0:
        raise AssertionError(
            f"{main_class.rsplit('.', 1)[-1]} {' '.join(args)} exited {result.returncode}:\n"
            f"{result.stderr[-3000:]}"
        )
    return result.stdout
