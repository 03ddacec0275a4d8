"""The schema registry's clients against a real cluster (issue 45): confluent-kafka's SchemaRegistryClient
and its Avro, JSON Schema and Protobuf serializers plugged into kanal's Producer, the records read back by
kanal's Consumer through confluent-kafka's deserializers, equal to what was produced (history checked);
each format evolves to a BACKWARD-compatible v2 and is refused (409) an incompatible v3 through the
serializer, with nothing stored; and the command line: `kanal produce --value-format F` then `kanal consume
--value-format F` print the JSON that went in, for each format, which confluent-kafka's deserializers read
too, and `kanal schemas` registers, shows, checks, sets levels and deletes.

One controller and one broker serving the registry's REST API (the registry is the controller's: a
bigger cluster adds nothing these tests look at)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.schema_registry.error import SchemaRegistryError
from confluent_kafka.schema_registry.json_schema import JSONDeserializer, JSONSerializer
from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer, ProtobufSerializer
from google.protobuf.json_format import MessageToDict

from kanal.clients.consumer import Consumer, ConsumerConfig
from kanal.clients.producer import Producer, ProducerConfig
from kanal.clients.record_serializers import RegistryDeserializer
from kanal.clients.schema_registry_client import SchemaRegistryClient as KanalRegistryClient
from kanal.clients.serialization import RecordSerializationError
from kanal.deploy.local_cluster import LocalCluster
from kanal.schemas.protobuf_schema import parse as parse_protobuf
from kanal.v1.error import ErrorCode

from .conftest import BROKER_FLAGS, CONTROLLER_FLAGS, check_history, create_topic, wait_until

pytestmark = pytest.mark.cluster
RECORDS_PER_VERSION = 5
WAIT_S = 60


def avro_record(*fields: tuple[str, str, object]) -> str:
    out = []
    for name, kind, *default in fields:
        field: dict[str, object] = {"name": name, "type": kind}
        if default:
            field["default"] = default[0]
        out.append(field)
    return json.dumps({"type": "record", "name": "Order", "namespace": "shop", "fields": out})


AVRO = [avro_record(("id", "long")),
        avro_record(("id", "long"), ("note", "string", "")),  # a field with a default: BACKWARD
        avro_record(("other", "int"))]  # id dropped, a field without a default: incompatible


def json_schema(properties: dict[str, object]) -> str:
    # Closed (additionalProperties false): a property added later cannot have been written another way.
    return json.dumps({"type": "object", "properties": properties, "required": ["name"],
                       "additionalProperties": False})


JSON = [json_schema({"name": {"type": "string"}}),
        json_schema({"name": {"type": "string"}, "age": {"type": "integer"}}),  # optional, closed: BACKWARD
        json_schema({"name": {"type": "integer"}})]  # a type changed: incompatible

PROTO = ['syntax = "proto3";\npackage geo;\nmessage Point { int32 x = 1; int32 y = 2; }\n',
         'syntax = "proto3";\npackage geo;\nmessage Point { int32 x = 1; int32 y = 2; string label = 3; }\n',
         # x from int32 to string: incompatible
         'syntax = "proto3";\npackage geo;\nmessage Point { string x = 1; int32 y = 2; }\n']


@pytest.fixture(scope="module")
def cluster(tmp_path_factory) -> Iterator[LocalCluster]:
    c = LocalCluster(tmp_path_factory.mktemp("registry-clients"), controllers=1, brokers=1,
                     controller_flags=CONTROLLER_FLAGS, broker_flags=BROKER_FLAGS,
                     schema_registry_listeners=True)
    try:
        c.start(timeout_s=120)
        yield c
    finally:
        c.stop()


@pytest.fixture(scope="module")
def registry(cluster) -> SchemaRegistryClient:
    return SchemaRegistryClient({"url": cluster.schema_registry_urls})


def canonical(value: object) -> bytes:
    return json.dumps(value, sort_keys=True).encode()


def produce(cluster: LocalCluster, topic: str, serializer: Callable[..., Any], values: list[Any],
            as_json: Callable[[Any], object]) -> dict[tuple[int, int], bytes]:
    """`values` through kanal's Producer with `serializer`: (partition, offset) -> canonical JSON of each."""
    with Producer(ProducerConfig(bootstrap=cluster.bootstrap, linger_ms=0,
                                 value_serializer=serializer)) as producer:
        futures = [(producer.produce(topic, v, partition=0), v) for v in values]
        producer.flush()
        return {(m.partition, m.offset): canonical(as_json(v))
                for m, v in ((f.result(WAIT_S), v) for f, v in futures)}


