"""Broker-side schema validation (issue 45): a topic's leader refuses records that do not name a schema
registered for the topic, as Confluent Server (`confluent.value.schema.validation`) and Redpanda
(`redpanda.value.schema.id.validation`) do and Apache Kafka does not.

The rule. With `value.schema.validation=true` on a topic (or as the cluster default), every record value
that is not null must start as the registry's clients frame it (kanal.schemas.framing: byte 0, then the
schema id as a 4-byte big-endian integer) with the id of a live version of subject `<topic>-value` (Kafka's
TopicNameStrategy, the serializers' default). `key.schema.validation=true`: the same for keys and
`<topic>-key`. What is checked is the id, not the payload: as in Confluent Server, no record is decoded.

- Null values and null keys pass (Confluent Server: a tombstone must stay possible on a compacted topic);
  an empty value is not null and is refused (it has no magic byte).
- "Registered under the subject" counts live versions only: an id whose only versions under the subject are
  soft-deleted is refused (the message says so). Soft-deleting a version is how a team retires a schema,
  and the serializers' own lookups (POST /subjects/{s}) no longer find it either. Confluent does not
  document its broker's choice; Redpanda counts soft-deleted versions too (`include_deleted::yes`). An id
  hard-deleted from the subject is refused like any id the subject never held.
- Transaction markers (control batches, written by the broker) and internal topics are never checked.
- A refused batch stores nothing (the leader checks it before Log.append) and is INVALID_RECORD, Kafka's
  code for Confluent Server's refusal, non-retriable; the message names the record (its index in the
  batch, from 0), the side (key or value) and why: no framing, an id no registry gives, an id the registry
  does not know, or one it knows but not under the subject.

Cost. Off (the default), a partition's leader holds `schema_validation = None` and a batch costs one
attribute test. On, the policy below is computed once per topic per metadata image (the set of allowed ids:
O(versions of the subject)), never per batch; a batch costs one scan of its (already decompressed and
walked) records for the key and value fields, a 5-byte look at each, and one set lookup per distinct id
(`scan_schema_ids` collects the distinct ids, so a batch of one schema costs one lookup).

The image a leader checks against may be older than the registration a producer just made (the broker
follows the metadata log; the registry answers once the record is committed). So a refusal for an id
(unknown, or not under the subject) says `may_be_stale`, and the shell (replica_manager.py, service.py)
checks once more after the broker's image has caught up with everything committed before the request
arrived (metadata_sync.py), as Redpanda re-reads its schemas topic before refusing. A refusal for framing
is final at once.

Two implementations of the scan give the same answer: `scan_schema_ids_python` here, the reference, and
`schema_ids` of the C extension kanal.broker._batch_walk when it loaded (batch_validation.NATIVE).

Pure: the image and bytes in, a policy, an answer or a SchemaRefusal out.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from types import ModuleType

from kanal.broker import batch_validation
from kanal.metadata.image import CLUSTER_DEFAULT_BROKER, MetadataImage, SchemaId
from kanal.metadata.topic_config import TOPIC_CONFIG_KEYS, read_stored_topic_config
from kanal.schemas.framing import HEADER_BYTES, MAGIC_BYTE, SCHEMA_ID_MAX
from kanal.v1.error import ErrorCode, KanalError
from kanal.v1.topic_name import INTERNAL_TOPICS


class Side(StrEnum):
    """Which part of a record a rule checks; its value is the TopicNameStrategy suffix."""

    KEY = "key"
    VALUE = "value"


# The RecordList field tags (records.proto: Record.key = 3, Record.value = 4, both length-delimited).
FIELD_TAG = {Side.KEY: 0x1A, Side.VALUE: 0x22}
CONFIG_KEY = {Side.KEY: "key.schema.validation", Side.VALUE: "value.schema.validation"}
_UINT32 = struct.Struct(">I")


def subject_of(topic: str, side: Side) -> str:
    """The subject of a topic's keys or values by TopicNameStrategy (Confluent's default)."""
    return f"{topic}-{side}"


@dataclass(frozen=True, slots=True)
class SubjectRule:
    """One side's rule: a non-null key or value must be framed with one of `ids`, the schemas of the live
    versions of `subject`. `deleted_ids`: ids only soft-deleted versions hold, named in a refusal."""

    side: Side
    subject: str
    ids: frozenset[int]
    deleted_ids: frozenset[int] = frozenset()

    def __repr__(self) -> str:
        return f"<SubjectRule {self.subject} ids={sorted(self.ids)}>"


@dataclass(frozen=True, slots=True)
class SchemaValidation:
    """What a topic's leader checks of each produced batch: one rule per side turned on. `registered` is the
    image's schemas, only read to word a refusal (the image is never changed once published)."""

    topic: str
    rules: tuple[SubjectRule, ...]
    registered: Mapping[SchemaId, object] = field(default_factory=dict, compare=False)

    def __repr__(self) -> str:
        return f"<SchemaValidation {self.topic} {' '.join(repr(r) for r in self.rules)}>"


