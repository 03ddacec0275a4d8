"""Hostile input on the brokers' Kafka listeners (broker/kafka/listener.py, record_batch.py): raw frames on
raw sockets, no Kafka client in the way.

What a broker must do with them, as Kafka's brokers do:
- a length prefix it refuses (above --kafka-request-bytes-max, up to 2^31 - 1, or below a header's 8
  bytes, negative included) closes the connection at once, without waiting for the body;
- a frame cut short (the client then half-closes) or one that does not parse closes the connection,
  unanswered and unserved, and nothing pipelined behind it is served either;
- an API it does not serve at that version is answered UNSUPPORTED_VERSION where the response has a
  top-level error code, ApiVersions at v0 with the versions served; otherwise the connection closes;
- a Produce batch with a bad CRC, records that contradict its header, magic 1 or an unknown codec gets its
  partition's error (CORRUPT_MESSAGE, INVALID_RECORD, UNSUPPORTED_COMPRESSION_TYPE) and nothing of it is
  stored, while the other partitions of the same request are; a partition named twice in one Produce is
  never acknowledged at an offset that holds another batch;
- pipelined requests beyond --kafka-requests-in-flight-max are read later, not lost: every one is
  answered, in order; and a client that resets the connection with requests in flight leaves nothing of
  it behind in the listener.

And a seeded fuzz of Produce (v9, v3) and Fetch (v12, v4) frames: garbage in every field (header and body,
nested fields too), bytes flipped in every region, records damaged with their CRC made right again,
frames cut and extended, lengths replaced. After it, every record in the topic is either one it held before
(at the same offset) or one a Produce put there whose acknowledgment says so (or whose outcome no answer
told: acks=0, a timeout, a connection closed first), equal to what Kafka's record format reads in what was
sent; every answer is well-formed and in order; no topic appeared; the brokers are all running, logged no
bug, and serve a real Kafka client (librdkafka) afterwards."""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import datetime
import io
import random
import socket
import struct
import threading
import types
import uuid
from collections.abc import Callable

import crc32c
import pytest
from confluent_kafka import Consumer as KafkaConsumer
from confluent_kafka import Producer as KafkaProducer
from confluent_kafka import TopicPartition as KafkaTopicPartition
from kafka.codec import gzip_decode, lz4_decode, snappy_decode, zstd_decode
from kafka.record.default_records import DefaultRecordBatchBuilder
from kio.index import load_request_schema, load_response_schema
from kio.serial import entity_reader, entity_writer
from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    PrimitiveTupleField,
    classify_field,
    is_optional,
)

from kanal.broker.kafka import listener, wire
from kanal.clients.admin import Admin
from kanal.clients.consumer import Consumer, ConsumerConfig
from kanal.clients.producer import Producer, ProducerConfig
from kanal.deploy.local_cluster import free_ports
from tests.cluster.conftest import create_topic, start_cluster
from tests.harness.waiting import wait_until

pytestmark = pytest.mark.cluster

BROKERS = 2
PARTITIONS = 4
IN_FLIGHT_MAX = 4
FRAME_BYTES_MAX = 100 << 20  # --kafka-request-bytes-max left at its default
FUZZ_CASES = 560
FUZZ_SEED = 20240611

# Kafka's error codes
NONE = 0
CORRUPT_MESSAGE = 2
REQUEST_TIMED_OUT = 7
MESSAGE_TOO_LARGE = 10
NOT_ENOUGH_REPLICAS_AFTER_APPEND = 20
UNSUPPORTED_VERSION = 35
UNSUPPORTED_COMPRESSION_TYPE = 76
INVALID_RECORD = 87
# A Produce answered with one of these may still have stored its batch (Kafka's producers retry them).
OUTCOME_UNKNOWN = {REQUEST_TIMED_OUT, NOT_ENOUGH_REPLICAS_AFTER_APPEND}

PRODUCE, FETCH, LIST_OFFSETS, METADATA, API_VERSIONS = 0, 1, 2, 3, 18
# APIs the fuzz may turn a frame into and still send: those that change nothing but logs. A mutation that
# makes a valid request of another served API (DeleteTopics, CreateAcls, ...) is drawn again.
FUZZ_SAFE_APIS = {PRODUCE, FETCH, LIST_OFFSETS, METADATA, API_VERSIONS}
SENTINEL_ID = 0x5E5E5E5E

# Kafka's RecordBatch header (magic 2): base_offset, batch_length, partition_leader_epoch, magic, crc,
# attributes, last_offset_delta, base_timestamp, max_timestamp, producer_id, producer_epoch,
# base_sequence, count. The CRC (at 17) covers every byte from 21 on.
BATCH_HEADER = struct.Struct(">qiibIhiqqqhii")
BATCH_FIELDS = ("base_offset", "batch_length", "leader_epoch", "magic", "crc", "attributes",
                "last_offset_delta", "base_timestamp", "max_timestamp", "producer_id", "producer_epoch",
                "base_sequence", "count")
CRC_AT, CRC_FROM = 17, 21


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = start_cluster(tmp_path_factory, "kafka-hostile", brokers=BROKERS, kafka_listeners=True,
                      extra_broker_flags=["--kafka-requests-in-flight-max", str(IN_FLIGHT_MAX)])
    yield c
    c.stop()


@dataclasses.dataclass
class Topic:
    name: str
    leaders: dict[int, str]  # partition -> its leader's Kafka endpoint
    seed: dict[int, list[bytes]]  # partition -> the values produced through gRPC before the test


def seeded_topic(cluster, name: str, per_partition: int = 10, **configs: str) -> Topic:
    """A topic of PARTITIONS partitions on every broker, `per_partition` records in each (kanal's gRPC
    producer), and where each partition's leader listens for Kafka clients."""
    parts = create_topic(cluster, name, partitions=PARTITIONS, replication_factor=BROKERS, **configs)
    kafka_of = {node.node_id: node.extra["kafka"] for node in cluster.brokers}
    seed = {p: [b"seed-%d-%d" % (p, i) for i in range(per_partition)] for p in range(PARTITIONS)}
    with Producer(ProducerConfig(cluster.bootstrap, acks="all", linger_ms=2)) as producer:
        futures = [producer.produce(name, v, key=b"seed", partition=p) for p, vs in seed.items() for v in vs]
        producer.flush(30)
        assert all(f.result(10).offset >= 0 for f in futures)
    return Topic(name, {p.partition: kafka_of[p.leader] for p in parts}, seed)


def shared_leader(topic: Topic) -> tuple[str, list[int]]:
    """A Kafka endpoint leading at least two partitions of `topic` (one of the BROKERS must, there being more
    PARTITIONS), and those partitions."""
    by_leader: dict[str, list[int]] = {}
    for p, endpoint in sorted(topic.leaders.items()):
        by_leader.setdefault(endpoint, []).append(p)
    return max(by_leader.items(), key=lambda item: len(item[1]))


def log_bounds(cluster, topic: str) -> dict[int, tuple[int, int]]:
    with Admin(cluster.bootstrap) as admin:
        return admin.log_bounds(topic, list(range(PARTITIONS)))


