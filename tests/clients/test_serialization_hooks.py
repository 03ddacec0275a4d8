"""The serializer hooks of Producer and Consumer (clients/serialization.py): called per record with kanal's
SerializationContext, on both produce() paths and in produce_many(); confluent-kafka's registry serializers
plug in unchanged (against its in-memory mock registry here; the real registry in
tests/cluster/test_schema_registry_clients.py); a failing serializer queues nothing; a failing deserializer
keeps the consumer before the record, raising until it succeeds or is sought past."""

from __future__ import annotations

import json

import pytest
from confluent_kafka.schema_registry._sync.mock_schema_registry_client import MockSchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.schema_registry.error import SchemaRegistryError
from confluent_kafka.serialization import MessageField

from kanal.clients.consumer import Consumer, ConsumerConfig
from kanal.clients.producer import Producer, ProducerConfig
from kanal.clients.serialization import (
    KEY,
    VALUE,
    RecordDeserializationError,
    RecordSerializationError,
    SerializationContext,
)
from kanal.v1 import records_pb2
from kanal.v1.error import ErrorCode, KanalError
from tests.harness.waiting import wait_until

from .scripted_broker import Layout, ScriptedBroker
from .test_producer_native import PATHS, batches_of, make_producer, shut

AVRO = json.dumps({"type": "record", "name": "Order", "fields": [
    {"name": "id", "type": "long"}, {"name": "note", "type": ["null", "string"], "default": None}]})
WAIT_S = 30


def stored(producer: Producer) -> list[tuple[bytes | None, bytes | None, list]]:
    """(key, value, headers) of every buffered record, partition by partition."""
    out = []
    for batches in batches_of(producer).values():
        for batch in batches:
            for r in records_pb2.RecordList.FromString(batch.record_list()).records:
                out.append((r.key if r.HasField("key") else None, r.value if r.HasField("value") else None,
                            [(h.key, h.value) for h in r.headers]))
    return out


class Recording:
    """A serializer that writes JSON and remembers every (obj, topic, field, headers) it was given."""

    def __init__(self, header: tuple[str, bytes] | None = None) -> None:
        self.calls: list[tuple[object, str, str, object]] = []
        self.header = header

    def __call__(self, obj: object, ctx: SerializationContext) -> bytes | None:
        self.calls.append((obj, ctx.topic, ctx.field, list(ctx.headers) if ctx.headers is not None else None))
        if self.header is not None and ctx.headers is not None:
            ctx.headers.append(self.header)
        return None if obj is None else json.dumps(obj).encode()


@pytest.mark.parametrize("path", PATHS)
def test_produce_serializes_key_then_value_with_the_records_headers(path):
    keys, values = Recording(), Recording(header=("schema", b"7"))
    producer = make_producer(path, key_serializer=keys, value_serializer=values)
    try:
        producer.produce("t", {"id": 1}, key="k1", headers=[("trace", b"x")])
        producer.produce("t", None, key=None)  # a tombstone: serializers see None and give None
        assert keys.calls == [("k1", "t", "key", [("trace", b"x")]), (None, "t", "key", [])]
        assert values.calls == [({"id": 1}, "t", "value", [("trace", b"x")]), (None, "t", "value", [])]
        records = sorted(stored(producer), key=lambda r: r[1] or b"")
        assert records == [(None, None, [("schema", b"7")]),
                           (b'"k1"', b'{"id": 1}', [("trace", b"x"), ("schema", b"7")])]
    finally:
        shut(producer)


@pytest.mark.parametrize("path", PATHS)
def test_produce_many_serializes_every_record(path):
    values = Recording()
    producer = make_producer(path, value_serializer=values)
    try:
        producer.produce_many("u", [{"n": i} for i in range(5)]).result  # noqa: B018 (queued, not sent)
        assert [v for v, *_ in values.calls] == [{"n": i} for i in range(5)]
        assert all(headers is None for *_, headers in values.calls)  # produce_many's records have none
        assert [v for _, v, _ in stored(producer)] == [json.dumps({"n": i}).encode() for i in range(5)]
    finally:
        shut(producer)


@pytest.mark.parametrize("path", PATHS)
def test_a_failing_serializer_queues_nothing_and_keeps_its_code_and_cause(path):
    def refuse(obj: object, ctx: SerializationContext) -> bytes:
        raise ValueError(f"no {obj!r}")

    def registry_says(obj: object, ctx: SerializationContext) -> bytes:
        raise KanalError(ErrorCode.SCHEMA_NOT_FOUND, "no schema 9")

    for serializer, code in ((refuse, ErrorCode.INVALID_RECORD), (registry_says, ErrorCode.SCHEMA_NOT_FOUND),
                             (lambda obj, ctx: {"not": "bytes"}, ErrorCode.INVALID_RECORD)):
        producer = make_producer(path, value_serializer=serializer)
        try:
            with pytest.raises(RecordSerializationError) as err:
                producer.produce("t", {"id": 1})
            assert err.value.code == code and (err.value.topic, err.value.field) == ("t", VALUE)
            assert "t: the value serializer failed" in err.value.message
            with pytest.raises(RecordSerializationError):
                producer.produce_many("t", [{"id": 1}])
            assert stored(producer) == []
        finally:
            shut(producer)
    refused = make_producer(PATHS[0], value_serializer=refuse)
    try:
        with pytest.raises(RecordSerializationError) as err:
            refused.produce("t", 1)
        assert isinstance(err.value.__cause__, ValueError)
    finally:
        shut(refused)


