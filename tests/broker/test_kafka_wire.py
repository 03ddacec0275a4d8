"""The Kafka listener's framing (kanal.broker.kafka.wire), error map (errors.py) and version table
(listener.py), held to kio, the library whose schema classes they are built on.

- Every response kanal can send, at every version it serves, builds from a plain dict, and kanal's fast
  writer gives exactly the bytes kio's own writer gives for it, empty or filled.
- A response frame has the right length, correlation id and header version (ApiVersions always v0), and
  kio reads its body back to what was written.
- A request written by kio decodes to the same values; a frame cut short is a FrameError.
- Every kanal error code reaches a Kafka client as a Kafka code it knows.
- A request kanal does not serve gets UNSUPPORTED_VERSION where its response can carry one.
"""

from __future__ import annotations

import datetime
import io
import struct
import uuid

import pytest
from kafka.record.default_records import DefaultRecordBatchBuilder
from kio.index import load_request_schema
from kio.schema.errors import ErrorCode as KafkaErrorCode
from kio.serial import entity_reader, entity_writer

from kanal.broker.kafka import errors, wire
from kanal.broker.kafka.listener import API_VERSIONS, api_versions_response, served, unsupported_response
from kanal.v1.error import ErrorCode

SERVED = [(key, version) for key, (_, low, high, _h) in sorted(API_VERSIONS.items())
          for version in range(low, high + 1)]
SERVED_IDS = [f"{API_VERSIONS[key][0]}-v{version}" for key, version in SERVED]
UNSUPPORTED_VERSION = int(KafkaErrorCode.unsupported_version)
API_VERSIONS_KEY = 18


def kio_bytes(cls, entity) -> bytes:
    buffer = io.BytesIO()
    entity_writer(cls)(buffer, entity)
    return buffer.getvalue()


def kanal_bytes(cls, entity) -> bytes:
    out = bytearray()
    wire.writer(cls)(out, entity)
    return bytes(out)


def read_body(cls, frame: bytes | bytearray, at: int):
    """The body of `cls` at `at` in a frame, as kio reads it; it must end where the frame ends."""
    body, used = entity_reader(cls)(bytes(frame), at)  # kio answers the number of bytes it read
    assert at + used == len(frame)
    return body


def kafka_records() -> bytes:
    builder = DefaultRecordBatchBuilder(2, 0, False, -1, -1, -1, 1 << 16)
    builder.append(0, 1_700_000_000_000, b"key", b"value", [("h", b"v")])
    builder.append(1, 1_700_000_000_005, None, b"second", [])
    return bytes(builder.build())


# ---- responses: kanal's writer against kio's ----

@pytest.mark.parametrize(("api_key", "version"), SERVED, ids=SERVED_IDS)
def test_every_served_response_builds_empty_and_writes_as_kio_does(api_key, version):
    load_request_schema(api_key, version)  # kio decodes every request the table says kanal serves
    cls = wire.response_class(api_key, version)
    entity = wire.build(cls, {})
    assert kanal_bytes(cls, entity) == kio_bytes(cls, entity)


