"""Broker-side schema validation (issue 45), on a real one-broker cluster: a topic with
value.schema.validation=true (key.schema.validation=true) refuses raw bytes, an unregistered id and an id
registered under another subject with INVALID_RECORD and nothing stored; a registered id and a tombstone
are stored. The same over gRPC (hand-made batches, no client logic in the way) and through librdkafka at
the Kafka listener. Schemas are registered with confluent-kafka's SchemaRegistryClient at the broker's REST
listener; the configs are refused with a bad value or on one broker's resource."""

from __future__ import annotations

import json

import grpc
import pytest
from confluent_kafka import KafkaError
from confluent_kafka import Producer as KafkaProducer
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient

from kanal.clients.admin import Admin
from kanal.deploy.local_cluster import LocalCluster
from kanal.schemas.framing import frame
from kanal.v1 import broker_pb2, broker_pb2_grpc, metadata_pb2
from kanal.v1.batch import NewRecord, build_batch, decode_records, iter_entries, parse_batch
from kanal.v1.error import ErrorCode, KanalError

from .conftest import BROKER_FLAGS, CONTROLLER_FLAGS, librdkafka_read_from_zero

pytestmark = pytest.mark.cluster

UNREGISTERED = 1_000_000  # far above any id this test's registry gives


def avro(name: str) -> Schema:
    return Schema(json.dumps({"type": "record", "name": name, "fields": [{"name": "id", "type": "long"}]}),
                  "AVRO")


def evolving(n: int) -> Schema:
    """Version n of a record that gains a field with a default each time (BACKWARD compatible)."""
    fields = [{"name": "id", "type": "long"}] + [{"name": f"f{k}", "type": "int", "default": 0}
                                                  for k in range(n)]
    return Schema(json.dumps({"type": "record", "name": "Evolving", "fields": fields}), "AVRO")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = LocalCluster(tmp_path_factory.mktemp("schema-validation"), controllers=1, brokers=1,
                     controller_flags=CONTROLLER_FLAGS, broker_flags=BROKER_FLAGS,
                     kafka_listeners=True, schema_registry_listeners=True)
    c.start(timeout_s=120)
    yield c
    c.stop()


@pytest.fixture(scope="module")
def registry(cluster) -> SchemaRegistryClient:
    return SchemaRegistryClient({"url": cluster.schema_registry_urls.split(",")[0]})


@pytest.fixture(scope="module")
def admin(cluster):
    with Admin(cluster.bootstrap) as made:
        yield made


@pytest.fixture(scope="module")
def stub(cluster):
    channel = grpc.insecure_channel(cluster.bootstrap.split(",")[0])
    yield broker_pb2_grpc.BrokerStub(channel)
    channel.close()


def produce(stub, topic: str, *batches: bytes) -> broker_pb2.ProduceResponse.PartitionResult:
    request = broker_pb2.ProduceRequest(acks=-1, timeout_ms=10_000)
    request.topics.add(topic=topic).partitions.add(partition=0).batches.extend(batches)
    return stub.Produce(request, timeout=30).topics[0].partitions[0]


def stored(stub, topic: str) -> list[tuple[int, bytes | None, bytes | None]]:
    """(offset, key, value) of every record of partition 0, read back over gRPC."""
    request = broker_pb2.FetchRequest(max_wait_ms=0, min_bytes=0, max_bytes=1 << 20)
    request.topics.add(topic=topic).partitions.add(partition=0, fetch_offset=0, max_bytes=1 << 20)
    data = stub.Fetch(request, timeout=30).topics[0].partitions[0]
    assert data.error == ErrorCode.NONE, data
    out = []
    for entry in iter_entries(data.records):
        batch = parse_batch(entry.batch)
        for record in decode_records(batch):
            out.append((batch.base_offset + record.offset_delta,
                        record.key if record.HasField("key") else None,
                        record.value if record.HasField("value") else None))
    return out


def refused(out: broker_pb2.ProduceResponse.PartitionResult, *fragments: str) -> None:
    assert out.error == ErrorCode.INVALID_RECORD, out
    assert list(out.batch_base_offsets) == [], out  # no batch of it stored
    for fragment in fragments:
        assert fragment in out.error_message, out.error_message


def test_value_validation_refuses_raw_bytes_and_unregistered_ids_with_nothing_stored(admin, registry, stub):
    topic = "sv-orders"
    ok = registry.register_schema(f"{topic}-value", avro("Order"))
    other = registry.register_schema("sv-elsewhere-value", avro("Elsewhere"))
    assert ok != other
    admin.create_topic(topic, 1, 1, {"value.schema.validation": "true"})
    assert produce(stub, topic, build_batch([NewRecord(frame(ok, b"\x02"))])).base_offset == 0

    refused(produce(stub, topic, build_batch([NewRecord(b"raw bytes")])),
            "record 0 of the batch", "does not start with the schema registry's framing")
    refused(produce(stub, topic, build_batch([NewRecord(frame(UNREGISTERED, b"\x02"))])),
            f"schema id {UNREGISTERED}, which the schema registry does not know")
    refused(produce(stub, topic, build_batch([NewRecord(frame(other, b"\x02"))])),
            f"schema id {other}, which is not registered under subject '{topic}-value'")
    # A batch is all or nothing: good records before the bad one are not stored either.
    refused(produce(stub, topic, build_batch([NewRecord(frame(ok, b"\x04")), NewRecord(frame(ok, b"\x06")),
                                              NewRecord(b"raw")])), "record 2 of the batch")
    # A tombstone (null value) passes; an empty value is not null.
    assert produce(stub, topic, build_batch([NewRecord(None, b"k")])).base_offset == 1
    refused(produce(stub, topic, build_batch([NewRecord(b"", b"k")])), "record 0 of the batch")

    assert stored(stub, topic) == [(0, None, frame(ok, b"\x02")), (1, b"k", None)]
    assert admin.log_bounds(topic, [0])[0][1] == 2


