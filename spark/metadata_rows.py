"""MetadataRows: metadata-log batches turned into one row per MetadataRecord (column lists for Arrow).

The log's format is kanal.metadata.log_codec's: one RecordBatch per
MetadataBatch, one Record per MetadataRecord with the serialized record as its value,
partition_leader_epoch = the controller epoch. The decoding is the project's (parse_batch,
decode_records, the generated MetadataRecord); the replay later rebuilds each MetadataBatch from the
`record` column and applies it with kanal.metadata.apply_batch.

Typed columns hold the fields most audits filter on; `record_json` holds the whole record (protobuf's JSON
mapping, written by metadata_json.py), so nothing a record says is lost to a column that was not foreseen.

This is the Python path: metadata_columns.py walks batches in C straight into Arrow buffers when the
extension is built, and hands here the batches it declines. Columns are built a column at a time: a
batch's records are grouped by kind (most batches are one kind), and each typed column is one `map` of that
kind's getter over its records (`TYPED`), never a dict per record.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from operator import attrgetter
from typing import Any

from google.protobuf.internal.enum_type_wrapper import EnumTypeWrapper
from google.protobuf.message import DecodeError

from kanal.spark.log_rows import OFFSET_END, RowBuffer, clipped_records
from kanal.spark.metadata_json import message_json
from kanal.spark.segment_reader import StoredEntry
from kanal.v1 import metadata_pb2
from kanal.v1.error import ErrorCode, KanalError
from kanal.v1.wire_enum import enum_name

Getter = Callable[[Any], object]

RESOURCE_TYPES = {
    metadata_pb2.CONFIG_RESOURCE_TOPIC: "topic",
    metadata_pb2.CONFIG_RESOURCE_BROKER: "broker",
}
RESOURCE_TYPE_OTHER = "unspecified"


@dataclass(frozen=True, slots=True)
class Typed:
    """How one typed column is read from a record's body (both paths build from these: the getters below,
    and metadata_columns.py's plan for the C walk).

    conv: "value" (the field as it is), "name" (an enum's value name), "resource_type" (a config resource
    type as "topic", "broker" or "unspecified"), "topic_if" (the field when the body's `aux` field is
    CONFIG_RESOURCE_TOPIC, else null), "repr" (repr() of a double), "list" (a repeated int32 as a list),
    "msg_list" (the repeated int32 field `aux` of a message field). optional: null when the field is not
    set (HasField), else its default."""

    column: str
    field: str
    conv: str = "value"
    optional: bool = False
    aux: str = ""


_BROKER = (Typed("broker_id", "broker_id"), Typed("broker_epoch", "broker_epoch"))
_PARTITION = (Typed("topic_id", "topic_id"), Typed("partition", "partition_id"))
_LEADER_ISR_IF_SET = (Typed("leader", "leader", optional=True),
                      Typed("isr", "isr", "msg_list", optional=True, aux="broker_ids"))
# Per record kind: its typed columns (the others are null).
TYPED: dict[str, tuple[Typed, ...]] = {
    "register_broker": (*_BROKER, Typed("fenced", "fenced")),
    "broker_registration_change": (*_BROKER, Typed("fenced", "fenced"), Typed("reason", "reason")),
    "unregister_broker": _BROKER,
    "topic": (Typed("topic", "name"), Typed("topic_id", "topic_id")),
    "partition": (*_PARTITION, Typed("leader", "leader"), Typed("isr", "isr", "list"),
                  Typed("replicas", "replicas", "list")),
    "partition_change": (*_PARTITION, Typed("cause", "cause", "name"), Typed("reason", "reason"),
                         *_LEADER_ISR_IF_SET),
    "remove_topic": (Typed("topic_id", "topic_id"),),
    "config": (Typed("config_resource_type", "resource_type", "resource_type"),
               Typed("config_resource", "resource_name"),
               Typed("topic", "resource_name", "topic_if", aux="resource_type"),
               Typed("config_key", "key"), Typed("config_value", "value", optional=True)),
    "client_quota": (Typed("config_resource_type", "entity_type"), Typed("config_resource", "entity_name"),
                     Typed("config_key", "key"), Typed("config_value", "value", "repr", optional=True)),
    "producer_ids": _BROKER,
    "partition_reassignment": (*_PARTITION, Typed("replicas", "replicas", "list"), Typed("reason", "reason"),
                               *_LEADER_ISR_IF_SET),
}
TYPED_COLUMNS = frozenset(t.column for specs in TYPED.values() for t in specs)


def _getter(kind: str, t: Typed) -> Getter:
    get = attrgetter(t.field)
    if t.conv == "name":
        body = metadata_pb2.MetadataRecord.DESCRIPTOR.fields_by_name[kind].message_type
        # An unknown number (a newer writer's: proto3 enums are open) is named by the number, as protobuf's
        # JSON form does, instead of failing the read.
        enum = EnumTypeWrapper(body.fields_by_name[t.field].enum_type)
        out: Getter = lambda b: enum_name(enum, get(b))
    elif t.conv == "resource_type":
        out = lambda b: RESOURCE_TYPES.get(get(b), RESOURCE_TYPE_OTHER)
    elif t.conv == "topic_if":
        is_topic = attrgetter(t.aux)
        out = lambda b: get(b) if is_topic(b) == metadata_pb2.CONFIG_RESOURCE_TOPIC else None
    elif t.conv == "repr":
        out = lambda b: repr(get(b))
    elif t.conv == "list":
        out = lambda b: list(get(b))
    elif t.conv == "msg_list":
        inner = attrgetter(f"{t.field}.{t.aux}")
        out = lambda b: list(inner(b))
    else:
        out = get
    if t.optional:
        then, field = out, t.field
        return lambda b: then(b) if b.HasField(field) else None
    return out


_TYPED_GETTERS: dict[str, dict[str, Getter]] = {
    kind: {t.column: _getter(kind, t) for t in specs} for kind, specs in TYPED.items()
}


def typed_fields(record: metadata_pb2.MetadataRecord, kind: str | None) -> dict[str, object]:
    """The typed columns of one record (absent keys are null); the reader fills whole columns instead."""
    getters = _TYPED_GETTERS.get(kind) if kind is not None else None
    if not getters:
        return {}
    body = getattr(record, kind)  # type: ignore[arg-type]
    return {name: get(body) for name, get in getters.items()}


def _typed_getter(column: str) -> Callable[[str | None], Getter | None]:
    """Per kind, the getter of `column` (None where that kind has no such column)."""
    return lambda kind: _TYPED_GETTERS.get(kind, {}).get(column) if kind is not None else None


def _json_body(body: Any) -> str:
    return message_json(body)


def _scram_json(body: metadata_pb2.UserScramCredentialRecord) -> str:
    # The audit shows who set whose credential, not the keys a password is checked against.
    return message_json(metadata_pb2.UserScramCredentialRecord(name=body.name, mechanism=body.mechanism,
                                                               iterations=body.iterations))


def _json_getter(kind: str | None) -> Getter | None:
    if kind is None:
        return None
    return _scram_json if kind == "user_scram_credential" else _json_body


def record_json(record: metadata_pb2.MetadataRecord, kind: str | None) -> str:
    """The record's body as JSON (json_format's text; a SCRAM credential without its salt and keys)."""
    get = _json_getter(kind)
    return "{}" if get is None or kind is None else str(get(getattr(record, kind)))


class _KindGroups:
    """A batch's records grouped by kind, in order within each kind, so a column is filled by one `map` per
    kind (a batch is usually one kind) and not by a call per record and column."""

    def __init__(self, records: list[metadata_pb2.MetadataRecord]) -> None:
        self.n = len(records)
        self.kinds = [r.WhichOneof("record") for r in records]
        positions: dict[str | None, list[int]] = {}
        for i, kind in enumerate(self.kinds):
            positions.setdefault(kind, []).append(i)
        self.groups = [(kind, at, [getattr(records[i], kind) for i in at] if kind is not None else [])
                       for kind, at in positions.items()]

    def column(self, getter_of: Callable[[str | None], Getter | None], absent: object = None) -> list:
        """One value per record: `getter_of(kind)` applied to the body, `absent` where it gives no getter."""
        if len(self.groups) == 1:
            kind, _at, bodies = self.groups[0]
            get = getter_of(kind)
            return [absent] * self.n if get is None else list(map(get, bodies))
        col = [absent] * self.n
        for kind, at, bodies in self.groups:
            get = getter_of(kind)
            if get is not None:
                for i, value in zip(at, map(get, bodies)):
                    col[i] = value
        return col


def add_metadata_entry(
    buf: RowBuffer,
    topic: str | None,
    partition: int | None,
    entry: StoredEntry,
    lo: int = 0,
    hi: int = OFFSET_END,
) -> None:
    """Append one row per record of an intact metadata-log batch with an offset in [lo, hi) (topic and
    partition: the log's, not columns of this table)."""
    _batch, raw = clipped_records(entry, lo, hi)
    values = [r.value for r in raw]
    try:
        records = [metadata_pb2.MetadataRecord.FromString(v) for v in values]
    except DecodeError as exc:
        raise KanalError(ErrorCode.CORRUPT_MESSAGE, f"a metadata record does not parse: {exc}") from None
    groups = _KindGroups(records)
    n = groups.n
    v = buf.values
    for name in buf.names:
        col = v[name]
        if name == "offset":
            col.extend([entry.base_offset + r.offset_delta for r in raw])
        elif name == "batch_offset":
            col.extend([entry.base_offset] * n)
        elif name == "controller_epoch":
            col.extend([entry.leader_epoch] * n)
        elif name == "time":
            col.extend([r.time_ms for r in records])
        elif name == "record_type":
            col.extend(groups.kinds)
        elif name == "principal":
            col.extend([r.principal for r in records])
        elif name == "request_id":
            col.extend([r.request_id for r in records])
        elif name == "record_json":
            col.extend(groups.column(_json_getter, "{}"))
        elif name == "record":
            col.extend(values)
        elif name in ("_corrupt", "_lost"):
            col.extend([None] * n)
        elif name in TYPED_COLUMNS:
            col.extend(groups.column(_typed_getter(name)))
        else:
            raise ValueError(f"kanal-metadata has no column {name!r}")
    buf.rows += n