def schema_validation_of(image: MetadataImage, topic: str) -> SchemaValidation | None:
    """The topic's policy in `image`; None when neither side is on (or the topic is internal). The keys are
    read from the topic and the cluster default only, never a broker's own defaults (topic_config_rules.py
    refuses them there): every broker that may lead the topic must refuse the same records."""
    if topic in INTERNAL_TOPICS:
        return None  # written by kanal itself; a cluster default of true does not reach them
    own = image.topics[topic].configs if topic in image.topics else {}
    cluster = image.broker_configs.get(CLUSTER_DEFAULT_BROKER, {})
    rules = []
    for side in (Side.KEY, Side.VALUE):
        key = CONFIG_KEY[side]
        text = own.get(key, cluster.get(key))
        on = read_stored_topic_config(key, text) if text is not None else TOPIC_CONFIG_KEYS[key].default
        if on:
            rules.append(_rule(image, side, subject_of(topic, side)))
    if not rules:
        return None
    return SchemaValidation(topic, tuple(rules), image.schemas)


def _rule(image: MetadataImage, side: Side, subject: str) -> SubjectRule:
    versions = image.subjects.get(subject, {}).values()
    live = frozenset(int(v.schema_id) for v in versions if not v.deleted)
    deleted = frozenset(int(v.schema_id) for v in versions if v.deleted) - live
    return SubjectRule(side, subject, live, deleted)


class SchemaRefusal(KanalError):
    """A batch refused by schema validation: INVALID_RECORD naming the record. `may_be_stale`: the refusal
    is about an id, which a newer image may know under the subject (module docstring); False for framing."""

    def __init__(self, message: str, *, record_index: int, may_be_stale: bool) -> None:
        super().__init__(ErrorCode.INVALID_RECORD, message)
        self.record_index = record_index
        self.may_be_stale = may_be_stale


# ---- the scan ----

# scan(record_list, field_tag) -> (index of the first record whose field is not null and not framed, else -1;
# {schema id: index of the first record naming it} over the records before that one).
SchemaIdScan = Callable[[bytes | memoryview | bytearray, int], tuple[int, dict[int, int]]]


