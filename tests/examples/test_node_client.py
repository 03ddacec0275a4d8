"""The Node.js example client (examples/node/) against a real one-broker cluster.

The example is written from the .proto files and the vector files alone; this test holds the contract to
being enough for that: the example's own checks against the vector files pass (selftest.js), and against a
cluster its batches are accepted (the broker checks their CRCs), its partition choices equal kanal's
partitioner, a retried idempotent request is answered NONE with the original offsets, and the records it
reads back (and kanal's own decoder reads back) are the records it produced.

Node and npm must be there: tests/run installs Debian's nodejs and npm when node is missing and runs
`npm ci` in examples/node. A machine without them fails this test, loudly, rather than skipping it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import grpc
import pytest

from kanal.clients.admin import Admin
from kanal.deploy.certificates import make_dev_tls
from kanal.deploy.local_cluster import LocalCluster
from kanal.security.channel_security import ClientSecurity, open_channel
from kanal.security.scram import check_mechanism, new_salt, salted_password
from kanal.v1 import admin_pb2, broker_pb2, broker_pb2_grpc, controller_pb2_grpc, records_pb2
from kanal.v1.batch import decode_records, iter_entries, parse_batch
from kanal.v1.error import ErrorCode, KanalError
from kanal.v1.partitioning import partition_for_key

from ..cluster.conftest import BROKER_FLAGS, CONTROLLER_FLAGS, create_topic, start_cluster, wait_until

pytestmark = pytest.mark.cluster

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "node"
TOPIC = "node-example"
PARTITIONS = 3
RECORDS = 12


def _node() -> str:
    node = shutil.which("node") or shutil.which("nodejs")
    if node is None:
        pytest.fail(
            "node is not installed: tests/run installs Debian's nodejs and npm (as root); install them "
            "to run the example client's test"
        )
    return node


@pytest.fixture(scope="module")
def node() -> str:
    """The node binary, with the example's dependencies installed (npm ci, from package-lock.json)."""
    node = _node()
    if not (EXAMPLE / "node_modules" / "@grpc" / "grpc-js").is_dir():
        npm = shutil.which("npm")
        if npm is None:
            pytest.fail("npm is not installed and examples/node/node_modules is missing: run tests/run, or "
                        "install npm and run `npm ci` in examples/node")
        done = subprocess.run(
            [npm, "ci", "--no-audit", "--no-fund"],
            cwd=EXAMPLE,
            check=False,
            capture_output=True,
            text=True,
            timeout=600,
        )
        if done.returncode != 0:
            pytest.fail(f"npm ci in examples/node failed:\n{done.stdout}\n{done.stderr}")
    return node


@pytest.fixture(scope="module")
def one_broker(tmp_path_factory):
    cluster = start_cluster(tmp_path_factory, "node-example", brokers=1)
    try:
        create_topic(cluster, TOPIC, partitions=PARTITIONS, replication_factor=1)
        yield cluster
    finally:
        cluster.stop()


