"""Issue 17, item 1: batches whose records contradict their header, against one real broker over raw gRPC
stubs (no kanal client builds these requests). Each is refused with its documented error, nothing of it is
stored, and the good batch before it in the same request stays stored and readable. Each batch here has a
valid CRC: only a walk of its records can tell it is wrong.

And the other side: a consumer that meets a batch it cannot decode (one stored before leaders validated
records, put on disk here by hand) says so: `kanal consume` prints the records before it, then one line on
stderr, and exits non-zero."""

from __future__ import annotations

import subprocess
import sys
import time

import grpc
import pytest

from kanal.broker.storage.log import Log
from kanal.broker.storage.log_config import LogConfig
from kanal.clients.consumer import decode_fetched, decode_record_list_python
from kanal.v1 import broker_pb2, broker_pb2_grpc, records_pb2
from kanal.v1.batch import (
    NewRecord,
    build_batch,
    encode_record_list,
    frame_batch_parts,
    frame_entry,
    with_broker_suffix,
)
from kanal.v1.error import ErrorCode

from .conftest import create_topic, start_cluster, wait_until

pytestmark = pytest.mark.cluster
NOW_MS = int(time.time() * 1000)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = start_cluster(tmp_path_factory, "validation", brokers=1)
    yield c
    c.stop()


def framed(records: bytes, *, record_count: int, last_offset_delta: int, first_timestamp_ms: int = NOW_MS,
           max_timestamp_ms: int = NOW_MS, codec: int = records_pb2.COMPRESSION_NONE) -> bytes:
    """Producer bytes around `records` as given (not compressed here), with a CRC that matches them."""
    return b"".join(
        frame_batch_parts(
            records,
            record_count=record_count,
            last_offset_delta=last_offset_delta,
            first_timestamp_ms=first_timestamp_ms,
            max_timestamp_ms=max_timestamp_ms,
            codec=codec,
            producer_id=0,
            producer_epoch=0,
            base_sequence=0,
        )
    )


def record_list(*records: records_pb2.Record) -> bytes:
    return records_pb2.RecordList(records=list(records)).SerializeToString()


def values(n: int, tag: str) -> list[NewRecord]:
    return [NewRecord(f"{tag}-{i}".encode(), timestamp_ms=NOW_MS) for i in range(n)]


# The cases of the issue, each a batch with a valid CRC that the broker stored before, and the error it gets.
CASES = {
    "record_count_1_with_5_records": (
        framed(encode_record_list(values(5, "x"), NOW_MS), record_count=1, last_offset_delta=0),
        ErrorCode.INVALID_RECORD,
    ),
    "record_count_5_with_1_record": (
        framed(encode_record_list(values(1, "x"), NOW_MS), record_count=5, last_offset_delta=4),
        ErrorCode.INVALID_RECORD,
    ),
    "offset_delta_1000_in_a_one_record_batch": (
        framed(
            record_list(records_pb2.Record(offset_delta=1000, value=b"x")),
            record_count=1,
            last_offset_delta=0,
        ),
        ErrorCode.INVALID_RECORD,
    ),
    "records_that_do_not_parse": (
        framed(b"\x0a\x7fgarbage that is no RecordList" * 3, record_count=3, last_offset_delta=2),
        ErrorCode.INVALID_RECORD,
    ),
    "gzip_codec_over_bytes_that_are_not_gzip": (
        framed(
            encode_record_list(values(2, "x"), NOW_MS),
            record_count=2,
            last_offset_delta=1,
            codec=records_pb2.COMPRESSION_GZIP,
        ),
        ErrorCode.INVALID_RECORD,
    ),
    "last_offset_delta_2_pow_24_minus_1_in_a_one_record_batch": (
        framed(encode_record_list(values(1, "x"), NOW_MS), record_count=1, last_offset_delta=(1 << 24) - 1),
        ErrorCode.INVALID_RECORD,
    ),
    "negative_batch_timestamps": (
        framed(
            encode_record_list([NewRecord(b"x", timestamp_ms=-5)], -5),
            record_count=1,
            last_offset_delta=0,
            first_timestamp_ms=-5,
            max_timestamp_ms=-5,
        ),
        ErrorCode.INVALID_TIMESTAMP,
    ),
    "negative_record_timestamp_under_a_valid_header": (
        framed(
            record_list(
                records_pb2.Record(value=b"a"),
                records_pb2.Record(offset_delta=1, timestamp_delta_ms=-20, value=b"b"),
            ),
            record_count=2,
            last_offset_delta=1,
            first_timestamp_ms=10,
            max_timestamp_ms=10,
        ),
        ErrorCode.INVALID_TIMESTAMP,
    ),
}


def stub(cluster) -> broker_pb2_grpc.BrokerStub:
    return broker_pb2_grpc.BrokerStub(grpc.insecure_channel(cluster.brokers[0].endpoint))