def test_an_id_soft_deleted_from_the_subject_is_refused_and_a_new_registration_is_accepted_at_once(
        admin, registry, stub):
    topic = "sv-evolving"
    admin.create_topic(topic, 1, 1, {"value.schema.validation": "true"})
    v1 = registry.register_schema(f"{topic}-value", evolving(0))
    assert produce(stub, topic, build_batch([NewRecord(frame(v1, b"\x02"))])).error == ErrorCode.NONE
    registry.delete_version(f"{topic}-value", 1)  # soft: the id stays readable, new records may not use it
    for n in range(1, 6):
        # Registered just now: the leader's image may not have it yet; the broker catches up before refusing.
        new_id = registry.register_schema(f"{topic}-value", evolving(n))
        out = produce(stub, topic, build_batch([NewRecord(frame(new_id, b"\x02"))]))
        assert out.error == ErrorCode.NONE, out
    refused(produce(stub, topic, build_batch([NewRecord(frame(v1, b"\x02"))])),
            f"schema id {v1}, which only soft-deleted versions of subject '{topic}-value' hold")
    assert len(stored(stub, topic)) == 6


def test_key_validation_refuses_unframed_keys_and_passes_null_ones(admin, registry, stub):
    topic = "sv-keyed"
    key_id = registry.register_schema(f"{topic}-key", avro("Key"))
    value_id = registry.register_schema(f"{topic}-value", avro("Value"))
    admin.create_topic(topic, 1, 1, {"key.schema.validation": "true"})
    refused(produce(stub, topic, build_batch([NewRecord(frame(value_id, b""), b"raw key")])),
            "(key.schema.validation=true): record 0 of the batch: its key does not start")
    refused(produce(stub, topic, build_batch([NewRecord(b"v", frame(value_id, b""))])),
            f"schema id {value_id}, which is not registered under subject '{topic}-key'")
    assert produce(stub, topic, build_batch([NewRecord(b"raw value", frame(key_id, b"k"))])).base_offset == 0
    assert produce(stub, topic, build_batch([NewRecord(b"no key")])).base_offset == 1
    assert stored(stub, topic) == [(0, frame(key_id, b"k"), b"raw value"), (1, None, b"no key")]


def test_the_configs_are_refused_with_a_bad_value_or_on_one_broker(admin):
    for bad in ("yes", "1", ""):
        with pytest.raises(KanalError) as caught:
            admin.create_topic("sv-bad", 1, 1, {"value.schema.validation": bad})
        assert caught.value.code == ErrorCode.INVALID_CONFIG, caught.value
    admin.create_topic("sv-altered", 1, 1)
    with pytest.raises(KanalError) as caught:
        admin.alter_configs(metadata_pb2.CONFIG_RESOURCE_TOPIC, "sv-altered", {"key.schema.validation": "on"})
    assert caught.value.code == ErrorCode.INVALID_CONFIG and "bad value for key.schema.validation" in str(
        caught.value)
    with pytest.raises(KanalError) as caught:
        admin.alter_configs(metadata_pb2.CONFIG_RESOURCE_BROKER, "0", {"value.schema.validation": "true"})
    assert "set per topic or as the cluster default, not on broker 0" in str(caught.value)
    entries = admin.describe_configs(metadata_pb2.CONFIG_RESOURCE_TOPIC, "sv-altered")
    described = {e.key: e.value for e in entries}
    assert described["value.schema.validation"] == described["key.schema.validation"] == "false"


def test_librdkafka_gets_invalid_record_and_its_registered_records_are_stored(cluster, admin, registry):
    from confluent_kafka.schema_registry.avro import AvroSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    topic = "sv-librdkafka"
    admin.create_topic(topic, 1, 1, {"value.schema.validation": "true"})
    schema = avro("Reading")
    serialize = AvroSerializer(registry, schema.schema_str)  # registers under sv-librdkafka-value
    producer = KafkaProducer({"bootstrap.servers": cluster.kafka_bootstrap, "acks": "all", "linger.ms": 0})
    reports: list[tuple[KafkaError | None, int]] = []

    def send(value: bytes | None) -> tuple[KafkaError | None, int]:
        producer.produce(topic, value=value, partition=0,
                         on_delivery=lambda err, msg: reports.append((err, msg.offset())))
        assert producer.flush(30) == 0
        return reports[-1]

    good = serialize({"id": 7}, SerializationContext(topic, MessageField.VALUE))
    assert send(good) == (None, 0)
    for bad in (b"raw bytes", frame(UNREGISTERED, b"\x0e")):
        err, _ = send(bad)
        assert err is not None and err.code() == KafkaError.INVALID_RECORD, err
        assert not err.retriable(), err
    assert send(None) == (None, 1)  # a tombstone
    read = librdkafka_read_from_zero(cluster.kafka_bootstrap, topic, 2, {"group.id": "sv-reader"})
    assert read == [(0, 0, good), (0, 1, None)]