def read_all(cluster, topic: str, bounds: dict[int, tuple[int, int]]) -> dict[int, list[tuple]]:
    """Every record of `topic` up to `bounds`, through kanal's gRPC consumer: per partition, in offset order,
    (offset, key, value, headers, timestamp) each."""
    expected = sum(end - start for start, end in bounds.values())
    consumer = Consumer(ConsumerConfig(cluster.bootstrap, auto_offset_reset="earliest",
                                       fetch_max_wait_ms=100))
    got: list = []
    try:
        consumer.assign([(topic, p) for p in bounds])

        def enough() -> bool:
            got.extend(consumer.poll(0.2))
            return len(got) >= expected

        wait_until(enough, 60, f"{expected} records of {topic} through gRPC")
    finally:
        consumer.close()
    out: dict[int, list[tuple]] = {p: [] for p in bounds}
    for r in got:
        out[r.partition].append((r.offset, r.key, r.value, [tuple(h) for h in r.headers], r.timestamp_ms))
    for records in out.values():
        records.sort(key=lambda r: r[0])
    return out


# ---- frames ----

def request_class(api_key: int, version: int):
    return load_request_schema(api_key, version)


def build_request(api_key: int, version: int, body: dict, correlation_id: int, client_id: str = "hostile"):
    """(header, body) kio entities of a request."""
    cls = request_class(api_key, version)
    header = cls.__header_schema__(request_api_key=api_key, request_api_version=version,
                                   correlation_id=correlation_id, client_id=client_id)
    return header, wire.build(cls, body)


def encode(header, body) -> bytes:
    """A whole request frame, length prefix included."""
    out = io.BytesIO()
    entity_writer(type(header))(out, header)
    entity_writer(type(body))(out, body)
    payload = out.getvalue()
    return struct.pack(">i", len(payload)) + payload


def raw_frame(api_key: int, version: int, correlation_id: int, body: bytes = b"",
              client_id: bytes = b"raw") -> bytes:
    """A frame with a v1 request header (no tagged fields) and `body`, whatever the API and version."""
    payload = struct.pack(">hhih", api_key, version, correlation_id, len(client_id)) + client_id + body
    return struct.pack(">i", len(payload)) + payload


def sentinel() -> bytes:
    return encode(*build_request(API_VERSIONS, 0, {}, SENTINEL_ID))


def produce_request(version: int, topic: str, batches: dict[int, bytes | None], correlation_id: int,
                    acks: int = -1, timeout_ms: int = 30_000):
    return build_request(PRODUCE, version, {
        "transactional_id": None, "acks": acks, "timeout": timeout_ms,
        "topic_data": [{"name": topic,
                        "partition_data": [{"index": p, "records": b} for p, b in batches.items()]}],
    }, correlation_id)


def fetch_request(version: int, topic: str, offsets: dict[int, int], correlation_id: int):
    return build_request(FETCH, version, {
        "replica_id": -1, "max_wait": 0, "min_bytes": 0, "max_bytes": 1 << 20, "isolation_level": 0,
        "session_id": 0, "session_epoch": -1, "rack_id": "", "forgotten_topics_data": [],
        "topics": [{"topic": topic, "partitions": [
            {"partition": p, "current_leader_epoch": -1, "fetch_offset": o, "last_fetched_epoch": -1,
             "log_start_offset": -1, "partition_max_bytes": 1 << 16} for p, o in offsets.items()]}],
    }, correlation_id)


def connect(endpoint: str, timeout_s: float) -> socket.socket:
    host, _, port = endpoint.rpartition(":")
    return socket.create_connection((host, int(port)), timeout=timeout_s)


def receive_until_closed(sock: socket.socket) -> tuple[bytes, str]:
    """What the broker sends until it closes the connection, and how it ended: "closed", "reset", or
    "timeout" (the broker neither closed nor sent anything more in the socket's timeout)."""
    chunks = []
    try:
        while chunk := sock.recv(1 << 16):
            chunks.append(chunk)
        return b"".join(chunks), "closed"
    except ConnectionResetError:
        return b"".join(chunks), "reset"
    except TimeoutError:
        return b"".join(chunks), "timeout"


def exchange(endpoint: str, data: bytes, timeout_s: float = 10.0) -> tuple[list[bytes], str]:
    """Send `data` on a new connection, half-close it and read until the broker closes: its response
    frames (each without its length prefix) and how the connection ended."""
    with connect(endpoint, timeout_s) as sock:
        try:
            sock.sendall(data)
            sock.shutdown(socket.SHUT_WR)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the broker closed first: what it sent before is still read below
        raw, ending = receive_until_closed(sock)
    frames = []
    pos = 0
    while pos + 4 <= len(raw):
        size = struct.unpack_from(">i", raw, pos)[0]
        if pos + 4 + size > len(raw):
            break
        frames.append(raw[pos + 4:pos + 4 + size])
        pos += 4 + size
    if pos != len(raw):
        assert ending != "closed", f"the broker closed after {len(raw) - pos} bytes of an unfinished frame"
    return frames, ending


def parse_response(api_key: int, version: int, payload: bytes):
    """(correlation id, body) of a response, which must be exactly one well-formed response of that API and
    version (ApiVersions answers UNSUPPORTED_VERSION at v0)."""
    cls = load_response_schema(api_key, version)
    header, header_bytes = entity_reader(cls.__header_schema__)(payload, 0)
    body, body_bytes = entity_reader(cls)(payload, header_bytes)
    extra = len(payload) - header_bytes - body_bytes
    assert extra == 0, f"{extra} bytes after a {cls.__qualname__} v{version}"
    return header.correlation_id, body


# ---- Kafka record batches ----

def kafka_batch(values: list[bytes], codec: int = 0, timestamp_ms: int = 1_700_000_000_000,
                headers: list | None = None, offsets: list[int] | None = None) -> bytes:
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=codec, is_transactional=False,
                                        producer_id=-1, producer_epoch=-1, base_sequence=-1,
                                        batch_size=1 << 24)
    for i, value in enumerate(values):
        builder.append(offsets[i] if offsets else i, timestamp=timestamp_ms + i, key=b"k%d" % i, value=value,
                       headers=headers if headers is not None else [("h", b"%d" % i)])
    return bytes(builder.build())


def with_crc(batch: bytes | bytearray) -> bytes:
    out = bytearray(batch)
    struct.pack_into(">I", out, CRC_AT, crc32c.crc32c(bytes(out[CRC_FROM:])))
    return bytes(out)


def rewrite(batch: bytes, fix_crc: bool = True, **changes: int) -> bytes:
    """`batch` with header fields changed, its CRC made right again unless `fix_crc` is False."""
    values = dict(zip(BATCH_FIELDS, BATCH_HEADER.unpack_from(batch)))
    values.update(changes)
    out = bytearray(batch)
    BATCH_HEADER.pack_into(out, 0, *(values[name] for name in BATCH_FIELDS))
    return with_crc(out) if fix_crc else bytes(out)


_DECOMPRESS = {1: gzip_decode, 2: snappy_decode, 3: lz4_decode, 4: zstd_decode}


def _zigzag(buf: bytes, pos: int, bytes_max: int) -> tuple[int, int]:
    """A zigzag varint of at most `bytes_max` bytes (5 for Kafka's varint, 10 for its varlong)."""
    result = 0
    for i in range(bytes_max):
        byte = buf[pos + i]
        result |= (byte & 0x7F) << (7 * i)
        if byte < 0x80:
            return (result >> 1) ^ -(result & 1), pos + i + 1
    raise ValueError("varint too long")


def _sized(buf: bytes, pos: int, stop: int) -> tuple[bytes | None, int]:
    length, pos = _zigzag(buf, pos, 5)
    if length < -1 or pos + length > stop:
        raise ValueError(f"a field of length {length}")
    return (None, pos) if length == -1 else (buf[pos:pos + length], pos + length)


