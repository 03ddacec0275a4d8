"""`kanal dev --controllers 1 --brokers 1` as a new user runs it (issue 42):

- item 4: the internal topics are sized to the broker count, and it says so, so a transaction commits on
  one broker (before: "__transaction_state needs 3 live brokers (its replication factor)");
- item 1: with the authorizer off, every ACL command is refused with SECURITY_DISABLED and changes nothing
  (before: `kanal acls add` said "added" and nobody checked the entry), and `kanal acls list` says why.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kanal.clients.admin import Admin
from kanal.clients.consumer import Consumer, ConsumerConfig
from kanal.clients.producer import Producer, ProducerConfig
from kanal.v1 import admin_pb2, metadata_pb2
from kanal.v1.error import ErrorCode, KanalError

from .conftest import kanal_dev, wait_until

pytestmark = pytest.mark.cluster


@pytest.fixture(scope="module")
def dev(tmp_path_factory):
    home = tmp_path_factory.mktemp("home")
    env = dict(os.environ, HOME=str(home), PYTHONUNBUFFERED="1")
    for name in ("KANAL_HOME", "KANAL_BOOTSTRAP", "KANAL_DEBUG"):
        env.pop(name, None)
    out = home / "dev.out"
    with kanal_dev(env, out, "--controllers", "1", "--brokers", "1"):
        bootstrap = json.loads((home / ".kanal" / "dev.json").read_text())["bootstrap"]
        yield env, out, bootstrap


def kanal(env, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kanal", *args], check=False, capture_output=True, text=True,
                          env=env, timeout=120)


def test_one_broker_runs_a_transaction_and_says_how_it_sized_the_internal_topics(dev):
    env, out, bootstrap = dev
    assert ("__consumer_offsets and __transaction_state at replication factor 1 (the broker count, at most 3)"
            in out.read_text())
    assert kanal(env, "topics", "create", "txn-one", "--partitions", "2").returncode == 0
    config = ProducerConfig(bootstrap=bootstrap, transactional_id="one-broker", acks="all")
    with Producer(config) as producer:
        producer.init_transactions()
        producer.begin_transaction()
        futures = [producer.produce("txn-one", f"v{i}".encode(), key=f"k{i}".encode()) for i in range(20)]
        producer.commit_transaction(60)
    assert all(f.result(10).offset >= 0 for f in futures)
    seen: list[bytes] = []
    with Consumer(ConsumerConfig(bootstrap=bootstrap, isolation_level="read_committed")) as consumer:
        consumer.assign([("txn-one", 0), ("txn-one", 1)])
        consumer.seek_to_beginning()
        wait_until(lambda: seen.extend(r.value for r in consumer.poll(0.5)) or len(seen) >= 20, 60,
                   "the committed transaction's records")
    assert sorted(seen) == sorted(f"v{i}".encode() for i in range(20))
    with Admin(bootstrap) as admin:
        topic = admin.describe_topic("__transaction_state")
    assert {len(p.replicas) for p in topic.partitions} == {1}


def test_every_acl_command_is_refused_when_the_authorizer_is_off(dev):
    env, _, bootstrap = dev
    added = kanal(env, "acls", "add", "--allow-principal", "User:alice", "--operation", "Read",
                  "--topic", "plainA")
    assert added.returncode == 1 and "added" not in added.stdout
    assert added.stderr.startswith("kanal: SECURITY_DISABLED: CreateAcls: broker 0 does not enforce ACLs "
                                   "(--authorizer off)"), added.stderr
    listed = kanal(env, "acls", "list", "--output", "json")
    assert listed.returncode == 1 and listed.stdout == ""
    error = json.loads(listed.stderr)["error"]
    assert error["name"] == "SECURITY_DISABLED" and "nothing was listed" in error["message"]
    removed = kanal(env, "acls", "remove", "--topic", "plainA")
    assert removed.returncode == 1 and "SECURITY_DISABLED" in removed.stderr
    entry = metadata_pb2.AccessControlEntry(
        resource_type=metadata_pb2.ACL_RESOURCE_TOPIC, resource_name="plainA",
        pattern_type=metadata_pb2.ACL_PATTERN_LITERAL, principal="User:alice", host="*",
        operation=metadata_pb2.ACL_OPERATION_READ, permission=metadata_pb2.ACL_PERMISSION_ALLOW)
    with Admin(bootstrap) as admin:
        for call in (lambda: admin.create_acls([entry]), lambda: admin.describe_acls(),
                     lambda: admin.delete_acls([admin_pb2.AclFilter()])):
            with pytest.raises(KanalError) as err:
                call()
            assert err.value.code == ErrorCode.SECURITY_DISABLED
    # Nothing reached the metadata log: no ACL record at all.
    tree = kanal(env, "metadata", "tree", "/acls")
    assert tree.returncode == 0 and tree.stdout.strip() == "/acls/", tree.stdout


def test_kanal_dev_prints_the_kafka_bootstrap_and_kafka_clients_use_it(dev):
    """Issue 43: `kanal dev` turns the Kafka listener on for every broker, prints its bootstrap beside the
    gRPC one and records it in dev.json; a Kafka client reaches the cluster there."""
    from confluent_kafka import Producer as KafkaProducer

    env, out, bootstrap = dev
    state = json.loads((Path(env["HOME"]) / ".kanal" / "dev.json").read_text())
    kafka_bootstrap = state["kafka_bootstrap"]
    assert f"kafka bootstrap: {kafka_bootstrap}" in out.read_text()
    assert kafka_bootstrap and kafka_bootstrap != bootstrap
    assert kanal(env, "topics", "create", "from-kafka", "--partitions", "1").returncode == 0
    producer = KafkaProducer({"bootstrap.servers": kafka_bootstrap, "acks": "all"})
    delivered = []
    producer.produce("from-kafka", key=b"k", value=b"through the Kafka listener",
                     on_delivery=lambda err, msg: delivered.append((err, msg.offset())))
    assert producer.flush(30) == 0 and delivered == [(None, 0)]
    consumed = kanal(env, "consume", "from-kafka", "--from-beginning", "--max-messages", "1", "--print-key")
    assert consumed.returncode == 0 and "through the Kafka listener" in consumed.stdout
