"""The metadata source's fast paths against the code they replace (no Spark session needed):

- metadata_json.message_json against json_format.MessageToJson(indent=None, preserving_proto_field_name=True)
  over generated bodies of every MetadataRecord kind (bytes, enums known and unknown, repeated, optional
  fields set or not, int64 as strings, unicode, doubles with NaN and infinities);
- the C walk (spark/_metadata_columns.c) and the Python path (metadata_rows.add_metadata_entry) against the
  reader as it was before them (`_reference_rows` below: a dict of typed fields and json_format per
  record), row for row and byte for byte, over generated batches, codecs, clips, and record bytes the C
  walk must decline (unknown fields, fields out of order or twice, explicit defaults, bad UTF-8).
"""

from __future__ import annotations

import json
import math

import pytest
from google.protobuf import json_format, message_factory
from google.protobuf.descriptor import FieldDescriptor
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kanal.spark.columns import METADATA_TABLE
from kanal.spark.log_rows import RowBuffer, clipped_records
from kanal.spark.metadata_columns import (
    NATIVE,
    NATIVE_IMPORT_ERROR,
    MetadataColumnBuffer,
    _native,
    add_metadata_columns,
)
from kanal.spark.metadata_json import message_json
from kanal.spark.metadata_rows import add_metadata_entry, record_json
from kanal.spark.segment_reader import StoredEntry
from kanal.v1 import metadata_pb2, records_pb2
from kanal.v1.batch import NewRecord, build_batch, scan_batch, with_broker_suffix

T0 = 1_700_000_050_000
KINDS = metadata_pb2.MetadataRecord.DESCRIPTOR.oneofs_by_name["record"].fields
CODECS = (records_pb2.COMPRESSION_NONE, records_pb2.COMPRESSION_GZIP, records_pb2.COMPRESSION_ZSTD)
_INT_RANGES = {
    FieldDescriptor.TYPE_INT32: (-(1 << 31), (1 << 31) - 1),
    FieldDescriptor.TYPE_INT64: (-(1 << 63), (1 << 63) - 1),
}
# Edge values every integer strategy also draws.
_EDGES = (0, 1, -1)


def _scalar(field: FieldDescriptor, known_enums: bool) -> st.SearchStrategy:
    t = field.type
    if t in _INT_RANGES:
        lo, hi = _INT_RANGES[t]
        return st.one_of(st.sampled_from((*_EDGES, lo, hi)), st.integers(lo, hi))
    if t == FieldDescriptor.TYPE_BOOL:
        return st.booleans()
    if t == FieldDescriptor.TYPE_STRING:
        return st.one_of(st.text(max_size=12), st.sampled_from(("", '"\\/\n\t\x00\x7f', "é€😀", "a\u2028b")))
    if t == FieldDescriptor.TYPE_BYTES:
        return st.binary(max_size=20)
    if t == FieldDescriptor.TYPE_DOUBLE:
        return st.one_of(st.floats(), st.sampled_from((0.0, -0.0, 1e300, 5e-324, 0.1, math.inf)))
    if t == FieldDescriptor.TYPE_ENUM:
        known = st.sampled_from([v.number for v in field.enum_type.values])
        return known if known_enums else st.one_of(known, st.integers(0, 200))
    raise AssertionError(f"no strategy for {field.full_name}")


def message_st(descriptor, known_enums: bool = False, depth: int = 0) -> st.SearchStrategy:
    """Messages of `descriptor` with any subset of fields set (None: left unset)."""
    fields = {}
    for f in descriptor.fields:
        if f.type == FieldDescriptor.TYPE_MESSAGE:
            one = message_st(f.message_type, known_enums, depth + 1) if depth < 3 else st.nothing()
        else:
            one = _scalar(f, known_enums)
        fields[f.name] = st.lists(one, max_size=4) if f.is_repeated else st.one_of(st.none(), one)
    cls = _message_class(descriptor)
    return st.fixed_dictionaries(fields).map(lambda kw: cls(**{k: v for k, v in kw.items() if v is not None}))


def _message_class(descriptor):
    """The generated class of a message of the metadata records, whichever .proto declares it (the registry's
    SchemaReference is schema_registry.proto's)."""
    return message_factory.GetMessageClass(descriptor)


def record_st(known_enums: bool = False) -> st.SearchStrategy:
    """MetadataRecords of every kind (or none), with time, principal and request id set or not."""
    bodies = st.one_of(st.just(None), *[
        message_st(f.message_type, known_enums).map(lambda body, name=f.name: (name, body)) for f in KINDS])

    def build(body, time_ms, principal, request_id):
        record = metadata_pb2.MetadataRecord(time_ms=time_ms, principal=principal, request_id=request_id)
        if body is not None:
            getattr(record, body[0]).CopyFrom(body[1])
        return record

    return st.builds(build, bodies, st.one_of(st.just(0), st.integers(-(1 << 50), 1 << 50)),
                     st.text(max_size=6), st.sampled_from(("", "r1", "réq")))