def kafka_reads(records: bytes) -> list[tuple]:
    """The records of a Produce partition's `records` as Kafka's record format (magic 2) defines them,
    read here as strictly as Kafka's broker reads them (kafka-python's reader takes a record's attributes
    for a varint): (key, value, headers, timestamp) each. Raises on anything else."""
    out = []
    pos = 0
    while pos < len(records):
        if pos + BATCH_HEADER.size > len(records):
            raise ValueError("a batch header cut short")
        header = dict(zip(BATCH_FIELDS, BATCH_HEADER.unpack_from(records, pos)))
        end = pos + 12 + header["batch_length"]
        if header["batch_length"] < BATCH_HEADER.size - 12 or end > len(records):
            raise ValueError(f"batch length {header['batch_length']}")
        batch = records[pos:end]
        if header["magic"] != 2 or crc32c.crc32c(batch[CRC_FROM:]) != header["crc"]:
            raise ValueError("not a magic 2 batch with its CRC")
        codec = header["attributes"] & 0x07
        plain = bytes(_DECOMPRESS[codec](batch[BATCH_HEADER.size:])) if codec else batch[BATCH_HEADER.size:]
        at = 0
        for _ in range(header["count"]):
            length, at = _zigzag(plain, at, 5)
            stop = at + length
            if length < 0 or stop > len(plain):
                raise ValueError(f"a record of length {length}")
            at += 1  # attributes: an int8, unused
            timestamp_delta, at = _zigzag(plain, at, 10)
            _offset_delta, at = _zigzag(plain, at, 5)
            key, at = _sized(plain, at, stop)
            value, at = _sized(plain, at, stop)
            count, at = _zigzag(plain, at, 5)
            if count < 0:
                raise ValueError(f"{count} headers")
            headers = []
            for _ in range(count):
                name, at = _sized(plain, at, stop)
                if name is None:
                    raise ValueError("a null header key")
                header_value, at = _sized(plain, at, stop)
                headers.append((name.decode(), header_value))
            if at != stop:
                raise ValueError("a record longer than its fields")
            out.append((key, value, headers, header["base_timestamp"] + timestamp_delta))
        if at != len(plain):
            raise ValueError("bytes after the batch's records")
        pos = end
    return out


# ---- tests ----

@pytest.mark.parametrize("size", [2**31 - 1, FRAME_BYTES_MAX + 1, -1, -(2**31), 0, 7])
def test_a_refused_length_prefix_closes_the_connection_without_waiting_for_the_body(cluster, size):
    endpoint = cluster.brokers[0].extra["kafka"]
    with connect(endpoint, 20) as sock:
        sock.sendall(struct.pack(">i", size))  # and nothing more: the connection stays open for writing
        raw, ending = receive_until_closed(sock)
    assert (raw, ending) in ((b"", "closed"), (b"", "reset")), f"{ending} after {raw!r}"
    # and the broker serves the next connection
    (answer,), _ = exchange(endpoint, sentinel())
    assert parse_response(API_VERSIONS, 0, answer)[1].error_code == NONE


def test_a_truncated_or_unparseable_frame_closes_the_connection_unanswered_and_unserved(cluster):
    topic = seeded_topic(cluster, "hostile-truncated")
    endpoint, (p, _) = shared_leader(topic)
    before = log_bounds(cluster, topic.name)
    produce = encode(*produce_request(9, topic.name, {p: kafka_batch([b"never"])}, 1))
    half = len(produce) // 2
    cases = {
        # the length says more than is sent, then the client half-closes
        "body cut short": produce[:half],
        "header cut short": produce[:4 + 6],
        "prefix cut short": produce[:3],
        # the length is honest, the frame inside it is cut: it does not parse
        "frame cut in its records": struct.pack(">i", half - 4) + produce[4:half],
        "frame cut in its header": struct.pack(">i", 9) + produce[4:13],
        "frame missing its last byte": struct.pack(">i", len(produce) - 5) + produce[4:-1],
    }
    for what, data in cases.items():
        frames, ending = exchange(endpoint, data + sentinel())
        assert (frames, ending) in (([], "closed"), ([], "reset")), f"{what}: {ending}, {len(frames)} answers"
    assert log_bounds(cluster, topic.name) == before
    # a half-closed connection with nothing wrong is answered, then closed
    frames, ending = exchange(endpoint, sentinel())
    assert len(frames) == 1 and ending == "closed"


# Arrays and strings Kafka's schemas make non-nullable, by (api, version) and path (see _paths)
_PRODUCE_NON_NULLABLE = [("topic_data",), (("topic_data", 0), "partition_data"), (("topic_data", 0), "name")]
_FETCH_NON_NULLABLE = [("topics",), (("topics", 0), "partitions"), (("topics", 0), "topic")]
NON_NULLABLE = {
    (PRODUCE, 9): _PRODUCE_NON_NULLABLE,
    (PRODUCE, 3): _PRODUCE_NON_NULLABLE,
    (FETCH, 12): _FETCH_NON_NULLABLE + [("forgotten_topics_data",)],
    (FETCH, 4): _FETCH_NON_NULLABLE,
}


def _null_string(frame: bytes, text: str, flexible: bool) -> bytes:
    """`frame` with its one string `text` made null (length -1; a compact string's length 0)."""
    raw = text.encode()
    written = (bytes([len(raw) + 1]) if flexible else struct.pack(">h", len(raw))) + raw
    assert frame.count(written) == 1
    out = frame.replace(written, b"\x00" if flexible else b"\xff\xff")
    return struct.pack(">i", len(out) - 4) + out[4:]


def test_a_null_where_kafka_forbids_one_is_a_frame_that_does_not_parse(cluster):
    """A null (length -1, or 0 in a compact field) in an array or string that Kafka's schema makes
    non-nullable: Kafka's broker cannot read the request and closes the connection, serving nothing."""
    topic = seeded_topic(cluster, "hostile-nulls", per_partition=1)
    endpoint, (p, _) = shared_leader(topic)
    before = log_bounds(cluster, topic.name)
    served = []
    for (api, version), paths in NON_NULLABLE.items():
        for path in paths:
            if api == PRODUCE:
                header, body = produce_request(version, topic.name, {p: kafka_batch([b"null"])}, 51)
            else:
                header, body = fetch_request(version, topic.name, {p: 0}, 51)
            if path[-1] in ("name", "topic"):  # kio writes no null where the schema forbids one: by hand
                frame = _null_string(encode(header, body), topic.name, flexible=type(body).__flexible__)
            else:
                frame = encode(header, _replaced(body, path, None))
            frames, ending = exchange(endpoint, frame + sentinel())
            if frames or ending not in ("closed", "reset"):
                answer = parse_response(api, version, frames[0])[1] if frames else ending
                served.append(f"{'Produce' if api == PRODUCE else 'Fetch'} v{version} with a null "
                              f"{_path_text(path)}: {answer}")
    assert not served, "\n".join(served)
    assert log_bounds(cluster, topic.name) == before


