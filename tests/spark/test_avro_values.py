"""kanal-log decodes Avro values through the schema registry (issue 45): confluent-kafka's
SchemaRegistryClient and AvroSerializer frame values against a real cluster's registry, kanal's Producer
sends them, and Spark reads them back as typed columns equal to what was produced.

The topic holds v1 records, then v2 records (v2 adds a field with a default: read with v2, the v1 records
have the default), Avro keys, a tombstone, and values that do not decode (no magic byte, an id no schema
has, a JSON Schema id). They are read from the cluster's files (the schemas from its metadata log: no
network) through the JVM table and the Python source, and through the brokers with `schemaRegistry`; the
audit lists the registry's changes with their principal.
"""

from __future__ import annotations

import datetime
import decimal
import json
from typing import Any

import pytest
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from kanal.clients.admin import Admin
from kanal.clients.producer import Producer
from kanal.clients.producer_config import ProducerConfig
from kanal.deploy.local_cluster import LocalCluster
from kanal.schemas.framing import frame
from kanal.security.principal import ANONYMOUS
from kanal.spark.audit import run_audit
from kanal.spark.audit_report import audit_html, audit_summary

from ..cluster.conftest import BROKER_FLAGS, CONTROLLER_FLAGS

pytestmark = [pytest.mark.cluster, pytest.mark.spark]

TOPIC = "orders"
SUBJECT = f"{TOPIC}-value"
UNKNOWN_ID = 99_999
RECORDS_PER_VERSION = 20

ADDRESS = {"type": "record", "name": "Address", "fields": [
    {"name": "street", "type": "string"}, {"name": "zip", "type": "int"}]}
