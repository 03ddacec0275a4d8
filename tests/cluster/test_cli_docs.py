"""docs/cli.md's examples run as written against `kanal dev`, and the operator flags of issue 27 do what
the table says: Kafka's filters and spellings, ISO 8601 times, kcat formats, JSON from every command,
and errors (an offset past the log end, a broker that does not exist) that are one line and exit 1."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from .conftest import kanal_dev

pytestmark = pytest.mark.cluster
DOC = Path(__file__).resolve().parents[2] / "docs" / "cli.md"
BIN = str(Path(sys.executable).parent)  # where pip put the `kanal` script of this interpreter


@pytest.fixture(scope="module")
def dev(tmp_path_factory):
    """`kanal dev` with its defaults under a fresh HOME, so ~/.kanal in the docs is this cluster's."""
    home = tmp_path_factory.mktemp("home")
    env = dict(os.environ, HOME=str(home), PYTHONUNBUFFERED="1", PATH=f"{BIN}:{os.environ.get('PATH', '')}")
    for name in ("KANAL_HOME", "KANAL_BOOTSTRAP", "KANAL_DEBUG"):
        env.pop(name, None)
    with kanal_dev(env, home / "dev.out"):
        yield env, home


def shell(env, line: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", line], check=False, capture_output=True, text=True, env=env, cwd=cwd,
                          timeout=180)


def kanal(env, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "kanal", *args],
        check=False,
        input=stdin,
        capture_output=True,
        text=True,
        env=env,
        timeout=180,
    )


def documented_examples() -> list[str]:
    """Every line of docs/cli.md's ```sh blocks, in order."""
    return [line for block in re.findall(r"```sh\n(.*?)```", DOC.read_text(), re.DOTALL)
            for line in block.splitlines() if line.strip()]


def test_the_table_names_every_kafka_tool_of_the_issue():
    text = DOC.read_text()
    for tool in (
        "kafka-topics",
        "kafka-console-producer",
        "kafka-console-consumer",
        "kafka-consumer-groups",
        "kafka-configs",
        "kafka-acls",
        "kafka-dump-log",
        "kafka-metadata-shell",
        "kafka-producer-perf-test",
        "kafka-consumer-perf-test",
        "kcat",
    ):
        assert f"`{tool} " in text, tool
    for flag in (
        "--under-replicated-partitions",
        "--unavailable-partitions",
        "--at-min-isr-partitions",
        "--if-not-exists",
        "--if-exists",
        "--members",
        "--state",
        "--all-groups",
        "--to-datetime",
        "--by-duration",
        "--from-timestamp",
        "--format",
        "--throughput",
        "KANAL_BOOTSTRAP",
        "KANAL_HOME",
    ):
        assert flag in text, flag
    assert len(documented_examples()) >= 30


def test_every_documented_example_runs(dev, tmp_path):
    env, _ = dev
    for line in documented_examples():
        result = shell(env, line, tmp_path)
        assert result.returncode == 0, f"{line}\n{result.stdout}\n{result.stderr}"
        assert "Traceback" not in result.stderr, line
        if "--output json" in line and "consume" not in line:
            json.loads(result.stdout)
        if line.startswith("kanal perf produce"):
            summary = json.loads(result.stdout.strip().splitlines()[-1])
            assert summary["records"] == 20_000 and summary["latency_samples"] == 20_000
            assert summary["latency_ms_p50"] <= summary["latency_ms_p99"] <= summary["latency_ms_max"]
        if line.startswith("kanal perf consume"):
            assert json.loads(result.stdout.strip().splitlines()[-1])["records"] == 20_000
        if "--format" in line:
            first, second = result.stdout.splitlines()
            assert re.fullmatch(r"orders 0 1 \d+ k2=second \[\]", first), first
            assert re.fullmatch(r"orders 0 2 \d+ null=third \[source=docs\]", second), second