def produce(cluster, topic: str, batches: list[bytes]):
    request = broker_pb2.ProduceRequest(acks=1, timeout_ms=5000)
    request.topics.add(topic=topic).partitions.add(partition=0, batches=batches)
    return stub(cluster).Produce(request, timeout=10).topics[0].partitions[0]


def fetch(cluster, topic: str, offset: int):
    request = broker_pb2.FetchRequest(replica_id=-1, max_wait_ms=0, max_bytes=1 << 20)
    request.topics.add(topic=topic).partitions.add(partition=0, fetch_offset=offset, max_bytes=1 << 20,
                                                   current_leader_epoch=-1)
    return stub(cluster).Fetch(request, timeout=10).topics[0].partitions[0]


def read_all(cluster, topic: str) -> list[tuple[int, bytes]]:
    data = fetch(cluster, topic, 0)
    assert data.error == ErrorCode.NONE, data.error_message
    records, _, _ = decode_fetched((topic, 0), data.records, 0, decode_record_list_python)
    return [(r.offset, r.value) for r in records]


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_batch_whose_records_contradict_its_header_is_refused_and_nothing_of_it_is_stored(cluster, case):
    bad, code = CASES[case]
    topic = f"v-{case.replace('_', '-')}"[:60]
    new_topic(cluster, topic)
    before = build_batch(values(3, "before"))
    after = build_batch(values(2, "after"))
    result = produce(cluster, topic, [before, bad, after])
    assert result.error == code, (ErrorCode.Name(result.error), result.error_message)
    assert list(result.batch_base_offsets) == [0], (
        "the batch before the bad one is stored, the bad one and later not"
    )
    assert fetch(cluster, topic, 0).log_end_offset == 3
    assert read_all(cluster, topic) == [(i, f"before-{i}".encode()) for i in range(3)]
    # Alone in a request, the whole partition fails and the log does not move.
    alone = produce(cluster, topic, [bad])
    assert alone.error == code and not alone.batch_base_offsets
    assert fetch(cluster, topic, 0).log_end_offset == 3
    # The partition goes on: the next good batch takes the next offsets.
    assert list(produce(cluster, topic, [after]).batch_base_offsets) == [3]
    assert read_all(cluster, topic)[3:] == [(3, b"after-0"), (4, b"after-1")]


def test_kanal_consume_stops_with_an_error_at_a_batch_it_cannot_decode(cluster):
    """A damaged batch with valid CRCs (as the broker stored before validating records) put into the
    partition's log on disk while the broker is stopped; `kanal consume` prints the three records before
    it, then one line on stderr naming the partition and offset, and exits 1 instead of 0 or hanging."""
    topic = "v-undecodable"
    new_topic(cluster, topic)
    assert produce(cluster, topic, [build_batch(values(3, "good"))]).error == ErrorCode.NONE
    node = cluster.brokers[0]
    node.stop()
    (directory,) = [d for d in cluster.data_dir.rglob(f"{topic}-0") if d.is_dir()]
    log = Log.open(directory, LogConfig())
    try:
        epoch = log.epoch_cache.latest_epoch  # the leader's: an older one would be refused as fenced
        assert epoch is not None
        garbage = framed(b"\x0a\x7fnot a record list", record_count=2, last_offset_delta=1)
        log.append_replicated(
            frame_entry(with_broker_suffix(garbage, log.log_end_offset, epoch)), now_ms=NOW_MS
        )
        assert log.log_end_offset == 5
    finally:
        log.close()
    cluster.start_node(node)
    wait_until(lambda: _serves(cluster, topic), 60, f"{topic} to be led again")
    result = subprocess.run([sys.executable, "-m", "kanal.deploy.cli", "consume", topic, "--bootstrap",
                             cluster.bootstrap, "--from-beginning", "--timeout-s", "20"],
                            capture_output=True, text=True, timeout=120, check=False)
    assert result.stdout.splitlines() == ["good-0", "good-1", "good-2"], result.stdout
    assert result.returncode == 1, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("kanal: CORRUPT_MESSAGE:"), result.stderr
    assert f"{topic}-0: the batch at offset 3 cannot be decoded" in lines[0], lines[0]


def new_topic(cluster, topic: str) -> None:
    """Create a one-partition topic and wait until the broker serves it: the metadata can name the
    leader before the broker has opened the replica (NOT_LEADER_OR_FOLLOWER until then)."""
    create_topic(cluster, topic, partitions=1, replication_factor=1)
    wait_until(lambda: _serves(cluster, topic), 30, f"the broker to serve {topic}")


def _serves(cluster, topic: str) -> bool:
    try:
        return fetch(cluster, topic, 0).error == ErrorCode.NONE
    except grpc.RpcError:
        return False