def test_an_api_or_version_not_served_is_answered_unsupported_version_or_closed(cluster):
    endpoint = cluster.brokers[1].extra["kafka"]

    def closes(data: bytes) -> bool:
        frames, ending = exchange(endpoint, data + sentinel())
        return frames == [] and ending in ("closed", "reset")

    # no response schema to carry an error (an unknown API, Produce below v3 and Fetch below v4 have no
    # top-level error code): the connection closes
    assert closes(raw_frame(9999, 0, 11))
    assert closes(raw_frame(-1, 0, 12))
    assert closes(raw_frame(PRODUCE, 2, 13, b"\x00" * 16))
    assert closes(raw_frame(FETCH, 3, 14, b"\x00" * 16))
    # Produce v13 and up name topics by id only; its response has no top-level error code either
    assert closes(raw_frame(PRODUCE, 13, 15, b"\x00" * 16))
    # Fetch v13 has a top-level error code: UNSUPPORTED_VERSION in v13's layout, and the connection goes on
    # (the sentinel ApiVersions after it is answered)
    frames, ending = exchange(endpoint, raw_frame(FETCH, 13, 16, b"\x00" * 16) + sentinel())
    assert ending == "closed" and len(frames) == 2
    correlation_id, body = parse_response(FETCH, 13, frames[0])
    assert (correlation_id, body.error_code, body.responses) == (16, UNSUPPORTED_VERSION, ())
    assert parse_response(API_VERSIONS, 0, frames[1])[0] == SENTINEL_ID
    # ApiVersions at a version the broker does not know: a v0 answer, UNSUPPORTED_VERSION and the table
    for version in (9, 5, 32767):
        frame = raw_frame(API_VERSIONS, version, 17, b"\x00\x00\x00")
        frames, ending = exchange(endpoint, frame + sentinel())
        assert ending == "closed" and len(frames) == 2
        correlation_id, body = parse_response(API_VERSIONS, 0, frames[0])
        assert (correlation_id, body.error_code) == (17, UNSUPPORTED_VERSION)
        assert {(k.api_key, k.min_version, k.max_version) for k in body.api_keys} == {
            (key, low, high) for key, (_, low, high, _h) in listener.API_VERSIONS.items()}
    # ... and at a version it serves, the same table without the error
    frames, _ = exchange(endpoint, encode(*build_request(API_VERSIONS, 3, {}, 18)))
    correlation_id, body = parse_response(API_VERSIONS, 3, frames[0])
    assert (correlation_id, body.error_code) == (18, NONE)
    assert {k.api_key for k in body.api_keys} == set(listener.API_VERSIONS)


def _records_damaged_after_crc(batch: bytes) -> bytes:
    out = bytearray(batch)
    out[-1] ^= 0x5A  # the last byte of the last record's last header value
    return bytes(out)


def _first_record_length(batch: bytes, delta: int) -> bytes:
    out = bytearray(batch)
    assert out[61] < 0x80 - 2 * delta  # a one-byte zigzag varint
    out[61] += 2 * delta
    return with_crc(out)


def _trailing_bytes(batch: bytes) -> bytes:
    (length,) = struct.unpack_from(">i", batch, 8)
    out = bytearray(batch + b"\x00\x02\x00")
    struct.pack_into(">i", out, 8, length + 3)
    return with_crc(out)


def _header_key_not_utf8(batch: bytes) -> bytes:
    at = batch.rindex(b"\x02h")  # the last record's header key "h" (zigzag length 1)
    return with_crc(batch[:at + 1] + b"\xff" + batch[at + 2:])


def _gzip_that_is_not(batch: bytes) -> bytes:
    return rewrite(batch, attributes=1)  # the records stay plain: gzip cannot read them


VALID = [b"valid-%d" % i for i in range(3)]
UNREADABLE = {CORRUPT_MESSAGE, INVALID_RECORD}  # records that contradict their batch's header
HOSTILE_BATCHES: dict[str, tuple[Callable[[], bytes | None], set[int]]] = {
    "records damaged, CRC not": (lambda: _records_damaged_after_crc(kafka_batch(VALID)), {CORRUPT_MESSAGE}),
    "wrong CRC": (lambda: rewrite(kafka_batch(VALID), fix_crc=False, crc=12345), {CORRUPT_MESSAGE}),
    "count above its records": (lambda: rewrite(kafka_batch(VALID), count=4), UNREADABLE),
    "count below its records": (lambda: rewrite(kafka_batch(VALID), count=2), UNREADABLE),
    "count 0": (lambda: rewrite(kafka_batch(VALID), count=0), UNREADABLE),
    "count 2^31 - 1": (lambda: rewrite(kafka_batch(VALID), count=2**31 - 1), UNREADABLE),
    "last offset delta negative": (lambda: rewrite(kafka_batch(VALID), last_offset_delta=-1), UNREADABLE),
    "last offset delta past its records": (lambda: rewrite(kafka_batch(VALID), last_offset_delta=5),
                                           UNREADABLE),
    "offsets not dense": (lambda: kafka_batch(VALID, offsets=[0, 2, 4]), UNREADABLE),
    "record length past the record": (lambda: _first_record_length(kafka_batch(VALID), 2), UNREADABLE),
    "record length short of the record": (lambda: _first_record_length(kafka_batch(VALID), -1), UNREADABLE),
    "bytes after the last record": (lambda: _trailing_bytes(kafka_batch(VALID)), UNREADABLE),
    "header key not UTF-8": (lambda: _header_key_not_utf8(kafka_batch(VALID)), UNREADABLE),
    "magic 1": (lambda: rewrite(kafka_batch(VALID), magic=1), {INVALID_RECORD}),
    "magic 3": (lambda: rewrite(kafka_batch(VALID), magic=3), {INVALID_RECORD}),
    "codec 5": (lambda: rewrite(kafka_batch(VALID), attributes=5), {UNSUPPORTED_COMPRESSION_TYPE}),
    "codec 7": (lambda: rewrite(kafka_batch(VALID), attributes=7), {UNSUPPORTED_COMPRESSION_TYPE}),
    "gzip that is not": (lambda: _gzip_that_is_not(kafka_batch(VALID)), UNREADABLE),
    "control batch from a client": (lambda: rewrite(kafka_batch(VALID), attributes=0x20), {INVALID_RECORD}),
    "log-append-time from a client": (lambda: rewrite(kafka_batch(VALID), attributes=0x08), {INVALID_RECORD}),
    "unknown attribute bits": (lambda: rewrite(kafka_batch(VALID), attributes=0x40), {INVALID_RECORD}),
    "transactional without a producer": (lambda: rewrite(kafka_batch(VALID), attributes=0x10),
                                         {INVALID_RECORD}),
    "batch length past the records": (lambda: rewrite(kafka_batch(VALID), fix_crc=False, batch_length=500),
                                      {CORRUPT_MESSAGE}),
    "batch length negative": (lambda: rewrite(kafka_batch(VALID), fix_crc=False, batch_length=-7),
                              {CORRUPT_MESSAGE}),
    "batch header cut short": (lambda: kafka_batch(VALID)[:40], {CORRUPT_MESSAGE}),
    "a valid batch, then bytes": (lambda: kafka_batch(VALID) + b"\x00" * 20, {CORRUPT_MESSAGE}),
    "a valid batch, then a damaged one": (
        lambda: kafka_batch(VALID) + _records_damaged_after_crc(kafka_batch(VALID)), {CORRUPT_MESSAGE}),
    "no bytes": (lambda: b"", UNREADABLE),
    "null records": (lambda: None, UNREADABLE),
    "records decompress past the topic's bound": (
        lambda: kafka_batch([bytes(8 << 20)], codec=4), {MESSAGE_TOO_LARGE}),
}