@pytest.mark.parametrize("path", PATHS)
def test_the_serialized_value_is_what_the_size_limit_sees(path):
    producer = make_producer(path, value_serializer=lambda obj, ctx: b"x" * obj, record_bytes_max=100)
    try:
        producer.produce("t", 50)
        with pytest.raises(KanalError) as err:
            producer.produce("t", 200)
        assert err.value.code == ErrorCode.MESSAGE_TOO_LARGE
    finally:
        shut(producer)


def test_without_serializers_the_c_path_is_untouched():
    from kanal.clients.producer import NATIVE

    if not NATIVE:
        pytest.skip("the C extension is not built")
    plain = make_producer("native")
    serializing = make_producer("native", value_serializer=Recording())
    try:
        assert plain.produce == plain._appender.produce  # the C function itself, no Python in between
        assert serializing.produce == serializing._produce_serialized
    finally:
        shut(plain)
        shut(serializing)


def test_serializer_settings_must_be_callable():
    for setting in ("key_serializer", "value_serializer"):
        with pytest.raises(KanalError) as err:
            ProducerConfig(bootstrap="h:1", **{setting: "avro"})
        assert err.value.code == ErrorCode.INVALID_CONFIG and setting in err.value.message
    for setting in ("key_deserializer", "value_deserializer"):
        with pytest.raises(KanalError) as err:
            ConsumerConfig(bootstrap="h:1", **{setting: 3})
        assert err.value.code == ErrorCode.INVALID_CONFIG and setting in err.value.message


def test_the_context_is_what_confluent_kafkas_serializers_read():
    """They take the subject from `ctx.topic + "-" + ctx.field` and compare ctx.field with MessageField."""
    ctx = SerializationContext("orders", KEY, [])
    assert ctx.field == MessageField.KEY and ctx.topic + "-" + ctx.field == "orders-key"
    assert SerializationContext("orders", VALUE).field == MessageField.VALUE


@pytest.mark.parametrize("path", PATHS)
def test_confluent_kafkas_avro_serializer_plugs_in_unchanged(path):
    registry = MockSchemaRegistryClient({"url": "mock://hooks"})
    producer = make_producer(path, value_serializer=AvroSerializer(registry, AVRO),
                             key_serializer=AvroSerializer(registry, '"string"'))
    try:
        producer.produce("t", {"id": 7, "note": "first"}, key="customer-7")
        (key, value, headers), = stored(producer)
        assert value[0] == 0 and headers == []  # Confluent's framing: magic byte, id, payload
        assert sorted(registry.get_subjects()) == ["t-key", "t-value"]
        deserializer = AvroDeserializer(registry)
        assert deserializer(value, SerializationContext("t", VALUE, headers)) == {"id": 7, "note": "first"}
        assert deserializer(key, SerializationContext("t", KEY, headers)) == "customer-7"
        with pytest.raises(RecordSerializationError) as err:  # not a value of the schema
            producer.produce("t", {"id": "seven"})
        assert err.value.code == ErrorCode.INVALID_RECORD and err.value.__cause__ is not None
    finally:
        shut(producer)


@pytest.mark.parametrize("path", PATHS)
def test_confluent_kafkas_header_schema_id_serializer_writes_into_the_records_headers(path):
    from confluent_kafka.schema_registry import header_schema_id_serializer

    registry = MockSchemaRegistryClient({"url": "mock://headers"})
    serializer = AvroSerializer(registry, AVRO, conf={"schema.id.serializer": header_schema_id_serializer})
    producer = make_producer(path, value_serializer=serializer)
    try:
        # (confluent-kafka's deserializer wants more than 5 bytes of payload even with the id in a header)
        producer.produce("t", {"id": 1, "note": "a note"})
        (_, value, headers), = stored(producer)
        assert [k for k, _ in headers] == ["__value_schema_id"] and value[0] != 0  # the id is in the header
        assert AvroDeserializer(registry)(value, SerializationContext("t", VALUE, headers)) == {
            "id": 1, "note": "a note"}
    finally:
        shut(producer)


# ---- the consumer, against a scripted broker ----


@pytest.fixture
def broker():
    layout = Layout(topics={"orders": [1, 1]})
    b = ScriptedBroker(1, layout)
    yield b
    b.stop()


def consumer(broker: ScriptedBroker, **settings) -> Consumer:
    c = Consumer(ConsumerConfig(bootstrap=broker.endpoint, fetch_max_wait_ms=50, retry_backoff_ms=10,
                                auto_offset_reset="earliest", **settings))
    return c


def poll_until(c: Consumer, count: int) -> list:
    got: list = []
    wait_until(lambda: got.extend(c.poll(0.1)) or len(got) >= count, WAIT_S, f"{count} records")
    return got