@settings(max_examples=400, deadline=None)
@given(record=record_st())
def test_message_json_equals_json_format(record):
    kind = record.WhichOneof("record")
    body = getattr(record, kind) if kind else record
    expected = json_format.MessageToJson(body, indent=None, preserving_proto_field_name=True)
    assert message_json(body) == expected


def test_every_kind_has_a_plan_and_each_field_type_is_exercised():
    from kanal.spark.metadata_json import plan_for

    assert all(plan_for(f.message_type) is not None for f in KINDS)
    body = metadata_pb2.ClientQuotaRecord(entity_type="user", value=float("nan"))
    assert message_json(body) == '{"entity_type": "user", "value": "NaN"}'


# ---- the reader as it was (the oracle) ----

def _reference_typed(record, kind):
    if kind is None:
        return {}
    body = getattr(record, kind)
    names = metadata_pb2.PartitionChangeCause.Name
    types = {metadata_pb2.CONFIG_RESOURCE_TOPIC: "topic", metadata_pb2.CONFIG_RESOURCE_BROKER: "broker"}
    if kind == "register_broker":
        return {"broker_id": body.broker_id, "broker_epoch": body.broker_epoch, "fenced": body.fenced}
    if kind == "broker_registration_change":
        return {"broker_id": body.broker_id, "broker_epoch": body.broker_epoch, "fenced": body.fenced,
                "reason": body.reason}
    if kind in ("unregister_broker", "producer_ids"):
        return {"broker_id": body.broker_id, "broker_epoch": body.broker_epoch}
    if kind == "topic":
        return {"topic": body.name, "topic_id": body.topic_id}
    if kind == "partition":
        return {"topic_id": body.topic_id, "partition": body.partition_id, "leader": body.leader,
                "isr": list(body.isr), "replicas": list(body.replicas)}
    if kind in ("partition_change", "partition_reassignment"):
        out = {"topic_id": body.topic_id, "partition": body.partition_id, "reason": body.reason}
        if kind == "partition_change":
            out["cause"] = names(body.cause)
        else:
            out["replicas"] = list(body.replicas)
        if body.HasField("leader"):
            out["leader"] = body.leader
        if body.HasField("isr"):
            out["isr"] = list(body.isr.broker_ids)
        return out
    if kind == "remove_topic":
        return {"topic_id": body.topic_id}
    if kind == "config":
        resource_type = types.get(body.resource_type, "unspecified")
        return {"config_resource_type": resource_type, "config_resource": body.resource_name,
                "topic": body.resource_name if resource_type == "topic" else None,
                "config_key": body.key, "config_value": body.value if body.HasField("value") else None}
    if kind == "client_quota":
        return {"config_resource_type": body.entity_type, "config_resource": body.entity_name,
                "config_key": body.key, "config_value": repr(body.value) if body.HasField("value") else None}
    return {}


def _reference_json(record, kind):
    if kind is None:
        return "{}"
    body = getattr(record, kind)
    if kind == "user_scram_credential":
        body = metadata_pb2.UserScramCredentialRecord(name=body.name, mechanism=body.mechanism,
                                                      iterations=body.iterations)
    return json_format.MessageToJson(body, indent=None, preserving_proto_field_name=True)


def _reference_rows(entries, lo, hi):
    rows = []
    for entry in entries:
        _batch, raw = clipped_records(entry, lo, hi)
        for r in raw:
            record = metadata_pb2.MetadataRecord.FromString(r.value)
            kind = record.WhichOneof("record")
            row = dict.fromkeys(METADATA_TABLE.names())
            row.update(offset=entry.base_offset + r.offset_delta, batch_offset=entry.base_offset,
                       controller_epoch=entry.leader_epoch, time=record.time_ms, record_type=kind,
                       principal=record.principal, request_id=record.request_id,
                       record_json=_reference_json(record, kind), record=r.value)
            row.update(_reference_typed(record, kind))
            rows.append(row)
    return rows


# ---- the fast paths against it ----

# Record bytes the C walk must decline; protobuf still parses them (the Python path reads them).
_ODD_SUFFIXES = (
    b"\x48\x05",  # an unknown field (9, varint)
    b"\x08\x07",  # time_ms given a second time (the last wins)
    b"\x12\x00",  # principal given again, empty
)


def _entry(values, base_offset, codec, leader_epoch=3):
    produced = build_batch([NewRecord(value=v, timestamp_ms=T0) for v in values], codec=codec)
    stored = memoryview(with_broker_suffix(produced, base_offset, leader_epoch))
    last = base_offset + len(values) - 1
    return StoredEntry(0, base_offset, last, leader_epoch, stored, scan_batch(stored))