@pytest.fixture(scope="module")
def hostile_topic(cluster) -> Topic:
    # max.message.bytes 64 KiB: a batch's records may decompress to 64 x that, 4 MiB
    return seeded_topic(cluster, "hostile-batches", per_partition=3, max_message_bytes="65536")


@pytest.mark.parametrize("case", HOSTILE_BATCHES)
def test_a_hostile_batch_gets_its_kafka_error_and_nothing_of_it_is_stored(cluster, hostile_topic, case):
    make, codes = HOSTILE_BATCHES[case]
    endpoint, partitions = shared_leader(hostile_topic)
    bad, good = partitions[:2]
    for version in (3, 9):
        before = log_bounds(cluster, hostile_topic.name)
        batches = {bad: make(), good: kafka_batch(VALID)}
        frame = encode(*produce_request(version, hostile_topic.name, batches, 21))
        frames, _ = exchange(endpoint, frame + sentinel())
        assert len(frames) == 2, f"{case} v{version}: {len(frames)} answers"
        correlation_id, body = parse_response(PRODUCE, version, frames[0])
        assert correlation_id == 21 and len(body.responses) == 1, f"{case} v{version}: {body}"
        answers = {a.index: a for a in body.responses[0].partition_responses}
        assert set(answers) == {bad, good}, f"{case} v{version}: {body}"
        assert answers[bad].error_code in codes, f"{case} v{version}: {answers[bad]}"
        assert answers[bad].base_offset == -1
        # the other partition of the request is stored, and only it
        assert (answers[good].error_code, answers[good].base_offset) == (NONE, before[good][1])
        after = log_bounds(cluster, hostile_topic.name)
        assert after[bad] == before[bad], f"{case} v{version}: stored"
        assert after[good] == (before[good][0], before[good][1] + len(VALID))


def test_pipelined_requests_beyond_the_in_flight_bound_are_all_answered_in_order(cluster):
    topic = seeded_topic(cluster, "hostile-pipelined", per_partition=1)
    endpoint, (p, _) = shared_leader(topic)
    metadata = b"".join(encode(*build_request(METADATA, 1, {"topics": [{"name": topic.name}]}, 1000 + i))
                        for i in range(50))
    frames, ending = exchange(endpoint, metadata, timeout_s=30)
    assert ending == "closed"
    answers = [parse_response(METADATA, 1, f) for f in frames]
    assert [cid for cid, _ in answers] == [1000 + i for i in range(50)]
    assert all([t.name for t in body.topics] == [topic.name] for _, body in answers)
    # pipelined produces to one partition are appended in the order they were sent
    start = log_bounds(cluster, topic.name)[p][1]
    produces = b"".join(encode(*produce_request(9, topic.name, {p: kafka_batch([b"pipelined-%d" % i])},
                                                2000 + i, acks=-1 if i % 2 else 1)) for i in range(24))
    frames, ending = exchange(endpoint, produces, timeout_s=30)
    assert ending == "closed"
    answers = [parse_response(PRODUCE, 9, f) for f in frames]
    assert [cid for cid, _ in answers] == [2000 + i for i in range(24)]
    answered = [b.responses[0].partition_responses[0] for _, b in answers]
    assert [(a.error_code, a.base_offset) for a in answered] == [(NONE, start + i) for i in range(24)]
    wait_until(lambda: log_bounds(cluster, topic.name)[p][1] == start + 24, 30, "the high watermark")
    stored = read_all(cluster, topic.name, log_bounds(cluster, topic.name))[p]
    assert [value for _, _, value, _, _ in stored[-24:]] == [b"pipelined-%d" % i for i in range(24)]


# ---- the fuzz ----

FUZZ_BASES = ((PRODUCE, 9), (PRODUCE, 3), (FETCH, 12), (FETCH, 4))


def _int_garbage(rng: random.Random, bits: int) -> int:
    low, high = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    return rng.choice([0, 1, 2, 3, -1, -2, low, high, low + 1, high - 1, rng.randint(low, high),
                       rng.randint(-300, 300)])


def _field_garbage(rng: random.Random, f: dataclasses.Field, value, batch: bytes | None):
    """Something else for field `f` (now `value`) that kio can still write."""
    kind = classify_field(f)
    nullable = is_optional(f)
    if isinstance(kind, (EntityTupleField, PrimitiveTupleField)):
        options = [(), tuple(value) * 2, tuple(value)[:1] * 3, None]  # null, nullable or not: kio writes it
        if isinstance(kind, PrimitiveTupleField):
            options.append(tuple(_int_garbage(rng, 32) for _ in range(rng.randint(1, 4))))
        return rng.choice(options)
    if isinstance(kind, EntityField):
        return None if nullable else value
    kafka_type = f.metadata["kafka_type"]
    if kafka_type in ("int8", "int16", "int32", "int64"):
        return _int_garbage(rng, int(kafka_type[3:]))
    if kafka_type in ("timedelta_i32", "timedelta_i64"):
        return datetime.timedelta(milliseconds=_int_garbage(rng, 32))
    if kafka_type == "bool":
        return not value
    if kafka_type == "uuid":
        return rng.choice([uuid.UUID(int=0), uuid.UUID(int=rng.getrandbits(128))])
    if kafka_type == "string":
        options = ["", "\x00", "é" * rng.randint(1, 40), "".join(rng.choice("ab_.-*/ ") for _ in range(300)),
                   (value or "") + "x", "__consumer_offsets-not"]
        return rng.choice(options + ([None] if nullable else []))
    if kafka_type in ("bytes", "records"):
        whole = batch or b""
        options = [b"", rng.randbytes(rng.randint(1, 200)), whole[:rng.randint(0, len(whole))], whole * 2,
                   whole + rng.randbytes(rng.randint(1, 70))]
        return rng.choice(options + ([None] if nullable else []))
    return value


def _paths(entity, prefix: tuple = ()) -> list[tuple[tuple, dataclasses.Field, object]]:
    """Every field of kio entity `entity`, nested ones included: (path, field, value)."""
    out = []
    for f in dataclasses.fields(entity):
        value = getattr(entity, f.name)
        out.append((prefix + (f.name,), f, value))
        kind = classify_field(f)
        if isinstance(kind, EntityTupleField) and value:
            for i, item in enumerate(value):
                out += _paths(item, prefix + ((f.name, i),))
        elif isinstance(kind, EntityField) and value is not None:
            out += _paths(value, prefix + ((f.name, None),))
    return out


def _nulls_where_forbidden(entity) -> list[str]:
    """The fields of kio entity `entity` (nested ones too) that hold a null where Kafka's schema makes them
    non-nullable: kio reads a null array there as None, Kafka's brokers do not read such a request."""
    out = []
    for path, f, value in _paths(entity):
        if value is None and not is_optional(f):
            out.append(_path_text(path))
    return out


def _path_text(path: tuple) -> str:
    return ".".join(f"{s[0]}[{s[1]}]" if isinstance(s, tuple) and s[1] is not None
                    else s[0] if isinstance(s, tuple) else s for s in path)


def _replaced(entity, path: tuple, value):
    step, rest = path[0], path[1:]
    if not rest:
        return dataclasses.replace(entity, **{step: value})
    name, index = step
    current = getattr(entity, name)
    if index is None:
        return dataclasses.replace(entity, **{name: _replaced(current, rest, value)})
    items = list(current)
    items[index] = _replaced(items[index], rest, value)
    return dataclasses.replace(entity, **{name: tuple(items)})