def test_if_not_exists_if_exists_and_json_from_commands_that_change_things(dev):
    env, _ = dev
    created = kanal(env, "topics", "create", "ops-a", "--output", "json")
    assert created.returncode == 0 and json.loads(created.stdout)["created"] is True
    again = kanal(env, "topics", "create", "ops-a", "--if-not-exists", "--output", "json")
    assert again.returncode == 0 and json.loads(again.stdout) == {"topic": "ops-a", "created": False}
    clash = kanal(env, "topics", "create", "ops-a", "--output", "json")
    assert clash.returncode == 1 and json.loads(clash.stderr)["error"]["name"] == "TOPIC_ALREADY_EXISTS"
    produced = kanal(env, "produce", "ops-a", "--output", "json", stdin="a\nb\n")
    assert produced.returncode == 0 and json.loads(produced.stdout) == {"topic": "ops-a", "records": 2}
    assert json.loads(kanal(env, "topics", "delete", "ops-a", "--output", "json").stdout)["deleted"] is True
    gone = kanal(env, "topics", "delete", "ops-a", "--if-exists", "--output", "json")
    assert gone.returncode == 0 and json.loads(gone.stdout)["deleted"] is False
    missing = kanal(env, "topics", "delete", "ops-a")
    assert missing.returncode == 1 and missing.stderr.startswith("kanal: UNKNOWN_TOPIC_OR_PARTITION: ")


def test_partition_filters(dev):
    env, _ = dev
    kanal(env, "topics", "create", "ops-isr", "--partitions", "2", "--replication-factor", "3",
          "--config", "min.insync.replicas=3")
    described = json.loads(kanal(env, "topics", "describe", "ops-isr", "--output", "json").stdout)[0]
    assert all(len(p["isr"]) == 3 for p in described["partitions"])
    at_min = json.loads(kanal(env, "topics", "describe", "ops-isr", "--at-min-isr-partitions", "--output",
                              "json").stdout)
    assert [p["partition"] for p in at_min[0]["partitions"]] == [0, 1]  # ISR 3 = min.insync.replicas 3
    for flag in ("--under-replicated-partitions", "--unavailable-partitions"):
        assert json.loads(kanal(env, "topics", "describe", "ops-isr", flag, "--output", "json").stdout) == []


def test_a_combined_cleanup_policy_is_admitted_and_described_as_set(dev):
    env, _ = dev
    created = kanal(env, "topics", "create", "ops-policy", "--config", "cleanup.policy=delete, compact")
    assert created.returncode == 0, created.stderr
    described = json.loads(kanal(env, "topics", "describe", "ops-policy", "--output", "json").stdout)[0]
    assert described["configs"]["cleanup.policy"] == "delete, compact"
    entries = json.loads(kanal(env, "configs", "--topic", "ops-policy", "--output", "json").stdout)
    assert entries["cleanup.policy"] == {"value": "delete, compact", "default": False}
    bad = kanal(env, "topics", "create", "ops-bad-policy", "--config", "cleanup.policy=compact,foo")
    assert bad.returncode == 1
    assert bad.stderr.startswith("kanal: INVALID_CONFIG: ") and "'foo' is not delete or compact" in bad.stderr


def test_offsets_past_the_log_and_unknown_brokers_are_errors(dev):
    env, _ = dev
    kanal(env, "topics", "create", "ops-off", "--replication-factor", "3")
    kanal(env, "produce", "ops-off", stdin="1\n2\n3\n")
    past = kanal(env, "consume", "ops-off", "--offset", "999")
    assert past.returncode == 1 and past.stdout == ""
    assert past.stderr.startswith(
        "kanal: OFFSET_OUT_OF_RANGE: offset 999 is outside ops-off-0's log: it holds offsets 0 to 2"
    )
    at_end = kanal(env, "consume", "ops-off", "--offset", "2", "--max-messages", "1")
    assert at_end.returncode == 0 and at_end.stdout == "3\n"
    broker = kanal(env, "configs", "--broker", "99", "--output", "json")
    assert broker.returncode == 1 and json.loads(broker.stderr)["error"]["name"] == "UNKNOWN_BROKER"
    assert kanal(env, "configs", "--broker", "99", "--set", "log.retention.ms=1").returncode == 1