def read(cluster: LocalCluster, topic: str, deserializer: Callable[..., Any], count: int,
         as_json: Callable[[Any], object]) -> list[tuple[int, int, bytes]]:
    """The first `count` records of the topic's partition 0 through kanal's Consumer with `deserializer`."""
    config = ConsumerConfig(bootstrap=cluster.bootstrap, auto_offset_reset="earliest", fetch_max_wait_ms=100,
                            value_deserializer=deserializer)
    with Consumer(config) as consumer:
        consumer.assign([(topic, 0)])
        records: list = []
        wait_until(lambda: records.extend(consumer.poll(0.2)) or len(records) >= count, WAIT_S,
                   f"{count} records of {topic}")
    return [(r.partition, r.offset, canonical(as_json(r.value))) for r in records]


def refused_incompatible(cluster: LocalCluster, topic: str, serializer: Callable[..., Any],
                         value: Any) -> None:
    """v3 through its serializer: refused by the registry (409, 409), raised by produce(), nothing queued."""
    config = ProducerConfig(bootstrap=cluster.bootstrap, value_serializer=serializer)
    with Producer(config) as producer, pytest.raises(RecordSerializationError) as err:
        producer.produce(topic, value, partition=0)
    cause = err.value.__cause__
    assert isinstance(cause, SchemaRegistryError), repr(cause)
    assert (cause.http_status_code, cause.error_code) == (409, 409)
    assert err.value.code == ErrorCode.INCOMPATIBLE_SCHEMA
    assert f"{topic}: the value serializer failed" in err.value.message


def evolve(cluster: LocalCluster, registry: SchemaRegistryClient, topic: str,
           serializers: list[Callable[..., Any]], values: list[list[Any]], deserializer: Callable[..., Any],
           as_json: Callable[[Any], object]) -> None:
    """v1's records, v2's, v3 refused; everything read back through `deserializer` equal (the history
    checked), and through kanal's own deserializer alike."""
    create_topic(cluster, topic, replication_factor=1)
    acked = produce(cluster, topic, serializers[0], values[0], as_json)
    acked |= produce(cluster, topic, serializers[1], values[1], as_json)
    refused_incompatible(cluster, topic, serializers[2], values[2][0])
    assert registry.get_versions(f"{topic}-value") == [1, 2]
    total = len(values[0]) + len(values[1])
    history = read(cluster, topic, deserializer, total, as_json)
    check_history(acked, history)
    assert len(history) == total == len(acked)  # v3 stored nothing
    kanal_registry = KanalRegistryClient(cluster.schema_registry_urls)
    assert read(cluster, topic, RegistryDeserializer(kanal_registry), total, lambda v: v) == history


def test_avro_serializers_evolve_and_an_incompatible_schema_is_refused(cluster, registry):
    values = [[{"id": i} for i in range(RECORDS_PER_VERSION)],
              [{"id": 100 + i, "note": f"n{i}"} for i in range(RECORDS_PER_VERSION)],
              [{"other": 1}]]
    evolve(cluster, registry, "avro-orders", [AvroSerializer(registry, s) for s in AVRO], values,
           AvroDeserializer(registry), lambda v: v)


def test_json_schema_serializers_evolve_and_an_incompatible_schema_is_refused(cluster, registry):
    values = [[{"name": f"p{i}"} for i in range(RECORDS_PER_VERSION)],
              [{"name": f"q{i}", "age": 30 + i} for i in range(RECORDS_PER_VERSION)],
              [{"name": 3}]]
    evolve(cluster, registry, "json-people", [JSONSerializer(s, registry) for s in JSON], values,
           JSONDeserializer(None, schema_registry_client=registry), lambda v: v)


