"""The `kanal` command line driven as a user would: `kanal dev` in one process, client commands in others."""

from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from kanal.clients.producer import Producer
from kanal.clients.producer_config import ProducerConfig

from .conftest import kanal_dev, wait_until

pytestmark = pytest.mark.cluster
KANAL = [sys.executable, "-m", "kanal.deploy.cli"]


@pytest.fixture(scope="module")
def dev(tmp_path_factory):
    home = tmp_path_factory.mktemp("kanal-home")
    env = dict(os.environ, KANAL_HOME=str(home), PYTHONUNBUFFERED="1")
    env.pop("KANAL_BOOTSTRAP", None)
    with kanal_dev(env, home / "dev.out", "--data-dir", str(home / "data"), "--output", "json") as proc:
        yield env, home, proc


def kanal(env, *args: str, stdin: str | None = None, check: bool = True) -> subprocess.CompletedProcess:
    result = subprocess.run(
        [*KANAL, *args], check=False, input=stdin, capture_output=True, text=True, env=env, timeout=120
    )
    if check:
        assert result.returncode == 0, f"kanal {' '.join(args)} failed: {result.stderr}"
    return result


def test_dev_output_json_describes_the_running_cluster(dev):
    """`kanal dev --output json`: once ready, the cluster as one JSON object on stdout (what dev.json holds);
    the progress lines went to stderr."""
    _, home, proc = dev
    lines = (home / "dev.out").read_text().splitlines()
    described = [json.loads(line) for line in lines if line.startswith("{")]
    assert len(described) == 1, described
    state = json.loads((home / "dev.json").read_text())
    assert described[0]["bootstrap"] == state["bootstrap"] and described[0]["pid"] == proc.pid
    names = sorted(n["name"] for n in described[0]["nodes"])
    assert names == sorted([*(f"controller-{i}" for i in range(3)), *(f"broker-{i}" for i in range(3))])
    assert all(n["pid"] and n["endpoint"] for n in described[0]["nodes"])


def test_topics_produce_consume_describe(dev):
    env, _, _ = dev
    kanal(env, "topics", "create", "cli-orders", "--partitions", "3", "--replication-factor", "3",
          "--config", "retention.ms=3600000")
    assert "cli-orders" in json.loads(kanal(env, "topics", "list", "--output", "json").stdout)
    described = json.loads(kanal(env, "topics", "describe", "cli-orders", "--output", "json").stdout)[0]
    assert len(described["partitions"]) == 3 and described["configs"]["retention.ms"] == "3600000"
    assert all(len(p["isr"]) == 3 for p in described["partitions"])
    lines = "".join(f"customer-{i % 4}:order {i}\n" for i in range(30))
    kanal(env, "produce", "cli-orders", "--key-separator", ":", "--acks", "all", stdin=lines)
    out = kanal(
        env, "consume", "cli-orders", "--from-beginning", "--max-messages", "30", "--output", "json"
    ).stdout
    records = [json.loads(line) for line in out.splitlines()]
    assert sorted(r["value"] for r in records) == sorted(f"order {i}" for i in range(30))
    assert {r["key"] for r in records} == {f"customer-{i}" for i in range(4)}
    by_key: dict[str, set[int]] = {}
    for r in records:  # one key, one partition (the murmur3 rule)
        by_key.setdefault(r["key"], set()).add(r["partition"])
    assert all(len(parts) == 1 for parts in by_key.values())
    assert set(records[0]) >= {"topic", "partition", "offset", "timestamp", "key", "value", "headers"}


