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
import shutil
import subprocess
from pathlib import Path

import grpc
import pytest

from kanal.v1 import broker_pb2, broker_pb2_grpc, records_pb2
from kanal.v1.batch import decode_records, iter_entries, parse_batch
from kanal.v1.partitioning import partition_for_key

from ..cluster.conftest import create_topic, start_cluster

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