def test_groups_views_and_time_based_resets(dev):
    env, _ = dev
    kanal(env, "topics", "create", "ops-g", "--replication-factor", "3")
    before_ms = int(time.time() * 1000)
    kanal(env, "produce", "ops-g", stdin="x\ny\nz\n")
    read = kanal(env, "consume", "ops-g", "--group", "ops-g1", "--from-beginning", "--max-messages", "3")
    assert read.stdout.splitlines() == ["x", "y", "z"]
    state = json.loads(kanal(env, "groups", "describe", "ops-g1", "--state", "--output", "json").stdout)
    assert state["group"] == "ops-g1" and state["members"] == 0 and "offsets" not in state
    members = json.loads(kanal(env, "groups", "describe", "ops-g1", "--members", "--output", "json").stdout)
    assert members["members"] == [] and "offsets" not in members
    every = json.loads(kanal(env, "groups", "describe", "--all-groups", "--output", "json").stdout)
    assert "ops-g1" in [g["group"] for g in every]
    iso = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(before_ms / 1000 - 1)) + "Z"
    plan = json.loads(
        kanal(
            env,
            "groups",
            "reset-offsets",
            "ops-g1",
            "--topic",
            "ops-g",
            "--to-datetime",
            iso,
            "--output",
            "json",
        ).stdout
    )
    assert plan["offsets"] == [{"topic": "ops-g", "partition": 0, "offset": 0}] and plan["executed"] is False
    by_ms = json.loads(kanal(env, "groups", "reset-offsets", "ops-g1", "--topic", "ops-g", "--to-datetime",
                             str(before_ms - 1000), "--output", "json").stdout)
    assert by_ms["offsets"] == plan["offsets"]
    duration = json.loads(kanal(env, "groups", "reset-offsets", "ops-g1", "--topic", "ops-g", "--by-duration",
                                "PT1H", "--output", "json").stdout)
    assert duration["offsets"][0]["offset"] == 0
    future = json.loads(kanal(env, "groups", "reset-offsets", "ops-g1", "--topic", "ops-g", "--to-datetime",
                              "2099-01-01T00:00:00Z", "--output", "json").stdout)
    assert future["offsets"][0]["offset"] == 3  # no record that late: the log end, as Kafka
    late = kanal(env, "consume", "ops-g", "--partition", "0", "--from-timestamp", iso, "--max-messages", "2")
    assert late.stdout.splitlines() == ["x", "y"]
    bad = kanal(env, "consume", "ops-g", "--from-timestamp", "last tuesday")
    assert bad.returncode == 1 and bad.stderr.startswith("kanal: INVALID_TIMESTAMP: ")


def test_perf_produce_caps_its_rate_and_perf_consume_stops_at_the_count(dev):
    env, _ = dev
    kanal(env, "topics", "create", "ops-perf", "--partitions", "2", "--replication-factor", "3")
    produced = kanal(env, "perf", "produce", "ops-perf", "--num-records", "3000", "--throughput", "2000",
                     "--quiet")
    summary = json.loads(produced.stdout)
    assert summary["records"] == 3000 and summary["latency_samples"] == 3000
    assert summary["records_s"] <= 2000 * 1.05  # the cap holds (sends are paced; the run is at least 1.5 s)
    for key in ("latency_ms_p50", "latency_ms_p95", "latency_ms_p99", "latency_ms_p99_9", "latency_ms_max"):
        assert summary[key] > 0, key
    consumed = json.loads(
        kanal(env, "perf", "consume", "ops-perf", "--num-records", "1234", "--quiet").stdout
    )
    assert consumed["records"] == 1234