def test_consume_json_is_lossless_for_bytes_that_are_not_text(dev):
    """JSON has no bytes: a key, value or header value that is not UTF-8 comes out as base64 with an
    `_encoding` field, text with backslashes stays text, and headers are a list, repeats and order kept."""
    env, home, _ = dev
    kanal(env, "topics", "create", "cli-binary", "--partitions", "1", "--replication-factor", "1")
    bootstrap = json.loads((home / "dev.json").read_text())["bootstrap"]
    with Producer(ProducerConfig(bootstrap=bootstrap, acks="all")) as producer:
        producer.produce("cli-binary", rb"\x80 is text", key=b"k\xff", partition=0,
                         headers=[("h", b"\xfe\x00"), ("h", b"plain"), ("n", None)]).result(30)
        producer.produce("cli-binary", b"\x80\x00\xff", key=None, partition=0).result(30)
    out = kanal(
        env, "consume", "cli-binary", "--from-beginning", "--max-messages", "2", "--output", "json"
    ).stdout
    text, binary = [json.loads(line) for line in out.splitlines()]
    assert text["value"] == "\\x80 is text" and "value_encoding" not in text
    assert base64.b64decode(text["key"]) == b"k\xff" and text["key_encoding"] == "base64"
    assert text["headers"] == [
        {"key": "h", "value": base64.b64encode(b"\xfe\x00").decode(), "value_encoding": "base64"},
        {"key": "h", "value": "plain"}, {"key": "n", "value": None}]
    assert base64.b64decode(binary["value"]) == b"\x80\x00\xff" and binary["value_encoding"] == "base64"
    assert binary["key"] is None and binary["headers"] == []


def test_cluster_and_configs(dev):
    env, _, _ = dev
    cluster = json.loads(kanal(env, "cluster", "describe", "--output", "json").stdout)
    assert len(cluster["brokers"]) == 3 and not any(b["fenced"] for b in cluster["brokers"])
    assert len(cluster["quorum"]["voters"]) == 3 and cluster["quorum"]["leader"] >= 0
    kanal(env, "topics", "create", "cli-configs")
    kanal(env, "configs", "--topic", "cli-configs", "--set", "retention.ms=1000")
    configs = json.loads(kanal(env, "configs", "--topic", "cli-configs", "--output", "json").stdout)
    assert configs["retention.ms"] == {"value": "1000", "default": False}


def test_groups_consume_describe_reset_delete(dev):
    env, _, _ = dev
    kanal(env, "topics", "create", "cli-events", "--partitions", "2", "--replication-factor", "3")
    kanal(
        env, "produce", "cli-events", "--key-separator", ":", stdin="".join(f"k{i}:e{i}\n" for i in range(20))
    )
    # A group reads part of the topic; the next member of the same group goes on from the committed offsets.
    first = kanal(env, "consume", "cli-events", "--group", "cli-g", "--from-beginning", "--max-messages", "8",
                  "--output", "json").stdout.splitlines()
    rest = kanal(env, "consume", "cli-events", "--group", "cli-g", "--from-beginning", "--max-messages", "12",
                 "--output", "json").stdout.splitlines()
    seen = [(r["partition"], r["offset"]) for r in map(json.loads, first + rest)]
    assert len(seen) == len(set(seen)) == 20, "the group re-read or skipped records"
    assert json.loads(kanal(env, "groups", "list", "--output", "json").stdout) == [{"group": "cli-g",
                                                                                    "state": "Empty"}]
    described = json.loads(kanal(env, "groups", "describe", "cli-g", "--output", "json").stdout)
    assert described["state"] == "Empty" and described["members"] == []
    assert sum(o["log_end_offset"] for o in described["offsets"]) == 20
    assert all(o["lag"] == 0 and o["committed_offset"] == o["log_end_offset"] for o in described["offsets"])
    # Reset: a dry run changes nothing; --execute moves the offsets; the lag shows it.
    dry = json.loads(kanal(env, "groups", "reset-offsets", "cli-g", "--topic", "cli-events", "--to-earliest",
                           "--output", "json").stdout)
    assert not dry["executed"] and all(o["offset"] == 0 for o in dry["offsets"])
    assert all(o["lag"] == 0 for o in json.loads(kanal(env, "groups", "describe", "cli-g", "--output",
                                                       "json").stdout)["offsets"])
    kanal(env, "groups", "reset-offsets", "cli-g", "--topic", "cli-events", "--shift-by", "-3", "--execute")
    lag = [
        o["lag"]
        for o in json.loads(kanal(env, "groups", "describe", "cli-g", "--output", "json").stdout)["offsets"]
    ]
    assert lag == [3, 3]
    kanal(env, "groups", "delete", "cli-g")
    assert json.loads(kanal(env, "groups", "list", "--output", "json").stdout) == []
    missing = kanal(env, "groups", "describe", "cli-g", check=False)
    assert missing.returncode != 0 and "GROUP_ID_NOT_FOUND" in missing.stderr