def _ms_rows(batch):
    """Rows with `time` as int64 milliseconds (to_pylist's datetimes cannot hold every int64)."""
    if batch is None:
        return []
    at = batch.schema.get_field_index("time")
    columns = [c.cast("int64") if i == at else c for i, c in enumerate(batch.columns)]
    rows = [dict(zip(batch.schema.names, values)) for values in zip(*[c.to_pylist() for c in columns])]
    for row in rows:
        row["time"] //= 1000
    return rows


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batches=st.lists(st.lists(st.tuples(record_st(known_enums=True),
                                           st.sampled_from((b"",) * 6 + _ODD_SUFFIXES)),
                                 min_size=1, max_size=6), min_size=1, max_size=4),
       codec=st.sampled_from(CODECS), lo=st.integers(0, 12), span=st.integers(0, 30))
def test_c_walk_and_python_path_equal_the_reader_they_replace(batches, codec, lo, span):
    _require_c_walk()
    entries, base = [], 0
    for records in batches:
        entries.append(_entry([r.SerializeToString() + odd for r, odd in records], base, codec))
        base += len(records)
    hi = lo + span
    fast = MetadataColumnBuffer(METADATA_TABLE, _native)
    slow = RowBuffer(METADATA_TABLE)
    for e in entries:
        add_metadata_columns(fast, None, None, e, lo, hi)
        add_metadata_entry(slow, None, None, e, lo, hi)
    fast_batch, slow_batch = fast.flush(), slow.flush()
    expected = _reference_rows(entries, lo, hi)
    for batch in (fast_batch, slow_batch):
        if batch is not None:
            assert batch.schema == METADATA_TABLE.arrow_schema()
        assert _ms_rows(batch) == expected


def test_c_walk_declines_what_it_cannot_render_and_protobuf_decides():
    """A value that is no MetadataRecord: declined by C, refused by the Python path as before."""
    _require_c_walk()
    from kanal.v1.error import KanalError

    good = metadata_pb2.MetadataRecord(time_ms=T0, topic=metadata_pb2.TopicRecord(name="t", topic_id="x"))
    buf = MetadataColumnBuffer(METADATA_TABLE, _native)
    add_metadata_columns(buf, None, None, _entry([good.SerializeToString()], 0, 0))
    with pytest.raises(KanalError):
        add_metadata_columns(buf, None, None, _entry([b"\x12\x05ab"], 1, 0))  # principal overruns
    bad_utf8 = b"\x12\x02\xc3\x28"  # protobuf refuses invalid UTF-8 in a string too
    with pytest.raises(KanalError):
        add_metadata_columns(buf, None, None, _entry([bad_utf8], 1, 0))
    out = buf.flush()
    assert out.num_rows == 1
    assert json.loads(out.column("record_json")[0].as_py()) == {"name": "t", "topic_id": "x"}


def test_scram_json_hides_the_secrets_on_both_paths():
    record = metadata_pb2.MetadataRecord(user_scram_credential=metadata_pb2.UserScramCredentialRecord(
        name="alice", mechanism="SCRAM-SHA-256", salt=b"s", stored_key=b"k", server_key=b"v",
        iterations=4096))
    assert record_json(record, "user_scram_credential") == (
        '{"name": "alice", "mechanism": "SCRAM-SHA-256", "iterations": 4096}')
    _require_c_walk()
    buf = MetadataColumnBuffer(METADATA_TABLE, _native)
    add_metadata_columns(buf, None, None, _entry([record.SerializeToString()], 0, 0))
    assert buf.flush().column("record_json")[0].as_py() == record_json(record, "user_scram_credential")


def _require_c_walk() -> None:
    # The suite's set-up builds the C walk (deploy/bootstrap.sh installs a compiler); a missing one is a
    # failure here, not a skip, so a broken build cannot pass for a tested fast path.
    if not NATIVE:
        pytest.fail(f"the C metadata walk is not built: {NATIVE_IMPORT_ERROR}")


def test_an_unknown_cause_is_read_as_its_number_on_both_paths():
    """proto3 enums are open: a newer controller's PartitionChangeCause is a row with the number as its
    name (as protobuf's JSON form writes it), not a failed read."""
    _require_c_walk()
    change = metadata_pb2.MetadataRecord(time_ms=T0, partition_change=metadata_pb2.PartitionChangeRecord(
        topic_id="x", partition_id=0, leader=1, cause=99))
    for buf, add in ((MetadataColumnBuffer(METADATA_TABLE, _native), add_metadata_columns),
                     (RowBuffer(METADATA_TABLE), add_metadata_entry)):
        add(buf, None, None, _entry([change.SerializeToString()], 0, 0))
        out = buf.flush()
        assert out.column("cause").to_pylist() == ["99"]
        assert json.loads(out.column("record_json")[0].as_py())["cause"] == 99