def _garbage_at(rng: random.Random, header, body, batch: bytes | None, target: str, path: tuple) -> bytes:
    entity = header if target == "header" else body
    (f, value), = [(f, v) for p, f, v in _paths(entity) if p == path]
    changed = _replaced(entity, path, _field_garbage(rng, f, value, batch))
    return encode(changed, body) if target == "header" else encode(header, changed)


def _encoded_body(body) -> bytes:
    out = io.BytesIO()
    entity_writer(type(body))(out, body)
    return out.getvalue()


def _mutated(rng: random.Random, header, body, batch: bytes | None) -> tuple[str, bytes]:
    """One byte-level mutation of a valid frame (or garbage in a field chosen at random): (what was done,
    the bytes to send)."""
    frame = bytearray(encode(header, body))
    header_end = len(frame) - len(_encoded_body(body))
    records_at = bytes(frame).find(batch) if batch else -1
    kind = rng.choice(["flip", "flip", "bit", "field", "records", "records", "cut", "extend", "length"])
    if kind == "records" and records_at < 0:
        kind = "flip"
    if kind in ("flip", "bit"):
        region = rng.choice(["header", "body", "records", "anywhere"])
        records = (records_at, records_at + len(batch or b"")) if records_at >= 0 else (4, len(frame))
        low, high = {"header": (4, header_end), "body": (header_end, len(frame)), "anywhere": (4, len(frame)),
                     "records": records}[region]
        for _ in range(1 if kind == "bit" else rng.randint(1, 4)):
            at = rng.randrange(low, high)
            frame[at] ^= (1 << rng.randrange(8)) if kind == "bit" else rng.randrange(1, 256)
        return f"{kind} in {region}", bytes(frame)
    if kind == "field":
        target = "header" if rng.random() < 0.2 else "body"
        path = rng.choice(_paths(header if target == "header" else body))[0]
        return f"garbage in {target}.{_path_text(path)}", _garbage_at(rng, header, body, batch, target, path)
    if kind == "records":  # damage after the batch's CRC field, then make the CRC right again
        assert batch is not None
        damaged = bytearray(batch)
        for _ in range(rng.randint(1, 3)):
            damaged[rng.randrange(CRC_FROM, len(damaged))] = rng.randrange(256)
        frame[records_at:records_at + len(batch)] = with_crc(damaged)
        return "records damaged, CRC right", bytes(frame)
    if kind == "cut":
        cut = rng.randrange(4, len(frame))
        honest = rng.random() < 0.5
        out = frame[:cut]
        if honest:
            struct.pack_into(">i", out, 0, cut - 4)
        return f"cut at {cut}, {'honest' if honest else 'old'} length", bytes(out)
    if kind == "extend":
        honest = rng.random() < 0.5
        out = frame + rng.randbytes(rng.randint(1, 64))
        if honest:
            struct.pack_into(">i", out, 0, len(out) - 4)
        return f"extended, {'honest' if honest else 'old'} length", bytes(out)
    size = rng.choice([rng.randint(-(2**31), 2**31 - 1), len(frame) - 4 + rng.randint(-8, 8),
                       rng.randint(0, 7)])
    struct.pack_into(">i", frame, 0, size)
    return f"length {size}", bytes(frame)


def broker_view(stream: bytes) -> list[tuple[str, int, int, int, object]]:
    """The frames the listener reads from `stream`, in order, each as (what it does with it, api key,
    version, correlation id, the request body or None): "answer", "silent" (Produce with acks=0) or
    "close". Stops where the listener stops reading: a length it refuses, or bytes short of a whole frame."""
    out = []
    pos = 0
    while pos + 4 <= len(stream):
        (size,) = struct.unpack_from(">i", stream, pos)
        if size < 8 or size > FRAME_BYTES_MAX or pos + 4 + size > len(stream):
            break
        frame = stream[pos + 4:pos + 4 + size]
        pos += 4 + size
        api_key, version, correlation_id = struct.unpack_from(">hhi", frame)
        if not listener.served(api_key, version):
            answered = listener.unsupported_response(api_key, version, correlation_id) is not None
            out.append(("answer" if answered else "close", api_key, version, correlation_id, None))
            continue
        try:
            cls = request_class(api_key, version)
            _, header_bytes = entity_reader(cls.__header_schema__)(frame, 0)
            request, _ = entity_reader(cls)(frame, header_bytes)
        except Exception:  # noqa: BLE001 - kio raises many types on bad bytes: the listener closes
            out.append(("close", api_key, version, correlation_id, None))
            continue
        if _nulls_where_forbidden(request):  # as Kafka's brokers: a request they cannot read
            out.append(("close", api_key, version, correlation_id, None))
            continue
        silent = api_key == PRODUCE and request.acks == 0
        out.append(("silent" if silent else "answer", api_key, version, correlation_id, request))
    return out


@dataclasses.dataclass
class FuzzLedger:
    """What the fuzz's Produce requests may have stored: acknowledged batches by (partition, base offset),
    and batches whose outcome no answer told, by partition; problems found on the way; outcome counts."""

    acked: dict[tuple[int, int], list[tuple]] = dataclasses.field(default_factory=dict)
    maybe: dict[int, list[list[tuple]]] = dataclasses.field(default_factory=dict)
    problems: list[str] = dataclasses.field(default_factory=list)
    outcomes: collections.Counter = dataclasses.field(default_factory=collections.Counter)


def _account_produce(ledger: FuzzLedger, topic: str, what: str, request, response) -> None:
    """Note what a Produce may have put where, as its response says (None: no response told). A partition
    the request names twice is test_a_partition_named_twice_in_one_produce_is_not_misacknowledged's: here
    its batches count as outcome unknown, whatever their answers say."""
    if response is not None and len(response.responses) != len(request.topic_data):
        ledger.problems.append(f"{what}: {len(response.responses)} of {len(request.topic_data)} topics "
                               f"answered")
        return
    named = collections.Counter((t.name, p.index) for t in request.topic_data for p in t.partition_data)
    for t, topic_data in enumerate(request.topic_data):
        answers = None if response is None else response.responses[t].partition_responses
        if answers is not None and len(answers) != len(topic_data.partition_data):
            ledger.problems.append(f"{what}: {len(answers)} of {len(topic_data.partition_data)} partitions "
                                   f"answered")
            continue
        for i, part in enumerate(topic_data.partition_data):
            answer = None if answers is None else answers[i]
            if answer is not None and answer.index != part.index:
                ledger.problems.append(f"{what}: partition {part.index} answered as {answer.index}")
            code = None if answer is None else int(answer.error_code)
            if code == NONE and named[(topic_data.name, part.index)] > 1:
                ledger.outcomes["produce naming a partition twice"] += 1
                code = None
            if code not in (NONE, None) and code not in OUTCOME_UNKNOWN:
                ledger.outcomes[f"produce error {code}"] += 1
                continue  # refused: the check of the log finds it if it was stored all the same
            if topic_data.name != topic or not 0 <= part.index < PARTITIONS:
                if code == NONE:
                    ledger.problems.append(f"{what}: stored in {topic_data.name}-{part.index}")
                continue
            try:
                records = kafka_reads(part.records or b"")
            except Exception as exc:  # noqa: BLE001 - kafka-python raises many types on bad batches
                if code == NONE:
                    ledger.problems.append(f"{what}: stored at {answer.base_offset} records Kafka's reader "
                                           f"refuses ({type(exc).__name__}: {exc})")
                continue
            if code == NONE:
                ledger.outcomes["produce stored"] += 1
                key = (part.index, answer.base_offset)
                if key in ledger.acked:
                    ledger.problems.append(f"{what}: acknowledged at {key}, as an earlier produce was")
                ledger.acked[key] = records
            else:
                ledger.outcomes["produce outcome unknown"] += 1
                ledger.maybe.setdefault(part.index, []).append(records)