UUID = "6ba7b810-9dad-11d1-80b4-00c04fd430c8"
FILLED = {
    "Metadata-v12": (3, 12, {
        "throttle_time": 25,
        "brokers": [{"node_id": 1, "host": "broker-1.example", "port": 9092, "rack": "rack-a"},
                    {"node_id": 2, "host": "broker-2.example", "port": 9093, "rack": None}],
        "cluster_id": "kanal-cluster",
        "controller_id": 1,
        "topics": [
            {"error_code": 0, "name": "orders", "topic_id": UUID, "is_internal": False,
             "partitions": [
                 {"error_code": 0, "partition_index": 0, "leader_id": 1, "leader_epoch": 5,
                  "replica_nodes": [1, 2], "isr_nodes": [1, 2], "offline_replicas": []},
                 {"error_code": 6, "partition_index": 1, "leader_id": 2, "leader_epoch": 3,
                  "replica_nodes": [2, 1], "isr_nodes": [2], "offline_replicas": [1]},
             ],
             "topic_authorized_operations": -(1 << 31)},
            {"error_code": 3, "name": "missing", "topic_id": None, "partitions": []},
        ],
    }),
    "Produce-v9": (0, 9, {
        "responses": [{"name": "orders", "partition_responses": [
            {"index": 0, "error_code": 0, "base_offset": 1000, "log_append_time": -1, "log_start_offset": 0,
             "record_errors": [], "error_message": None},
            {"index": 1, "error_code": 87, "base_offset": -1, "log_append_time": 1_700_000_000_123,
             "log_start_offset": 12,
             "record_errors": [{"batch_index": 0, "batch_index_error_message": "bad"}],
             "error_message": "the batch holds an invalid record"},
        ]}],
        "throttle_time": 0,
    }),
    "Fetch-v12": (1, 12, {
        "throttle_time": 0,
        "error_code": 0,
        "session_id": 0,
        "responses": [{"topic": "orders", "partitions": [
            {"partition_index": 0, "error_code": 0, "high_watermark": 102, "last_stable_offset": 100,
             "log_start_offset": 0, "aborted_transactions": None, "preferred_read_replica": -1,
             "records": kafka_records()},
            {"partition_index": 1, "error_code": 0, "high_watermark": 60, "last_stable_offset": 60,
             "log_start_offset": 10, "aborted_transactions": [{"producer_id": 7, "first_offset": 50},
                                                              {"producer_id": 8, "first_offset": 55}],
             "preferred_read_replica": -1, "records": b""},
            {"partition_index": 2, "error_code": 74, "high_watermark": -1, "aborted_transactions": [],
             "records": None, "diverging_epoch": {"epoch": 3, "end_offset": 40},
             "current_leader": {"leader_id": 2, "leader_epoch": 4}},
        ]}],
    }),
    "JoinGroup-v5": (11, 5, {
        "throttle_time": 0, "error_code": 0, "generation_id": 3, "protocol_name": "range", "leader": "m-1",
        "member_id": "m-1",
        "members": [{"member_id": "m-1", "group_instance_id": None, "metadata": b"\x00\x01\x00\x00\x00\x01"},
                    {"member_id": "m-2", "group_instance_id": "static-2", "metadata": b""}],
    }),
    "FindCoordinator-v4": (10, 4, {
        "throttle_time": 0,
        "coordinators": [
            {"key": "group-a", "node_id": 1, "host": "broker-1.example", "port": 9092, "error_code": 0,
             "error_message": None},
            {"key": "group-b", "node_id": -1, "host": "", "port": -1, "error_code": 15,
             "error_message": "the coordinator is not available"},
        ],
    }),
    "ApiVersions-v3": (18, 3, {
        **api_versions_response(),
        "supported_features": [{"name": "metadata.version", "min_version": 1, "max_version": 20}],
        "finalized_features_epoch": 5,
        "finalized_features": [{"name": "metadata.version", "max_version_level": 20, "min_version_level": 1}],
        "zk_migration_ready": True,
    }),
}


@pytest.mark.parametrize(("api_key", "version", "data"), FILLED.values(), ids=FILLED.keys())
def test_filled_responses_write_as_kio_does(api_key, version, data):
    cls = wire.response_class(api_key, version)
    entity = wire.build(cls, data)
    assert kanal_bytes(cls, entity) == kio_bytes(cls, entity)
    assert read_body(cls, kanal_bytes(cls, entity), 0) == entity


def test_build_converts_plain_values_to_kios_types():
    cls = wire.response_class(0, 9)
    entity = wire.build(cls, FILLED["Produce-v9"][2])
    ok, refused = entity.responses[0].partition_responses
    assert ok.log_append_time is None  # -1: no log-append time
    assert refused.log_append_time == datetime.datetime(2023, 11, 14, 22, 13, 20, 123000,
                                                        tzinfo=datetime.UTC)
    assert refused.error_code == KafkaErrorCode.invalid_record
    metadata = wire.build(wire.response_class(3, 12), FILLED["Metadata-v12"][2])
    assert metadata.throttle_time == datetime.timedelta(milliseconds=25)
    assert metadata.topics[0].topic_id == uuid.UUID(UUID)
    assert metadata.topics[0].partitions[1].offline_replicas == (1,)


def test_build_drops_keys_an_older_version_lacks():
    """Handlers answer once for every version: Metadata v0 has no rack, cluster id or topic id."""
    old = wire.build(wire.response_class(3, 0), FILLED["Metadata-v12"][2])
    assert not hasattr(old, "cluster_id") and not hasattr(old.brokers[0], "rack")
    assert [t.name for t in old.topics] == ["orders", "missing"]
    assert kanal_bytes(type(old), old) == kio_bytes(type(old), old)


# ---- response frames ----