def test_protobuf_serializers_evolve_and_an_incompatible_schema_is_refused(cluster, registry):
    # Message classes made at test time from the .proto texts (kanal.schemas.protobuf_schema compiles
    # them with protoc), as generated code would give them.
    classes = [parse_protobuf(text).message_class([0]) for text in PROTO]
    values = [[classes[0](x=i + 1, y=-i) for i in range(RECORDS_PER_VERSION)],
              [classes[1](x=i + 1, y=i, label=f"l{i}") for i in range(RECORDS_PER_VERSION)],
              [classes[2](x="one")]]

    def as_json(message: Any) -> object:
        return MessageToDict(message, preserving_proto_field_name=True)

    evolve(cluster, registry, "proto-points", [ProtobufSerializer(c, registry) for c in classes], values,
           ProtobufDeserializer(classes[1], {"use.deprecated.format": False}), as_json)


# ---- the command line ----


def kanal(env: dict[str, str], *args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kanal", *args], check=False, input=stdin,
                          capture_output=True, text=True, env=env, timeout=180)


@pytest.fixture
def env(tmp_path) -> dict[str, str]:
    """No `kanal dev` (an empty KANAL_HOME) and no KANAL_* settings: every flag is given."""
    out = {k: v for k, v in os.environ.items() if not k.startswith("KANAL_")}
    out["KANAL_HOME"] = str(tmp_path / "home")
    return out


CLI_CASES = {
    "avro": (AVRO[1], [{"id": 1, "note": "first"}, {"id": 2, "note": "ünïcode"}, {"id": 3, "note": ""}]),
    "json": (JSON[1], [{"name": "Ada", "age": 36}, {"name": "Grace"}, {"name": "Linus", "age": 0}]),
    "protobuf": (PROTO[1], [{"x": 1, "y": 2, "label": "a"}, {"x": -5, "y": 7},
                            {"x": 9, "y": 9, "label": "z"}]),
}


@pytest.mark.parametrize("record_format", sorted(CLI_CASES))
def test_the_cli_produces_and_consumes_each_format_as_json(cluster, registry, env, tmp_path, record_format):
    schema_text, values = CLI_CASES[record_format]
    topic = f"cli-{record_format}"
    create_topic(cluster, topic, replication_factor=1)
    schema_file = tmp_path / ("schema.proto" if record_format == "protobuf" else "schema.json")
    schema_file.write_text(schema_text)
    key_file = tmp_path / "key.json"
    key_file.write_text('{"type": "string"}')
    where = ["--bootstrap", cluster.bootstrap, "--schema-registry", cluster.schema_registry_urls]
    lines = "".join(f'"k{i}"\t{json.dumps(v)}\n' for i, v in enumerate(values))
    produced = kanal(env, "produce", topic, *where, "--value-format", record_format, "--value-schema",
                     str(schema_file), "--key-format", "json", "--key-schema", str(key_file),
                     "--key-separator", "\t", "--output", "json", stdin=lines)
    assert produced.returncode == 0, produced.stderr
    assert json.loads(produced.stdout) == {"topic": topic, "records": len(values)}
    assert registry.get_versions(f"{topic}-value") == [1] and registry.get_versions(f"{topic}-key") == [1]
    consumed = kanal(env, "consume", topic, *where, "--value-format", record_format, "--key-format", "json",
                     "--print-key", "--from-beginning", "--max-messages", str(len(values)))
    assert consumed.returncode == 0, consumed.stderr
    printed = [line.split("\t") for line in consumed.stdout.splitlines()]
    assert [json.loads(key) for key, _ in printed] == [f"k{i}" for i in range(len(values))]
    assert [json.loads(value) for _, value in printed] == values
    as_records = kanal(env, "consume", topic, *where, "--value-format", record_format, "--from-beginning",
                       "--max-messages", str(len(values)), "--output", "json")
    assert [json.loads(line)["value"] for line in as_records.stdout.splitlines()] == values
    # What the command wrote is Confluent's wire format: confluent-kafka's deserializers read it.
    if record_format == "protobuf":
        message_class = parse_protobuf(schema_text).message_class([0])
        confluent = ProtobufDeserializer(message_class, {"use.deprecated.format": False})
        as_json: Callable[[Any], object] = lambda m: MessageToDict(m, preserving_proto_field_name=True)
    elif record_format == "avro":
        confluent, as_json = AvroDeserializer(registry), lambda v: v
    else:
        confluent, as_json = JSONDeserializer(None, schema_registry_client=registry), lambda v: v
    assert [json.loads(v) for _, _, v in read(cluster, topic, confluent, len(values), as_json)] == values