def test_the_consumer_deserializes_keys_and_values_with_their_headers(broker):
    broker.append("orders", 0, b'{"id": 1}', b'{"id": 2}')
    seen = []

    def value(data: bytes | None, ctx: SerializationContext) -> object:
        seen.append((ctx.topic, ctx.field, ctx.headers))
        return json.loads(data) if data is not None else None

    with consumer(broker, value_deserializer=value, key_deserializer=lambda d, ctx: ("key", d)) as c:
        c.assign([("orders", 0)])
        records = poll_until(c, 2)
    assert [r.value for r in records] == [{"id": 1}, {"id": 2}]
    assert [r.key for r in records] == [("key", None), ("key", None)]
    assert seen == [("orders", "value", []), ("orders", "value", [])]


def test_a_failing_deserializer_stops_the_partition_before_the_record_until_it_is_sought_past(broker):
    """The records before the bad one are returned; then every poll raises with its offset and the
    position stays on it; a seek past it goes on. Another partition's records wait behind it."""
    broker.append("orders", 0, b"1", b"2", b"bad", b"4")
    broker.append("orders", 1, b"10")

    def value(data: bytes | None, ctx: SerializationContext) -> int:
        return int(data or b"")

    with consumer(broker, value_deserializer=value) as c:
        c.assign([("orders", 0), ("orders", 1)])
        before: list = []

        def raised() -> RecordDeserializationError | None:
            try:
                before.extend(c.poll(0.1))
            except RecordDeserializationError as exc:
                return exc
            return None

        error = wait_until(raised, WAIT_S, "poll() to raise")
        assert [(r.partition, r.value) for r in before if r.partition == 0] == [(0, 1), (0, 2)]
        assert (error.topic_partition, error.offset, error.field) == (("orders", 0), 2, "value")
        assert error.code == ErrorCode.INVALID_RECORD and "orders-0 offset 2" in error.message
        assert isinstance(error.__cause__, ValueError)
        assert c.position(("orders", 0)) == 2
        for _ in range(3):  # raised again, the position unmoved
            with pytest.raises(RecordDeserializationError):
                c.poll(0.1)
            assert c.position(("orders", 0)) == 2
        c.seek(("orders", 0), error.offset + 1)
        after = poll_until(c, 1 + (0 if any(r.partition == 1 for r in before) else 1))
        assert sorted((r.partition, r.value) for r in before + after if r.offset >= 2 or r.partition == 1) \
            == [(0, 4), (1, 10)]


def test_a_deserializer_that_recovers_returns_the_record_in_its_place(broker):
    """A registry that was down: the record that failed is returned once the deserializer succeeds."""
    broker.append("orders", 0, b"a", b"b", b"c")
    down = {"b": 2}

    def value(data: bytes | None, ctx: SerializationContext) -> str:
        text = (data or b"").decode()
        if down.get(text, 0):
            down[text] -= 1
            raise KanalError(ErrorCode.BROKER_NOT_AVAILABLE, "the registry is down")
        return text

    with consumer(broker, value_deserializer=value) as c:
        c.assign([("orders", 0)])
        got: list = []
        errors: list = []

        def all_read() -> bool:
            try:
                got.extend(r.value for r in c.poll(0.1))
            except RecordDeserializationError as exc:
                errors.append(exc.code)
            return len(got) >= 3

        wait_until(all_read, WAIT_S, "three records")
    # Two failures: the first came after "a" in its poll, which returned "a"; the next poll raised.
    assert got == ["a", "b", "c"] and down == {"b": 0}
    assert errors and set(errors) == {ErrorCode.BROKER_NOT_AVAILABLE}


def test_confluent_kafkas_deserializer_reads_what_its_serializer_wrote_through_kanal(broker):
    registry = MockSchemaRegistryClient({"url": "mock://round-trip"})
    sent = [{"id": i, "note": None if i % 2 else f"n{i}"} for i in range(20)]
    with Producer(ProducerConfig(bootstrap=broker.endpoint, linger_ms=0,
                                 value_serializer=AvroSerializer(registry, AVRO))) as producer:
        for order in sent:
            producer.produce("orders", order, partition=0)
        producer.flush()
    with consumer(broker, value_deserializer=AvroDeserializer(registry)) as c:
        c.assign([("orders", 0)])
        assert [r.value for r in poll_until(c, 20)] == sent


def test_a_registry_refusal_is_the_cause_of_the_consumers_error(broker):
    broker.append("orders", 0, b"\x00\x00\x00\x00\x63\x02")  # framed with schema id 99, unknown
    registry = MockSchemaRegistryClient({"url": "mock://missing"})
    with consumer(broker, value_deserializer=AvroDeserializer(registry)) as c:
        c.assign([("orders", 0)])

        def raised() -> RecordDeserializationError | None:
            try:
                assert c.poll(0.1) == []
            except RecordDeserializationError as exc:
                return exc
            return None

        error = wait_until(raised, WAIT_S, "poll() to raise")
    assert error.offset == 0 and isinstance(error.__cause__, SchemaRegistryError)