def _varint(buf: bytes | memoryview, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, pos
        shift += 7


def scan_schema_ids_python(record_list: bytes | memoryview | bytearray, field_tag: int
                           ) -> tuple[int, dict[int, int]]:
    """The reference scan over a RecordList that batch_validation's walk accepted (so every varint and
    length is in bounds and only records.proto's fields occur). A field given twice counts as its last
    occurrence, as protobuf reads it. A field is framed when it has at least 5 bytes and byte 0 is 0."""
    buf = memoryview(record_list).cast("B") if not isinstance(record_list, bytes) else record_list
    end = len(buf)
    pos = index = 0
    ids: dict[int, int] = {}
    # Tags and lengths below 0x80 (nearly all) are read inline: a call per varint doubles the cost.
    while pos < end:
        tag, pos = _varint(buf, pos)  # the RecordList's 0x0a (the walk allows no other)
        length = buf[pos]
        length, pos = (length, pos + 1) if length < 0x80 else _varint(buf, pos)
        record_end = pos + length
        start = -1  # where the last occurrence of the field starts; -1: absent (null)
        size = 0
        while pos < record_end:
            tag = buf[pos]
            tag, pos = (tag, pos + 1) if tag < 0x80 else _varint(buf, pos)
            if tag & 7 == 0:  # a varint (offset_delta, timestamp_delta_ms): skipped
                while buf[pos] >= 0x80:
                    pos += 1
                pos += 1
                continue
            length = buf[pos]
            length, pos = (length, pos + 1) if length < 0x80 else _varint(buf, pos)
            if tag == field_tag:
                start, size = pos, length
            pos += length
        if start >= 0:
            if size < HEADER_BYTES or buf[start] != MAGIC_BYTE:
                return index, ids
            ids.setdefault(_UINT32.unpack_from(buf, start + 1)[0], index)
        index += 1
    return -1, ids


def _load_native() -> ModuleType | None:
    native = batch_validation.native
    return native if native is not None and hasattr(native, "schema_ids") else None


_native = _load_native()
scan_schema_ids: SchemaIdScan = _native.schema_ids if _native is not None else scan_schema_ids_python


# ---- the check ----

def check_schema_ids(record_list: bytes | memoryview | bytearray, policy: SchemaValidation,
                     scan: SchemaIdScan | None = None) -> None:
    """Raise SchemaRefusal for the first record (lowest index; at one index the key before the value) that
    breaks one of the policy's rules; return None when every record keeps them."""
    scan = scan or scan_schema_ids
    first: SchemaRefusal | None = None
    for rule in policy.rules:
        refusal = _first_refusal(rule, *scan(record_list, FIELD_TAG[rule.side]), policy)
        if refusal is not None and (first is None or refusal.record_index < first.record_index):
            first = refusal
    if first is not None:
        raise first


def _first_refusal(rule: SubjectRule, unframed_at: int, ids: dict[int, int],
                   policy: SchemaValidation) -> SchemaRefusal | None:
    """The refusal of the lowest record this rule refuses: the first unframed one, or an earlier one naming
    an id not allowed (`ids` holds only records before the unframed one)."""
    worst = -1
    worst_id = 0
    for schema_id, index in ids.items():
        if schema_id not in rule.ids and (worst < 0 or index < worst):
            worst, worst_id = index, schema_id
    if worst >= 0:
        return SchemaRefusal(_id_message(rule, worst, worst_id, policy), record_index=worst,
                             may_be_stale=0 < worst_id <= SCHEMA_ID_MAX)
    if unframed_at >= 0:
        return SchemaRefusal(
            f"{_where(rule, unframed_at)} does not start with the schema registry's framing (byte 0, then a "
            f"4-byte schema id): it was not written by a registry serializer",
            record_index=unframed_at, may_be_stale=False)
    return None


def _where(rule: SubjectRule, index: int) -> str:
    return f"schema validation ({CONFIG_KEY[rule.side]}=true): record {index} of the batch: its {rule.side}"


def _id_message(rule: SubjectRule, index: int, schema_id: int, policy: SchemaValidation) -> str:
    where = _where(rule, index)
    if not 0 < schema_id <= SCHEMA_ID_MAX:
        return f"{where} names schema id {schema_id}, which no registry gives (ids are 1..{SCHEMA_ID_MAX})"
    if SchemaId(schema_id) not in policy.registered:
        return f"{where} names schema id {schema_id}, which the schema registry does not know"
    if schema_id in rule.deleted_ids:
        return (f"{where} names schema id {schema_id}, which only soft-deleted versions of subject "
                f"{rule.subject!r} hold")
    return f"{where} names schema id {schema_id}, which is not registered under subject {rule.subject!r}"