def frame_parts(frame: bytes | bytearray, api_key: int, version: int) -> tuple[int, int]:
    """(correlation id, offset of the body) of a response frame, checking its length prefix and header:
    v1 (one byte of tagged fields, none) for a flexible version, v0 otherwise and always for ApiVersions."""
    frame = bytes(frame)
    assert struct.unpack_from(">i", frame)[0] == len(frame) - 4
    correlation_id = struct.unpack_from(">i", frame, 4)[0]
    if wire.response_class(api_key, version).__flexible__ and api_key != API_VERSIONS_KEY:
        assert frame[8] == 0
        return correlation_id, 9
    return correlation_id, 8


@pytest.mark.parametrize(("api_key", "version"), SERVED, ids=SERVED_IDS)
def test_a_response_frame_has_its_length_correlation_id_header_and_body(api_key, version):
    frame = bytes(wire.encode_response(api_key, version, 0x12345678, {"throttle_time": 7}))
    correlation_id, body_at = frame_parts(frame, api_key, version)
    assert correlation_id == 0x12345678
    cls = wire.response_class(api_key, version)
    assert read_body(cls, frame, body_at) == wire.build(cls, {"throttle_time": 7})


@pytest.mark.parametrize(("api_key", "version", "data"), FILLED.values(), ids=FILLED.keys())
def test_a_filled_response_frame_reads_back(api_key, version, data):
    frame = bytes(wire.encode_response(api_key, version, -5, data))
    correlation_id, body_at = frame_parts(frame, api_key, version)
    assert correlation_id == -5
    cls = wire.response_class(api_key, version)
    assert read_body(cls, frame, body_at) == wire.build(cls, data)


def test_api_versions_answers_with_a_v0_header_at_every_version():
    for version in range(API_VERSIONS[API_VERSIONS_KEY][1], API_VERSIONS[API_VERSIONS_KEY][2] + 1):
        frame = bytes(wire.encode_response(API_VERSIONS_KEY, version, 3, api_versions_response()))
        assert frame[4:8] == struct.pack(">i", 3)
        # right after the correlation id: the error code (int16 0), no tagged-field byte before it
        assert frame[8:10] == b"\x00\x00"


# ---- requests ----

REQUESTS = {
    "ApiVersions-v3": (18, 3, {"client_software_name": "kanal-tests", "client_software_version": "1.0"}),
    "ApiVersions-v0": (18, 0, {}),
    "Metadata-v12": (3, 12, {
        "topics": [{"topic_id": None, "name": "orders"}, {"topic_id": UUID, "name": None}],
        "allow_auto_topic_creation": False, "include_topic_authorized_operations": True,
    }),
    "Metadata-v1": (3, 1, {"topics": None}),
    "Produce-v9": (0, 9, {"transactional_id": None, "acks": -1, "timeout": 30_000,
                          "topic_data": [{"name": "orders", "partition_data": [
                              {"index": 0, "records": kafka_records()}, {"index": 1, "records": None}]}]}),
    "Fetch-v4": (1, 4, {"replica_id": -1, "max_wait": 500, "min_bytes": 1, "max_bytes": 1 << 20,
                        "isolation_level": 1, "topics": [{"topic": "orders", "partitions": [
                            {"partition": 0, "fetch_offset": 42, "partition_max_bytes": 1 << 16}]}]}),
    "SaslAuthenticate-v2": (36, 2, {"auth_bytes": b"n,,n=user,r=nonce"}),
}


def request_frame(api_key: int, version: int, correlation_id: int, client_id: str | None, data: dict):
    """A request frame (without its length prefix) as kio writes it, and the body written."""
    cls = load_request_schema(api_key, version)
    header_cls = cls.__header_schema__
    header = header_cls(request_api_key=api_key, request_api_version=version, correlation_id=correlation_id,
                        client_id=client_id)
    body = wire.build(cls, data)
    return kio_bytes(header_cls, header) + kio_bytes(cls, body), body


@pytest.mark.parametrize(("api_key", "version", "data"), REQUESTS.values(), ids=REQUESTS.keys())
def test_a_request_kio_writes_decodes_to_the_same_values(api_key, version, data):
    frame, body = request_frame(api_key, version, 991, "client-1", data)
    assert wire.peek_header(frame) == (api_key, version, 991)
    request = wire.decode_request(frame)
    assert (request.api_key, request.api_version, request.correlation_id) == (api_key, version, 991)
    assert request.client_id == "client-1"
    assert request.body == body
    # bytes after the body are ignored, as Kafka's brokers ignore them
    assert wire.decode_request(frame + b"\x00\x00\x00").body == body


def test_a_request_without_a_client_id_has_an_empty_one():
    frame, _ = request_frame(18, 3, 1, None, REQUESTS["ApiVersions-v3"][2])
    assert wire.decode_request(frame).client_id == ""