def _fuzz_base(case: int, topic: Topic, api: int, version: int, partitions: list[int]):
    """A valid request of the fuzz: (header, body, the first partition's batch for a Produce)."""
    if api == PRODUCE:
        batches = {p: kafka_batch([b"fuzz-%d-%d-%d" % (case, p, i) for i in range(1 + (case + p) % 3)],
                                  codec=(0, 0, 0, 1, 2, 3, 4)[(case + p) % 7],
                                  headers=[("case", b"%d" % case), ("n", None)]) for p in partitions}
        header, body = produce_request(version, topic.name, batches, case, acks=(-1, 1, -1, 0)[case % 4])
        return header, body, batches[partitions[0]]
    offsets = {p: (case + p) % 13 for p in partitions}
    return (*fetch_request(version, topic.name, offsets, case), None)


def _fuzz_plan(rng: random.Random, topic: Topic) -> list[tuple]:
    """The cases: garbage in every field of every base request (header and body, nested fields too),
    three times each; then byte-level mutations of bases drawn at random. Each case: (api, version, endpoint,
    partitions, (target, path) or None)."""
    endpoints = sorted(set(topic.leaders.values()))
    plan = []
    for n, (api, version) in enumerate(FUZZ_BASES):
        endpoint = endpoints[n % len(endpoints)]
        partitions = [p for p, e in sorted(topic.leaders.items()) if e == endpoint]
        header, body, _ = _fuzz_base(0, topic, api, version, partitions)
        for target, entity in (("header", header), ("body", body)):
            for path, _f, _v in _paths(entity):
                plan += [(api, version, endpoint, partitions, (target, path))] * 3
    while len(plan) < FUZZ_CASES:
        api, version = rng.choice(FUZZ_BASES + FUZZ_BASES[:2])  # Produce twice as often
        endpoint = rng.choice(endpoints)
        led = [p for p, e in sorted(topic.leaders.items()) if e == endpoint]
        plan.append((api, version, endpoint, rng.sample(led, rng.randint(1, len(led))), None))
    return plan


def _one_fuzz_case(rng: random.Random, case: int, planned: tuple, topic: Topic, ledger: FuzzLedger) -> None:
    api, version, endpoint, partitions, field = planned
    header, body, batch = _fuzz_base(case, topic, api, version, partitions)
    for _ in range(20):
        if field is None:
            what, data = _mutated(rng, header, body, batch)
        else:
            what = f"garbage in {field[0]}.{_path_text(field[1])}"
            data = _garbage_at(rng, header, body, batch, *field)
        stream = data + sentinel()
        view = broker_view(stream)
        if all(a in FUZZ_SAFE_APIS or not listener.served(a, v) for _, a, v, _, _ in view):
            break
    else:
        return
    what = f"case {case} ({'Produce' if api == PRODUCE else 'Fetch'} v{version}, {what})"
    ledger.outcomes[f"first frame: {view[0][0] if view else 'not read whole'}"] += 1
    frames, ending = exchange(endpoint, stream, timeout_s=5)
    ledger.outcomes[f"connection {ending}"] += 1
    responses = list(frames)
    closed = False
    for kind, api_key, v, correlation_id, request in view:
        closed = closed or kind == "close"
        if closed or kind == "silent" or not responses:
            if not closed and kind != "silent" and ending == "closed":
                ledger.problems.append(f"{what}: no answer to API {api_key} v{v} (id {correlation_id})")
            if api_key == PRODUCE and request is not None:  # maybe served, its outcome untold
                _account_produce(ledger, topic.name, what, request, None)
            continue
        payload = responses.pop(0)
        try:
            # ApiVersions at a version not served is answered at v0
            answered_version = 0 if api_key == API_VERSIONS and request is None else v
            answered_id, response = parse_response(api_key, answered_version, payload)
        except Exception as exc:  # noqa: BLE001 - a malformed response is what this reports
            ledger.problems.append(f"{what}: malformed answer to API {api_key} v{v}: "
                                   f"{type(exc).__name__}: {exc}")
            continue
        if answered_id != correlation_id:
            ledger.problems.append(f"{what}: answer {answered_id} where {correlation_id} was due")
        if request is None:
            ledger.outcomes["unsupported version answered"] += 1
        elif api_key == PRODUCE:
            _account_produce(ledger, topic.name, what, request, response)
        elif api_key == FETCH:
            ledger.outcomes[f"fetch error {getattr(response, 'error_code', 0)}"] += 1
            for topic_answer in response.responses:
                for part in topic_answer.partitions:
                    try:
                        kafka_reads(part.records or b"")
                    except Exception as exc:  # noqa: BLE001 - what Kafka's reader cannot read is reported
                        ledger.problems.append(f"{what}: fetched records Kafka's reader refuses: {exc}")
    if responses:
        ledger.problems.append(f"{what}: {len(responses)} answers more than expected" + (
            " (a frame Kafka's brokers cannot read was served)" if closed else ""))


def test_fuzzed_produce_and_fetch_frames_change_no_log_beyond_what_was_acknowledged(cluster):
    topic = seeded_topic(cluster, "hostile-fuzz", per_partition=10)
    with Admin(cluster.bootstrap) as admin:
        topics_before = set(admin.list_topics())
    before = log_bounds(cluster, topic.name)
    rng = random.Random(FUZZ_SEED)
    ledger = FuzzLedger()
    for case, planned in enumerate(_fuzz_plan(rng, topic), start=1):
        _one_fuzz_case(rng, case, planned, topic, ledger)
    print(f"fuzz outcomes: {sorted(ledger.outcomes.items())}")
    assert not ledger.problems, "\n".join(ledger.problems[:20])
    assert all(node.running for node in cluster.brokers)

    # each log: the seed, then acknowledged batches where their acknowledgments say (and batches whose
    # outcome no answer told), byte for byte as Kafka's reader reads what was sent; nothing else
    acked_end = {p: max([before[p][1]] + [base + len(r) for (q, base), r in ledger.acked.items() if q == p])
                 for p in range(PARTITIONS)}

    def acknowledged_visible() -> bool:
        return all(end >= acked_end[p] for p, (_, end) in log_bounds(cluster, topic.name).items())

    wait_until(acknowledged_visible, 30, "every acknowledged record below the high watermark")
    after = log_bounds(cluster, topic.name)
    stored = read_all(cluster, topic.name, after)
    for p in range(PARTITIONS):
        start, end = after[p]
        assert start == before[p][0], f"partition {p}: log start {before[p][0]} -> {start}"
        records = stored[p]
        assert [r[0] for r in records] == list(range(start, end)), f"partition {p}: offsets read"
        assert [r[2] for r in records[:before[p][1]]] == topic.seed[p], f"partition {p}: the seed changed"
        offset = before[p][1]
        maybe = list(ledger.maybe.get(p, []))
        while offset < end:
            at = [r[1:] for r in records[offset - start:]]
            expected = ledger.acked.pop((p, offset), None)
            if expected is None:
                expected = next((m for m in maybe if m and at[:len(m)] == m), None)
                assert expected is not None, f"partition {p} at {offset}: {at[0]} stored, never acknowledged"
                maybe.remove(expected)
            assert at[:len(expected)] == expected, \
                f"partition {p} at {offset}: stored {at[:len(expected)]}, acknowledged {expected}"
            offset += len(expected)
    assert not ledger.acked, f"acknowledged, not stored: {sorted(ledger.acked)[:10]}"
    with Admin(cluster.bootstrap) as admin:
        assert set(admin.list_topics()) == topics_before

    # the brokers still serve Kafka's clients
    producer = KafkaProducer({"bootstrap.servers": cluster.kafka_bootstrap, "acks": "all",
                              "enable.idempotence": True})
    delivered = []
    for i in range(20):
        producer.produce(topic.name, value=b"after-%d" % i, partition=i % PARTITIONS,
                         on_delivery=lambda err, msg: delivered.append(err))
    assert producer.flush(30) == 0
    del producer
    assert delivered == [None] * 20
    consumer = KafkaConsumer({"bootstrap.servers": cluster.kafka_bootstrap, "group.id": "hostile-after",
                              "enable.auto.commit": False})
    consumer.assign([KafkaTopicPartition(topic.name, p, after[p][1]) for p in range(PARTITIONS)])
    read = []
    try:
        def all_read() -> bool:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                read.append(message.value())
            return len(read) >= 20

        wait_until(all_read, 60, "the 20 records back through librdkafka")
    finally:
        consumer.close()
    assert sorted(read) == sorted(b"after-%d" % i for i in range(20))