def test_the_cli_refuses_a_line_that_does_not_fit_naming_it(cluster, env, tmp_path):
    create_topic(cluster, "cli-bad", replication_factor=1)
    schema_file = tmp_path / "order.avsc"
    schema_file.write_text(AVRO[0])
    where = ["--bootstrap", cluster.bootstrap, "--schema-registry", cluster.schema_registry_urls]
    result = kanal(env, "produce", "cli-bad", *where, "--value-format", "avro", "--value-schema",
                   str(schema_file), stdin='{"id": 1}\n{"id": "two"}\n')
    assert result.returncode == 1, result.stderr
    assert result.stderr.startswith("kanal: INVALID_RECORD: line 2: "), result.stderr
    result = kanal(env, "produce", "cli-bad", *where, "--value-format", "avro", stdin="not json\n")
    assert result.returncode == 1 and "line 1: the value is not JSON" in result.stderr, result.stderr


def test_kanal_schemas_register_get_check_set_levels_and_delete(cluster, env, tmp_path):
    where = ["--schema-registry", cluster.schema_registry_urls, "--output", "json"]
    files = {}
    for name, text in (("v1.avsc", AVRO[0]), ("v2.avsc", AVRO[1]), ("v3.avsc", AVRO[2])):
        files[name] = tmp_path / name
        files[name].write_text(text)

    def ok(*args: str) -> Any:
        result = kanal(env, "schemas", *args, *where)
        assert result.returncode == 0, result.stderr
        return json.loads(result.stdout)

    registered = ok("register", "cli-orders-value", str(files["v1.avsc"]))
    assert registered["subject"] == "cli-orders-value" and registered["id"] > 0
    assert "cli-orders-value" in ok("list")
    assert ok("list", "cli-orders-value") == {"subject": "cli-orders-value", "versions": [1]}
    got = ok("get", "cli-orders-value")
    assert (got["version"], got["id"], got["schema_type"]) == (1, registered["id"], "AVRO")
    assert json.loads(got["schema"]) == json.loads(AVRO[0])
    by_id = ok("get", "--id", str(registered["id"]))
    assert {"subject": "cli-orders-value", "version": 1} in by_id["versions"]
    assert ok("compatibility", "cli-orders-value", str(files["v2.avsc"]))["compatible"] is True
    refused = kanal(env, "schemas", "compatibility", "cli-orders-value", str(files["v3.avsc"]), *where)
    assert refused.returncode == 1 and json.loads(refused.stdout)["compatible"] is False
    error = json.loads(refused.stderr)["error"]
    assert error["name"] == "INCOMPATIBLE_SCHEMA", refused.stderr
    assert ok("compatibility", "cli-orders-value", "--set", "full")["compatibility"] == "FULL"
    assert ok("compatibility", "cli-orders-value")["compatibility"] == "FULL"
    assert ok("compatibility", "cli-orders-value", "--delete")["compatibility"] == ok("compatibility")[
        "compatibility"]
    text = kanal(env, "schemas", "register", "cli-orders-value", str(files["v3.avsc"]),
                 "--schema-registry", cluster.schema_registry_urls)
    assert text.returncode == 1 and text.stderr.startswith("kanal: INCOMPATIBLE_SCHEMA: "), text.stderr
    assert ok("delete", "cli-orders-value") == {"subject": "cli-orders-value", "versions": [1],
                                                "permanent": False}
    assert "cli-orders-value" not in ok("list")
    missing = kanal(env, "schemas", "get", "cli-orders-value", *where)
    assert missing.returncode == 1 and json.loads(missing.stderr)["error"]["name"] == "SUBJECT_NOT_FOUND"