@pytest.mark.parametrize(("api_key", "version", "data"), REQUESTS.values(), ids=REQUESTS.keys())
def test_a_request_cut_short_is_a_frame_error(api_key, version, data):
    frame, _ = request_frame(api_key, version, 991, "client-1", data)
    for end in range(len(frame)):
        with pytest.raises(wire.FrameError):
            wire.decode_request(frame[:end])


def test_a_header_of_fewer_than_8_bytes_is_a_frame_error():
    for size in range(8):
        with pytest.raises(wire.FrameError):
            wire.peek_header(bytes(size))
    assert wire.peek_header(struct.pack(">hhi", 3, 12, -1)) == (3, 12, -1)


def test_a_request_for_an_api_kio_does_not_know_is_a_frame_error():
    with pytest.raises(wire.FrameError):
        wire.decode_request(struct.pack(">hhih", 999, 0, 1, -1))


# ---- error codes ----

def test_every_kanal_error_code_is_a_kafka_error_code():
    kafka_codes = {int(code) for code in KafkaErrorCode}
    kafka_by_name = {code.name.upper(): int(code) for code in KafkaErrorCode}
    for name, code in ErrorCode.items():
        kafka = errors.kafka_code(code)
        assert kafka in kafka_codes, name
        if name in kafka_by_name:
            assert kafka == kafka_by_name[name], name
        if code == ErrorCode.NONE:
            assert kafka == 0
        else:
            assert kafka != 0, f"{name} would reach a Kafka client as success"
    assert errors.kafka_code(ErrorCode.CORRUPT_MESSAGE) == int(KafkaErrorCode.corrupt_message)
    assert errors.kafka_code(123_456) == int(KafkaErrorCode.unknown_server_error)  # a newer kanal's code


# ---- what kanal does not serve ----

def test_served_follows_the_table():
    for key, (_, low, high, _h) in API_VERSIONS.items():
        assert served(key, low) and served(key, high)
        assert not served(key, low - 1) and not served(key, high + 1)
    assert not served(999, 0)


def read_api_versions_v0(frame: bytearray) -> tuple[int, int, set[tuple[int, int, int]]]:
    cls = wire.response_class(API_VERSIONS_KEY, 0)
    correlation_id, body_at = frame_parts(frame, API_VERSIONS_KEY, 0)
    body = read_body(cls, frame, body_at)
    return correlation_id, int(body.error_code), {(k.api_key, k.min_version, k.max_version)
                                                  for k in body.api_keys}


TABLE = {(key, low, high) for key, (_, low, high, _h) in API_VERSIONS.items()}


@pytest.mark.parametrize("version", [5, 99, -1])
def test_api_versions_at_an_unsupported_version_answers_v0_with_the_table(version):
    answer = unsupported_response(API_VERSIONS_KEY, version, 41)
    assert answer is not None
    assert read_api_versions_v0(answer) == (41, UNSUPPORTED_VERSION, TABLE)


def test_api_versions_lists_exactly_the_served_table():
    frame = wire.encode_response(API_VERSIONS_KEY, 0, 1, api_versions_response())
    assert read_api_versions_v0(frame) == (1, 0, TABLE)
    for version in (3, 4):
        frame = bytes(wire.encode_response(API_VERSIONS_KEY, version, 1, api_versions_response()))
        body = read_body(wire.response_class(API_VERSIONS_KEY, version), frame, 8)
        assert {(k.api_key, k.min_version, k.max_version) for k in body.api_keys} == TABLE


@pytest.mark.parametrize(("api_key", "version"), [(50, 0), (11, 3), (1, 13), (3, 13)],
                         ids=["DescribeUserScramCredentials-v0", "JoinGroup-v3", "Fetch-v13", "Metadata-v13"])
def test_an_unserved_request_whose_response_has_an_error_code_gets_unsupported_version(api_key, version):
    answer = unsupported_response(api_key, version, 77)
    assert answer is not None
    correlation_id, body_at = frame_parts(answer, api_key, version)
    assert correlation_id == 77
    assert int(read_body(wire.response_class(api_key, version), answer, body_at).error_code) == \
        UNSUPPORTED_VERSION


@pytest.mark.parametrize(
    ("api_key", "version"), [(0, 13), (0, 2), (21, 0), (999, 0), (3, 99)],
    ids=["Produce-v13", "Produce-v2", "DeleteRecords-v0", "unknown-api", "unknown-version"],
)
def test_an_unserved_request_without_a_top_level_error_code_closes_the_connection(api_key, version):
    assert unsupported_response(api_key, version, 1) is None