def test_perf_produce_and_consume_print_their_summaries(dev):
    env, _, _ = dev
    kanal(env, "topics", "create", "cli-perf", "--partitions", "3", "--replication-factor", "1")
    produced = json.loads(
        kanal(env, "perf", "produce", "cli-perf", "--num-records", "120000", "--record-size", "50", "--quiet")
        .stdout.strip()
        .splitlines()[-1]
    )
    assert (
        produced["records"] == 120_000 and produced["record_size"] == 50 and produced["api"] == "produce_many"
    )
    assert produced["records_s"] > 0 and produced["mb_s"] > 0
    assert 0 < produced["latency_ms_p50"] <= produced["latency_ms_p99"]  # two batches of 1,000 sampled
    per_record = json.loads(kanal(env, "perf", "produce", "cli-perf", "--num-records", "2500", "--per-record",
                                  "--quiet").stdout.strip().splitlines()[-1])
    assert per_record["records"] == 2500 and per_record["api"] == "produce"
    result = kanal(env, "perf", "consume", "cli-perf", "--num-records", "122500")
    consumed = json.loads(result.stdout.strip().splitlines()[-1])
    assert consumed["records"] == 122_500 and consumed["mb_s"] > 0
    assert 0 < consumed["latency_ms_p50"] <= consumed["latency_ms_p99"]
    assert "records/s" in result.stderr  # the progress line, without --quiet


def test_errors_are_one_line_and_nonzero(dev):
    env, _, _ = dev
    # An unreachable bootstrap fails once the request timeout has passed (--request-timeout-ms; the default
    # is 30 s): started first, so that wait runs beside the other checks.
    started = time.monotonic()
    unreachable = subprocess.Popen([*KANAL, "topics", "list", "--request-timeout-ms", "2000"],
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                   text=True, env={**env, "KANAL_BOOTSTRAP": "127.0.0.1:9"})
    for args in (("topics", "describe", "no-such-topic"),
                 ("topics", "create", "bad", "--partitions", "0"),
                 ("topics", "create", "bad-config", "--config", "no.such.key=1"),
                 ("produce", "no-such-topic")):
        result = kanal(env, *args, stdin="x\n", check=False)
        assert result.returncode != 0, args
        assert len(result.stderr.strip().splitlines()) == 1 and result.stderr.startswith("kanal: "), (
            result.stderr
        )
    # Counts and sizes that make no sense are usage errors (exit 2, argparse's last line names the value);
    # a negative record size used to end `perf produce` in a traceback.
    kanal(env, "topics", "create", "cli-args", "--partitions", "1", "--replication-factor", "1")
    for args in (("perf", "produce", "cli-args", "--record-size", "-1"),
                 ("perf", "produce", "cli-args", "--num-records", "0"),
                 ("consume", "cli-args", "--max-messages", "-1"),
                 ("consume", "cli-args", "--partition", "0", "--offset", "-5")):
        result = kanal(env, *args, check=False)
        last = result.stderr.strip().splitlines()[-1]
        assert result.returncode in (1, 2) and "Traceback" not in result.stderr, result.stderr
        assert ("invalid positive int value" in last or "INVALID_REQUEST" in last), last
    for value in ("99", "600001", "soon"):
        result = kanal(env, "topics", "list", "--request-timeout-ms", value, check=False)
        last = result.stderr.strip().splitlines()[-1]
        assert result.returncode == 2 and f"invalid 100-600000 int value: '{value}'" in last, result.stderr
    try:
        _, stderr = unreachable.communicate(timeout=120)
    finally:
        if unreachable.poll() is None:
            unreachable.kill()
            unreachable.wait(10)
    assert unreachable.returncode != 0 and "BROKER_NOT_AVAILABLE" in stderr
    assert "no broker answered within 2000 ms" in stderr, stderr
    assert time.monotonic() - started < 100  # a clear error, not a hang