def test_the_example_passes_its_checks_against_the_vector_files(node):
    done = subprocess.run(
        [node, "selftest.js"], check=False, cwd=EXAMPLE, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stdout + done.stderr
    last = done.stdout.strip().splitlines()[-1]
    assert last.startswith("selftest: ") and last.endswith(" passed, 0 failed"), done.stdout


def test_the_example_produces_and_reads_back_through_a_cluster(node, one_broker):
    done = subprocess.run(
        [
            node,
            str(EXAMPLE / "client.js"),
            "--bootstrap",
            one_broker.bootstrap,
            "--topic",
            TOPIC,
            "--records",
            str(RECORDS),
            "--group",
            "node-group",
        ],
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, f"node client failed:\n{done.stdout}\n{done.stderr}"
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    by_event: dict[str, list[dict]] = {}
    for line in lines:
        by_event.setdefault(line["event"], []).append(line)

    assert by_event["metadata"][0]["partitions"] == PARTITIONS
    produced = by_event["produced"]
    assert sorted(p["key"] for p in produced) == sorted(f"key-{i}" for i in range(RECORDS))
    # Its partitioner is kanal's.
    for p in produced:
        assert p["partition"] == partition_for_key(p["key"].encode(), PARTITIONS), p
    assert {p["codec"] for p in produced} == {"none", "gzip"}
    assert len({p["partition"] for p in produced}) > 1, "the keys should spread over the partitions"

    # The retry was answered NONE with the original offsets (the client checks it too).
    first_round = {p["partition"]: min(q["offset"] for q in produced if q["partition"] == p["partition"]
                                       and q["codec"] == "none") for p in produced if p["codec"] == "none"}
    assert {(r["partition"], r["error"], r["base_offset"]) for r in by_event["retried"]} == {
        (partition, "NONE", offset) for partition, offset in first_round.items()}

    # It read back exactly what it produced, at the offsets it was told.
    read = by_event["record"]
    assert sorted((r["partition"], r["offset"], r["key"], r["value"]) for r in read) == sorted(
        (p["partition"], p["offset"], p["key"], p["value"]) for p in produced)
    assert all(r["headers"] == [["index", r["key"].removeprefix("key-")]] for r in read)
    assert all(int(r["producer_id"]) > 0 for r in read)

    # The group round: joined as the only member, committed each partition's high-water mark, read it back;
    # every coordinator error it met was one broker.proto calls retriable, and it went on.
    [group] = by_event["group"]
    ends = {p: max(r["offset"] for r in read if r["partition"] == p) + 1 for p in range(PARTITIONS)
            if any(r["partition"] == p for r in read)}
    assert group["coordinator"] == 0 and group["generation_id"] >= 1
    assert {int(p): o for p, o in group["committed"].items() if o > 0} == ends
    assert {r["error"] for r in group["retries"]} <= {
        "COORDINATOR_NOT_AVAILABLE", "COORDINATOR_LOAD_IN_PROGRESS", "NOT_COORDINATOR"}

    inside = by_event["fetch_inside_batch"][0]
    assert inside["first_batch_base_offset"] == inside["fetch_offset"] - 1
    assert inside["first_record_offset"] == inside["fetch_offset"]

    # kanal's own decoder reads the Node-written batches: both CRCs, both codecs, the same records.
    stored = []
    codecs = set()
    with grpc.insecure_channel(one_broker.brokers[0].endpoint) as channel:
        stub = broker_pb2_grpc.BrokerStub(channel)
        for partition in range(PARTITIONS):
            request = broker_pb2.FetchRequest(replica_id=-1, max_bytes=1 << 20)
            request.topics.add(topic=TOPIC).partitions.add(
                partition=partition, fetch_offset=0, max_bytes=1 << 20, current_leader_epoch=-1
            )
            data = stub.Fetch(request, timeout=10).topics[0].partitions[0]
            for entry in iter_entries(data.records, verify_crc=True):
                batch = parse_batch(entry.batch)
                codecs.add(batch.codec)
                stored += [(partition, batch.base_offset + r.offset_delta, r.key.decode(), r.value.decode())
                           for r in decode_records(batch)]
    assert codecs == {records_pb2.COMPRESSION_NONE, records_pb2.COMPRESSION_GZIP}
    assert sorted(stored) == sorted((p["partition"], p["offset"], p["key"], p["value"]) for p in produced)


# ---- TLS and a password (issue 42, item 5) ----

PASSWORD = "wonderland"


@pytest.fixture(scope="module")
def password_broker(tmp_path_factory):
    """One controller (TLS, client certificates required, as nodes authenticate) and one broker whose
    listener takes TLS without a client certificate and authenticates by password, with user alice."""
    directory = tmp_path_factory.mktemp("node-tls")
    tls = make_dev_tls(directory / "tls", broker_ids=[0], controller_ids=[0])
    password_listener = ["--tls-client-auth", "none", "--authentication", "password"]
    cluster = LocalCluster(directory, controllers=1, brokers=1, tls=tls, controller_flags=CONTROLLER_FLAGS,
                           broker_flags=[*BROKER_FLAGS, *password_listener])
    try:
        cluster.start(timeout_s=90)
        salt = new_salt()
        upsert = admin_pb2.ScramCredentialUpsertion(
            name="alice", mechanism="SCRAM-SHA-256", iterations=4096, salt=salt,
            salted_password=salted_password(check_mechanism("SCRAM-SHA-256"), PASSWORD, salt, 4096))
        with open_channel(cluster.controllers[0].endpoint, (), cluster.client_security) as channel:
            reply = controller_pb2_grpc.ControllerStub(channel).AlterUserScramCredentials(
                admin_pb2.AlterUserScramCredentialsRequest(upsertions=[upsert]), timeout=30)  # as User:admin
        assert [r.error for r in reply.results] == [ErrorCode.NONE]
        alice = ClientSecurity(ca_file=str(tls.ca.cert), user="alice", password=PASSWORD)
        with Admin(cluster.bootstrap, security=alice) as admin:
            wait_until(lambda: admin.create_topic(TOPIC, partitions=PARTITIONS, replication_factor=1) or True,
                       60, "alice's password to be known at the broker", tolerate=(KanalError,))
        yield cluster, tls
    finally:
        cluster.stop()


def run_client(node, cluster, tls, *extra: str, password: str | None = PASSWORD, group: str = "alice-group"):
    env = dict(os.environ)
    env.pop("KANAL_PASSWORD", None)
    if password is not None:
        env["KANAL_PASSWORD"] = password
    return subprocess.run(
        [node, str(EXAMPLE / "client.js"), "--bootstrap", cluster.bootstrap, "--topic", TOPIC,
         "--records", "6", "--group", group, "--tls-ca-file", str(tls.ca.cert), *extra],
        check=False, capture_output=True, text=True, timeout=120, env=env)


def test_the_example_authenticates_by_password_over_tls_without_a_client_certificate(node, password_broker):
    cluster, tls = password_broker
    done = run_client(node, cluster, tls, "--user", "alice")
    assert done.returncode == 0, f"node client failed:\n{done.stdout}\n{done.stderr}"
    events = [json.loads(line) for line in done.stdout.splitlines()]
    assert len([e for e in events if e["event"] == "produced"]) == 6
    [group] = [e for e in events if e["event"] == "group"]
    assert group["group"] == "alice-group"


@pytest.mark.parametrize("extra, password, why", [
    (("--user", "alice"), "not-the-password", "wrong user name or password"),
    (("--user", "User:alice"), PASSWORD, "wrong user name or password"),  # the bare name, not the principal
    ((), None, "brought no credentials"),
], ids=["wrong-password", "principal-as-user-name", "no-credentials"])
def test_the_example_is_refused_without_the_right_credentials(node, password_broker, extra, password, why):
    cluster, tls = password_broker
    done = run_client(node, cluster, tls, *extra, password=password)
    assert done.returncode == 1
    assert "AUTHENTICATION_FAILED" in done.stderr and why in done.stderr, done.stderr
