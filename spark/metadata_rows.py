"""MetadataRows: metadata-log batches turned into one row per MetadataRecord (column lists for Arrow).

The log's format is kanal.metadata.log_codec's: one RecordBatch per
MetadataBatch, one Record per MetadataRecord with the serialized record as its value,
partition_leader_epoch = the controller epoch. The decoding is the project's (parse_batch,
decode_records, the generated MetadataRecord); the replay later rebuilds each MetadataBatch from the
`record` column and applies it with kanal.metadata.apply_batch.

Typed columns hold the fields most audits filter on; `record_json` holds the whole record (protobuf's JSON
mapping), so nothing a record says is lost to a column that was not foreseen.
"""

from __future__ import annotations

from google.protobuf import json_format
from google.protobuf.message import DecodeError

from kanal.spark.log_rows import OFFSET_END, RowBuffer, clipped_records
from kanal.spark.segment_reader import StoredEntry
from kanal.v1 import metadata_pb2
from kanal.v1.error import ErrorCode, KanalError

_CAUSE_NAMES = metadata_pb2.PartitionChangeCause.Name
_RESOURCE_TYPES = {
    metadata_pb2.CONFIG_RESOURCE_TOPIC: "topic",
    metadata_pb2.CONFIG_RESOURCE_BROKER: "broker",
}
_TYPED = (
    "broker_id",
    "broker_epoch",
    "fenced",
    "topic",
    "topic_id",
    "partition",
    "leader",
    "isr",
    "replicas",
    "cause",
    "reason",
    "config_resource_type",
    "config_resource",
    "config_key",
    "config_value",
)


def typed_fields(record: metadata_pb2.MetadataRecord, kind: str | None) -> dict[str, object]:
    """The typed columns of one record (absent keys are null)."""
    if kind is None:
        return {}
    body = getattr(record, kind)
    if kind == "register_broker":
        return {"broker_id": body.broker_id, "broker_epoch": body.broker_epoch, "fenced": body.fenced}
    if kind == "broker_registration_change":
        return {"broker_id": body.broker_id, "broker_epoch": body.broker_epoch, "fenced": body.fenced,
                "reason": body.reason}
    if kind == "unregister_broker":
        return {"broker_id": body.broker_id, "broker_epoch": body.broker_epoch}
    if kind == "topic":
        return {"topic": body.name, "topic_id": body.topic_id}
    if kind == "partition":
        return {"topic_id": body.topic_id, "partition": body.partition_id, "leader": body.leader,
                "isr": list(body.isr), "replicas": list(body.replicas)}
    if kind == "partition_change":
        out: dict[str, object] = {"topic_id": body.topic_id, "partition": body.partition_id,
                                  "cause": _CAUSE_NAMES(body.cause), "reason": body.reason}
        if body.HasField("leader"):
            out["leader"] = body.leader
        if body.HasField("isr"):
            out["isr"] = list(body.isr.broker_ids)
        return out
    if kind == "remove_topic":
        return {"topic_id": body.topic_id}
    if kind == "config":
        resource_type = _RESOURCE_TYPES.get(body.resource_type, "unspecified")
        return {"config_resource_type": resource_type, "config_resource": body.resource_name,
                "topic": body.resource_name if resource_type == "topic" else None,
                "config_key": body.key, "config_value": body.value if body.HasField("value") else None}
    if kind == "client_quota":
        return {"config_resource_type": body.entity_type, "config_resource": body.entity_name,
                "config_key": body.key, "config_value": repr(body.value) if body.HasField("value") else None}
    if kind == "producer_ids":
        return {"broker_id": body.broker_id, "broker_epoch": body.broker_epoch}
    if kind == "partition_reassignment":
        out = {"topic_id": body.topic_id, "partition": body.partition_id, "replicas": list(body.replicas),
               "reason": body.reason}
        if body.HasField("leader"):
            out["leader"] = body.leader
        if body.HasField("isr"):
            out["isr"] = list(body.isr.broker_ids)
        return out
    return {}


def record_json(record: metadata_pb2.MetadataRecord, kind: str | None) -> str:
    if kind is None:
        return "{}"
    body = getattr(record, kind)
    if kind == "user_scram_credential":
        # The audit shows who set whose credential, not the keys a password is checked against.
        body = metadata_pb2.UserScramCredentialRecord(name=body.name, mechanism=body.mechanism,
                                                      iterations=body.iterations)
    return json_format.MessageToJson(body, indent=None, preserving_proto_field_name=True)


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
    kinds = [r.WhichOneof("record") for r in records]
    wanted = buf.names
    typed = [typed_fields(r, k) for r, k in zip(records, kinds)] if any(n in _TYPED for n in wanted) else None
    n = len(records)
    v = buf.values
    for name in wanted:
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
            col.extend(kinds)
        elif name == "principal":
            col.extend([r.principal for r in records])
        elif name == "request_id":
            col.extend([r.request_id for r in records])
        elif name == "record_json":
            col.extend([record_json(r, k) for r, k in zip(records, kinds)])
        elif name == "record":
            col.extend(values)
        elif name in ("_corrupt", "_lost"):
            col.extend([None] * n)
        elif name in _TYPED:
            col.extend([t.get(name) for t in typed])  # type: ignore[union-attr]
        else:
            raise ValueError(f"kanal-metadata has no column {name!r}")
    buf.rows += n