def test_dev_stops_everything_it_started(tmp_path):
    env = dict(os.environ, KANAL_HOME=str(tmp_path), PYTHONUNBUFFERED="1")
    out = tmp_path / "out"
    with open(out, "w") as log:
        proc = subprocess.Popen([*KANAL, "dev", "--data-dir", str(tmp_path / "data"), "--brokers", "1"],
                                stdout=log, stderr=subprocess.STDOUT, env=env)
    try:
        wait_until(
            lambda: "ready. bootstrap:" in out.read_text() or proc.poll() is not None, 120, "kanal dev ready"
        )
        pids = [
            int(line.split(" pid ")[1].split()[0]) for line in out.read_text().splitlines() if " pid " in line
        ]
        assert len(pids) == 4 and (tmp_path / "dev.json").exists()
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(60)
    assert proc.returncode == 0
    assert not (tmp_path / "dev.json").exists()
    for pid in pids:
        assert not _alive(pid), f"process {pid} still runs"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] != "Z"
    except FileNotFoundError:
        return False


def test_acls_commands_say_a_dev_cluster_does_not_enforce_acls(dev):
    """`kanal dev` runs without the authorizer, so an ACL would mean nothing there: every ACL command is
    refused with SECURITY_DISABLED and changes nothing, as Kafka refuses ACL calls without an authorizer
    (issue 42). The commands' work on clusters that enforce ACLs: tests/cluster/test_acls.py,
    tests/cluster/test_secured_authorization.py."""
    env, _, _ = dev
    for args in (
        ("acls", "add", "--allow-principal", "User:alice", "--operation", "Read", "--topic", "cli-acl-"),
        ("acls", "list"),
        ("acls", "remove", "--topic", "cli-acl-", "--operation", "Read"),
    ):
        result = kanal(env, *args, check=False)
        assert result.returncode == 1 and "SECURITY_DISABLED" in result.stderr, (args, result.stderr)
        assert "nothing was" in result.stderr, result.stderr


def test_chaos_run_output_json_is_the_verdict(dev, tmp_path):
    """`kanal chaos run --output json` against a running cluster (no faults: the workloads and the checker)
    prints each run's verdict as one JSON object. Last in the module: it adds its workload topic."""
    env, home, _ = dev
    bootstrap = json.loads((home / "dev.json").read_text())["bootstrap"]
    result = kanal(env, "chaos", "run", "--target", bootstrap, "--faults", "", "--duration", "7s",
                   "--history-dir", str(tmp_path), "--quiet", "--output", "json")
    verdicts = [json.loads(line) for line in result.stdout.splitlines()]
    assert len(verdicts) == 1, result.stdout
    verdict = verdicts[0]
    assert verdict["ok"] is True and verdict["violations_by_kind"] == {} and verdict["faults_injected"] == []
    # Every partition written was read to its end, so `ok` says no acknowledged record is missing from it
    # (fewer final records than acknowledgements is right: the workload's compacted topic drops older keys).
    assert verdict["acknowledged"] > 0 and verdict["final_records"] > 0 and verdict["unchecked"] == []
    assert verdict["history"] == str(tmp_path / "seed-1.jsonl")