def test_a_partition_named_twice_in_one_produce_is_not_misacknowledged(cluster):
    """Kafka's broker keeps one entry per partition of a Produce request. Whatever a broker does with a
    partition named twice, each answer must name the offset of its own batch, and nothing may be stored
    that no answer names."""
    topic = seeded_topic(cluster, "hostile-twice", per_partition=1)
    endpoint, (p, _) = shared_leader(topic)
    for version in (3, 9):
        for layout in ("in one topic entry", "in two topic entries"):
            first = [b"first-%d-%d-%s" % (version, i, layout[3:6].encode()) for i in range(2)]
            second = [b"second-%d-%s" % (version, layout[3:6].encode())]
            entries = [{"index": p, "records": kafka_batch(first)},
                       {"index": p, "records": kafka_batch(second)}]
            topic_data = ([{"name": topic.name, "partition_data": entries}] if layout == "in one topic entry"
                          else [{"name": topic.name, "partition_data": [entry]} for entry in entries])
            before = log_bounds(cluster, topic.name)[p][1]
            frames, _ = exchange(endpoint, encode(*build_request(PRODUCE, version, {
                "transactional_id": None, "acks": -1, "timeout": 30_000, "topic_data": topic_data}, 31)))
            response = parse_response(PRODUCE, version, frames[0])[1]
            answers = [(a.error_code, a.base_offset)
                       for t in response.responses for a in t.partition_responses]
            stored = {offset: value for offset, _, value, _, _ in
                      read_all(cluster, topic.name, log_bounds(cluster, topic.name))[p] if offset >= before}
            what = f"v{version}, {layout}: answered {answers}, stored {stored}"
            if len(answers) == 1:  # one answer for the partition (Kafka's way): it names the one batch stored
                ((code, base),) = answers
                assert stored == {} if code != NONE else stored in (
                    {base + i: value for i, value in enumerate(values)} for values in (first, second)), what
                continue
            assert len(answers) == 2, what
            acknowledged = {}
            for (code, base), values in zip(answers, (first, second)):  # each entry's answer
                if code == NONE:
                    acknowledged.update({base + i: value for i, value in enumerate(values)})
            assert stored == acknowledged, what


def test_requests_behind_a_frame_that_closes_the_connection_are_not_served(cluster):
    """Kafka's broker reads a connection's next request only once it has answered the one before, so
    nothing behind a frame that closes the connection is ever read. A Produce pipelined behind one must
    not be stored either: never answered, its client sends it again."""
    topic = seeded_topic(cluster, "hostile-behind", per_partition=1)
    endpoint, (p, _) = shared_leader(topic)
    closers = {"an unparseable": raw_frame(PRODUCE, 9, 41, b"\xff" * 4),
               "an unknown API's": raw_frame(9999, 0, 41)}
    for what, closer in closers.items():
        before = log_bounds(cluster, topic.name)[p]
        produce = encode(*produce_request(9, topic.name, {p: kafka_batch([b"behind"])}, 42))
        # the request before it is answered, then the connection closes
        frames, ending = exchange(endpoint, sentinel() + closer + produce)
        assert [parse_response(API_VERSIONS, 0, f)[0] for f in frames] == [SENTINEL_ID]
        assert ending in ("closed", "reset")
        assert log_bounds(cluster, topic.name)[p] == before, f"a Produce behind {what} frame was stored"


def test_a_client_that_resets_with_requests_in_flight_leaves_no_connection_behind():
    """In-process, on a listener of its own (a connection held inside a broker is not visible from outside
    it): a client pipelines ApiVersions requests and reads nothing, so the listener's responses back up,
    its writer waits for the client and its reader for an in-flight slot; then the client resets the
    connection. The listener must let the connection go, not keep its reader waiting for a slot that no
    writer will free, with all the connection holds."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name="kafka-listener-loop", daemon=True)
    thread.start()

    def run(coroutine):
        return asyncio.run_coroutine_threadsafe(coroutine, loop).result(30)

    config = types.SimpleNamespace(kafka_request_bytes_max=FRAME_BYTES_MAX,
                                   kafka_requests_in_flight_max=IN_FLIGHT_MAX, kafka_batch_cache_bytes=0)
    authenticator = types.SimpleNamespace(authenticate=lambda context, metadata: "User:hostile",
                                          security=types.SimpleNamespace(authentication=("none",)))
    (port,) = free_ports(1)
    kafka = listener.KafkaListener(types.SimpleNamespace(config=config, authenticator=authenticator), None,
                                   "127.0.0.1", port)

    async def connections() -> int:
        return len(kafka._connections)

    run(kafka.start())
    try:
        requests = sentinel() * 50_000  # 1 MB
        for _ in range(3):
            with socket.socket() as sock:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
                sock.settimeout(2)
                sock.connect(("127.0.0.1", port))
                with pytest.raises(TimeoutError):  # the listener stops reading: its in-flight slots are taken
                    for _ in range(40):
                        sock.sendall(requests)
                # then close with a reset
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        wait_until(lambda: run(connections()) == 0, 15, "the listener to let the reset connections go")
    finally:
        run(kafka.stop())
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()


def test_no_broker_logged_a_bug_or_died(cluster):
    # last in the module: whatever the tests above sent, no Kafka handler or connection failed unexpectedly
    # (a handler's exception is logged "bug serving Kafka ...", a connection's by asyncio)
    assert all(node.running for node in cluster.brokers)
    for node in cluster.brokers:
        lines = node.log_path.read_text(errors="replace").splitlines()
        signs = ("bug serving Kafka", "client_connected_cb", "exception was never retrieved")
        bugs = [i for i, line in enumerate(lines) if any(sign in line for sign in signs)]
        assert not bugs, "\n".join(lines[bugs[0]:bugs[0] + 30])