V1_FIELDS: list[dict[str, Any]] = [
    {"name": "id", "type": "long"},
    {"name": "customer", "type": "string"},
    {"name": "amount", "type": "double"},
    {"name": "ratio", "type": "float"},
    {"name": "paid", "type": "boolean"},
    {"name": "tags", "type": {"type": "array", "items": "string"}},
    {"name": "counts", "type": {"type": "map", "values": "long"}},
    {"name": "status", "type": {"type": "enum", "name": "Status", "symbols": ["NEW", "PAID", "SHIPPED"]}},
    {"name": "address", "type": ["null", ADDRESS], "default": None},
    {"name": "payload", "type": "bytes"},
    {"name": "created", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    {"name": "day", "type": {"type": "int", "logicalType": "date"}},
    {"name": "price", "type": {"type": "bytes", "logicalType": "decimal", "precision": 9, "scale": 2}},
    {"name": "ref", "type": ["string", "long"]},
]
V1 = {"type": "record", "name": "Order", "namespace": "shop", "fields": V1_FIELDS}
NOTE_DEFAULT = "n/a"
V2 = {**V1, "fields": [*V1_FIELDS, {"name": "note", "type": "string", "default": NOTE_DEFAULT}]}
# spark-avro's types for V2 (avro_types.py), as Spark prints them.
V2_SPARK = ("struct<id:bigint,customer:string,amount:double,ratio:float,paid:boolean,tags:array<string>,"
            "counts:map<string,bigint>,status:string,address:struct<street:string,zip:int>,payload:binary,"
            "created:timestamp,day:date,price:decimal(9,2),ref:struct<member0:string,member1:bigint>,"
            "note:string>")
T0_MS = 1_700_000_000_000


def order(i: int, version: int) -> dict[str, Any]:
    """The i-th order as the serializer takes it (fastavro's logical types: datetime, date, Decimal)."""
    datum: dict[str, Any] = {
        "id": i, "customer": f"c{i % 7}", "amount": i * 1.5, "ratio": 0.5 + i, "paid": i % 2 == 0,
        "tags": [f"t{j}" for j in range(i % 3)], "counts": {f"k{j}": j * i for j in range(i % 4)},
        "status": ("NEW", "PAID", "SHIPPED")[i % 3],
        "address": None if i % 4 == 0 else {"street": f"{i} Main St", "zip": 10_000 + i},
        "payload": bytes([i % 256, 0, 255]),
        "created": datetime.datetime.fromtimestamp((T0_MS + i * 1001) / 1000, datetime.UTC),
        "day": datetime.date(2024, 1, 1) + datetime.timedelta(days=i),
        "price": decimal.Decimal(i * 101).scaleb(-2),
        "ref": f"r{i}" if i % 2 else i * 1_000_000_007,
    }
    if version == 2:
        datum["note"] = f"note {i}"
    return datum


def as_spark_row(datum: dict[str, Any]) -> dict[str, Any]:
    """What Spark's collect() gives for a datum read with V2 (a V1 datum gets V2's default)."""
    row = dict(datum)
    row.setdefault("note", NOTE_DEFAULT)
    row["payload"] = bytearray(datum["payload"])
    # collect() gives a timestamp as the driver's local time, without a zone.
    row["created"] = datum["created"].astimezone().replace(tzinfo=None)
    ref = datum["ref"]
    row["ref"] = {"member0": ref if isinstance(ref, str) else None,
                  "member1": ref if isinstance(ref, int) else None}
    return row


@pytest.fixture(scope="module")
def produced(tmp_path_factory):
    """A cluster whose `orders` topic holds Avro values (two versions), Avro keys and undecodable values;
    yields (cluster, {offset: what was produced}, the schema ids, the registrations and deletions made)."""
    cluster = LocalCluster(tmp_path_factory.mktemp("avro"), controllers=1, brokers=1,
                           controller_flags=CONTROLLER_FLAGS, broker_flags=BROKER_FLAGS,
                           schema_registry_listeners=True)
    cluster.start(timeout_s=120)
    try:
        with Admin(cluster.bootstrap) as admin:
            admin.create_topic(TOPIC, 1, 1)
        registry = SchemaRegistryClient({"url": cluster.schema_registry_urls.split(",")[0]})
        keys = AvroSerializer(registry, json.dumps("string"))
        v1 = AvroSerializer(registry, json.dumps(V1))
        v2 = AvroSerializer(registry, json.dumps(V2))
        value_context = SerializationContext(TOPIC, MessageField.VALUE)
        key_context = SerializationContext(TOPIC, MessageField.KEY)
        sent: list[tuple[bytes | None, bytes | None, object]] = []  # (key, value, what the test expects)
        for version, serializer in ((1, v1), (2, v2)):
            for i in range(version * 100, version * 100 + RECORDS_PER_VERSION):
                datum = order(i, version)
                key = keys(f"order-{i}", key_context)
                sent.append((key, serializer(datum, value_context), ("ok", f"order-{i}", datum)))
        json_id = registry.register_schema("other-value", Schema(json.dumps({"type": "object"}), "JSON"))
        sent += [
            (None, b"plain bytes", ("error", "not framed")),
            (None, frame(UNKNOWN_ID, b"\x02"), ("error", f"schema id {UNKNOWN_ID} is not registered")),
            (None, frame(json_id, b"{}"), ("error", "a JSON schema, not Avro")),
            (keys("gone", key_context), None, ("tombstone", "gone", None)),
        ]
        with Producer(ProducerConfig(bootstrap=cluster.bootstrap, acks="all")) as producer:
            futures = [producer.produce(TOPIC, value, key=key) for key, value, _ in sent]
            producer.flush(60)
            by_offset = {f.result(60).offset: what for f, (_, _, what) in zip(futures, sent)}
        ids = {"v1": registry.get_version(SUBJECT, 1).schema_id,
               "v2": registry.get_version(SUBJECT, 2).schema_id,
               "key": registry.get_latest_version(f"{TOPIC}-key").schema_id, "json": json_id}
        # Registry changes for the audit, on a subject of their own (orders-value stays as it is).
        scratch = registry.register_schema("scratch-value", Schema(json.dumps(V1), "AVRO"))
        registry.delete_version("scratch-value", 1)
        registry.delete_version("scratch-value", 1, permanent=True)
        registry.set_compatibility("other-value", "FULL")
        registry.set_compatibility(level="FORWARD")  # the registry-wide level
        registry.update_mode("other-value", "READONLY")
        ids["scratch"] = scratch
        yield cluster, by_offset, ids
    finally:
        cluster.stop()


def read(spark, cluster: LocalCluster, fmt: str = "kanal-log", **options: str):
    reader = spark.read.format(fmt).option("topics", TOPIC).option("valueFormat", "avro")
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load(str(cluster.data_dir))


def rows_by_offset(df) -> dict[int, Any]:
    return {r["offset"]: r for r in df.collect()}


def check_rows(rows: dict[int, Any], by_offset: dict[int, Any], ids: dict[str, int]) -> None:
    assert sorted(rows) == sorted(by_offset)
    for offset, (kind, *what) in by_offset.items():
        row = rows[offset]
        if kind == "ok":
            _key, datum = what
            assert row["value"].asDict(recursive=True) == as_spark_row(datum), offset
            version = 2 if "note" in datum else 1
            assert (row["value_schema_id"], row["value_error"]) == (ids[f"v{version}"], None)
        elif kind == "tombstone":
            assert (row["value"], row["value_schema_id"], row["value_error"]) == (None, None, None)
        else:
            assert row["value"] is None and what[0] in row["value_error"], (offset, row["value_error"])


@pytest.mark.parametrize("fmt", ["kanal-log", "kanal-log-python"])
def test_values_decode_into_typed_columns_equal_to_what_was_produced(produced, spark, fmt):
    cluster, by_offset, ids = produced
    df = read(spark, cluster, fmt)
    assert df.schema["value"].dataType.simpleString() == V2_SPARK
    assert df.schema.fieldNames()[-4:] == ["value_schema_id", "value_error", "_corrupt", "_lost"]
    check_rows(rows_by_offset(df), by_offset, ids)
    # Columns a query does not use are not decoded, and a count needs none.
    assert df.count() == len(by_offset)
    assert df.where("value_error is null").select("offset").count() == len(by_offset) - 3


def test_keys_decode_too(produced, spark):
    cluster, by_offset, ids = produced
    df = read(spark, cluster, keyFormat="avro").select("offset", "key", "key_schema_id", "key_error")
    rows = rows_by_offset(df)
    for offset, (kind, *what) in by_offset.items():
        if kind == "error":  # produced without a key
            assert (rows[offset]["key"], rows[offset]["key_error"]) == (None, None)
        else:
            assert (rows[offset]["key"], rows[offset]["key_schema_id"]) == (what[0], ids["key"])
    assert dict(df.dtypes)["key"] == "string"


def test_failfast_stops_at_the_first_value_that_does_not_decode(produced, spark):
    cluster, by_offset, _ids = produced
    first_bad = min(o for o, (kind, *_) in by_offset.items() if kind == "error")
    failure = f"{TOPIC}-0 offset {first_bad}: the value does not decode: not framed"
    with pytest.raises(Exception, match=failure):
        read(spark, cluster, mode="FAILFAST").select("offset", "value").collect()
    # The records before it read as they do in PERMISSIVE mode.
    good = read(spark, cluster, mode="FAILFAST").where(f"offset < {first_bad}").select("value").count()
    assert good == first_bad


def test_a_pinned_reader_schema_reads_v2_records_without_the_new_field(produced, spark):
    cluster, by_offset, ids = produced
    df = read(spark, cluster, valueSchemaId=str(ids["v1"])).where("value is not null")
    rows = rows_by_offset(df)
    assert "note" not in df.schema["value"].dataType.fieldNames()
    for offset, row in rows.items():
        expected = as_spark_row(by_offset[offset][2])
        del expected["note"]
        assert row["value"].asDict(recursive=True) == expected
    assert len(rows) == 2 * RECORDS_PER_VERSION
    subject = read(spark, cluster, valueSubject=SUBJECT).schema["value"].dataType.simpleString()
    assert subject == V2_SPARK


def test_setup_errors_say_what_to_give(produced, spark):
    cluster, _by_offset, _ids = produced
    with pytest.raises(Exception, match="name one topic in `topics`"):
        spark.read.format("kanal-log").option("valueFormat", "avro").load(str(cluster.data_dir))
    with pytest.raises(Exception, match="no-such-value"):
        read(spark, cluster, valueSubject="no-such-value")
    with pytest.raises(Exception, match="give schemaRegistry"):
        (spark.read.format("kanal-log").option("bootstrap", cluster.bootstrap).option("topics", TOPIC)
         .option("valueFormat", "avro").load())


def test_through_the_brokers_with_the_registry_the_rows_are_the_same(produced, spark):
    cluster, by_offset, ids = produced
    df = (spark.read.format("kanal-log").option("bootstrap", cluster.bootstrap).option("topics", TOPIC)
          .option("valueFormat", "avro").option("schemaRegistry", cluster.schema_registry_urls).load())
    assert df.schema["value"].dataType.simpleString() == V2_SPARK
    check_rows(rows_by_offset(df), by_offset, ids)


def test_the_audit_lists_the_registrys_changes_with_their_principal(produced, spark, tmp_path):
    cluster, _by_offset, ids = produced
    audit = run_audit(spark, cluster.data_dir, tmp_path / "audit")
    changes = [(r["event"], r["subject"], r["version"], r["schema_id"], r["schema_type"], r["value_after"],
                r["principal"]) for r in audit.tables["schema_changes"].orderBy("offset").collect()]
    who = str(ANONYMOUS)
    assert changes == [
        ("schema_registered", f"{TOPIC}-key", 1, ids["key"], "AVRO", None, who),
        ("schema_registered", SUBJECT, 1, ids["v1"], "AVRO", None, who),
        ("schema_registered", SUBJECT, 2, ids["v2"], "AVRO", None, who),
        ("schema_registered", "other-value", 1, ids["json"], "JSON", None, who),
        ("schema_registered", "scratch-value", 1, ids["v1"], "AVRO", None, who),
        ("schema_soft_deleted", "scratch-value", 1, ids["v1"], "AVRO", None, who),
        ("schema_hard_deleted", "scratch-value", 1, ids["v1"], "AVRO", None, who),
        ("registry_config_set", "other-value", None, None, None, "FULL", who),
        ("registry_config_set", None, None, None, None, "FORWARD", who),
        ("registry_mode_set", "other-value", None, None, None, "READONLY", who),
    ]
    assert ids["scratch"] == ids["v1"]  # the same text under another subject keeps its id
    details = [r["detail"] for r in audit.tables["schema_changes"].orderBy("offset").collect()]
    assert "a new AVRO schema" in details[1] and "the already registered AVRO schema" in details[4]
    assert ("schema registry: versions registered 5, restored 0, soft-deleted 1, hard-deleted 1; config and "
            "mode changes 3") in audit_summary(audit)
    assert "<h2>Schema registry changes</h2>" in audit_html(audit)
