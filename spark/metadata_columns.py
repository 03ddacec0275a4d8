"""MetadataColumns: metadata-log batches walked in C straight into Arrow column buffers.

spark/_metadata_columns.c parses each record's MetadataRecord and writes every column of
columns.METADATA_TABLE (record_json included) into growing buffers, following a plan made here once from
the protobuf descriptors: per message type, per field, its type and JSON key (what
metadata_json.message_json writes, in C), and per record kind its typed columns (metadata_rows.TYPED).
The C walk takes only the canonical encoding protobuf's serializer writes; a batch it declines (or every
batch, without the extension) is read by the Python path, metadata_rows.add_metadata_entry, into a run of
its own, so rows stay in read order. tests/spark/test_metadata_columns.py holds both paths to the same
rows, and to json_format's JSON, over generated records of every kind.
"""

from __future__ import annotations

import importlib
from json.encoder import encode_basestring_ascii
from types import ModuleType

import pyarrow as pa
from google.protobuf.descriptor import Descriptor, FieldDescriptor

from kanal.spark.columns import METADATA_TABLE, TIMESTAMP, Table
from kanal.spark.log_columns import ColumnRuns
from kanal.spark.log_rows import OFFSET_END, RowBuffer
from kanal.spark.metadata_json import plan_for
from kanal.spark.metadata_rows import (
    RESOURCE_TYPE_OTHER,
    RESOURCE_TYPES,
    TYPED,
    TYPED_COLUMNS,
    add_metadata_entry,
)
from kanal.spark.segment_reader import StoredEntry
from kanal.v1 import codecs, metadata_pb2
from kanal.v1.batch import scan_batch

_native: ModuleType | None
try:
    _native = importlib.import_module("kanal.spark._metadata_columns")
except ImportError as exc:  # built optionally (setup.py)
    _native = None
    NATIVE_IMPORT_ERROR: str | None = str(exc)
else:
    NATIVE_IMPORT_ERROR = None
NATIVE = _native is not None

_INT64_MAX = (1 << 63) - 1
_NAMES_MAX = 64  # enum numbers the C plan names (0..63); an enum with others is left to the Python path
# The C walk's columns before the typed ones, in its order.
_LEADING = ("offset", "batch_offset", "controller_epoch", "time", "record_type", "principal", "request_id",
            "record", "record_json")
_TYPED_ORDER = tuple(c.name for c in METADATA_TABLE.columns if c.name in TYPED_COLUMNS)
_TYPES = {
    FieldDescriptor.TYPE_INT32: "T_INT32", FieldDescriptor.TYPE_INT64: "T_INT64",
    FieldDescriptor.TYPE_BOOL: "T_BOOL", FieldDescriptor.TYPE_ENUM: "T_ENUM",
    FieldDescriptor.TYPE_STRING: "T_STRING", FieldDescriptor.TYPE_BYTES: "T_BYTES",
    FieldDescriptor.TYPE_MESSAGE: "T_MESSAGE", FieldDescriptor.TYPE_DOUBLE: "T_DOUBLE",
}
# A SCRAM credential's JSON leaves these out (metadata_rows.record_json).
_HIDDEN = {"kanal.v1.UserScramCredentialRecord": frozenset(("salt", "stored_key", "server_key"))}


def _names(enum, text) -> tuple | None:
    """Names by number 0..max as C wants them, or None when a number is outside what the plan holds."""
    numbers = [v.number for v in enum.values]
    if min(numbers) < 0 or max(numbers) >= _NAMES_MAX:
        return None
    out: list[bytes | None] = [None] * (max(numbers) + 1)
    for v in enum.values:
        out[v.number] = text(v.name).encode()
    return tuple(out)


class _Plans:
    """Message plans for the C walk, by index; None for a type the C walk must decline."""

    def __init__(self, native: ModuleType) -> None:
        self.native = native
        self.index: dict[tuple[Descriptor, bool], int] = {}
        self.plans: list[list | None] = []

    def of(self, descriptor: Descriptor, hide: bool = False) -> int:
        key = (descriptor, hide)
        if key in self.index:
            return self.index[key]
        at = self.index[key] = len(self.plans)
        self.plans.append(None)
        self.plans[at] = self._fields(descriptor, hide)
        return at

    def _fields(self, descriptor: Descriptor, hide: bool) -> list | None:
        if plan_for(descriptor) is None:  # what json_format does itself (metadata_json.py)
            return None
        hidden = _HIDDEN.get(descriptor.full_name, frozenset()) if hide else frozenset()
        out = []
        for f in descriptor.fields:
            type_name = _TYPES.get(f.type)
            if type_name is None or not 0 < f.number < 32:
                return None
            if f.containing_oneof is not None and len(f.containing_oneof.fields) > 1:
                return None  # a real oneof: the last member set wins, which a canonical walk cannot see
            if f.is_repeated and f.type == FieldDescriptor.TYPE_DOUBLE:
                return None
            names = None
            if f.type == FieldDescriptor.TYPE_ENUM:
                names = _names(f.enum_type, encode_basestring_ascii)
                if names is None:
                    return None
            nested = self.of(f.message_type) if f.type == FieldDescriptor.TYPE_MESSAGE else -1
            key = (encode_basestring_ascii(f.name) + ": ").encode()
            out.append((f.number, getattr(self.native, type_name), int(f.is_repeated), int(f.has_presence),
                        int(f.name in hidden), nested, key, names))
        return out


def _slot_kind(native: ModuleType, arrow_type: pa.DataType) -> int:
    if arrow_type == pa.int32():
        return native.K_I32
    if arrow_type == pa.int64():
        return native.K_I64
    if arrow_type == pa.bool_():
        return native.K_BOOL
    if arrow_type == pa.string():
        return native.K_STR
    return native.K_LIST


def _spec(native: ModuleType, body: Descriptor, t) -> tuple:
    field = body.fields_by_name[t.field]
    aux_field, aux_value, names, fallback = 0, 0, None, None
    conv = {"value": "V_INT", "name": "V_NAME", "resource_type": "V_NAME", "topic_if": "V_TOPIC_IF",
            "repr": "V_DOUBLE_REPR", "list": "V_LIST", "msg_list": "V_MSG_LIST"}[t.conv]
    if t.conv == "value":
        by_type = {FieldDescriptor.TYPE_BOOL: "V_BOOL", FieldDescriptor.TYPE_STRING: "V_STR"}
        conv = by_type.get(field.type, conv)
    elif t.conv == "name":
        names = _names(field.enum_type, str)
    elif t.conv == "resource_type":
        top = max(RESOURCE_TYPES)
        named = {int(k): v for k, v in RESOURCE_TYPES.items()}
        names = tuple(named[n].encode() if n in named else None for n in range(top + 1))
        fallback = RESOURCE_TYPE_OTHER.encode()
    elif t.conv == "topic_if":
        aux_field, aux_value = body.fields_by_name[t.aux].number, metadata_pb2.CONFIG_RESOURCE_TOPIC
    elif t.conv == "msg_list":
        aux_field = field.message_type.fields_by_name[t.aux].number
    return (_TYPED_ORDER.index(t.column), getattr(native, conv), field.number, int(t.optional), aux_field,
            aux_value, names, fallback)


def native_metadata_columns(native: ModuleType):
    """A C MetadataColumns with the plan of kanal.v1.metadata's types."""
    plans = _Plans(native)
    kinds = {}
    for f in metadata_pb2.MetadataRecord.DESCRIPTOR.oneofs_by_name["record"].fields:
        body = f.message_type
        plan = plans.of(body, hide=True)
        specs = [_spec(native, body, t) for t in TYPED.get(f.name, ())]
        kinds[f.number] = (f.name.encode(), plan, specs)
    by_name = {c.name: c for c in METADATA_TABLE.columns}
    slot_kinds = tuple(_slot_kind(native, by_name[n].arrow_type) for n in _TYPED_ORDER)
    return native.MetadataColumns(plans.plans, kinds, slot_kinds)


def _array(arrow_type: pa.DataType, rows: int, buffers: tuple) -> pa.Array:
    validity, a, b = (None if x is None else pa.py_buffer(x) for x in buffers)
    if pa.types.is_list(arrow_type):
        values = pa.Array.from_buffers(pa.int32(), len(buffers[2]) // 4, [None, b])
        return pa.Array.from_buffers(arrow_type, rows, [validity, a], children=[values])
    if b is not None:
        return pa.Array.from_buffers(arrow_type, rows, [validity, a, b])
    if arrow_type == TIMESTAMP:
        return pa.Array.from_buffers(pa.int64(), rows, [validity, a]).view(TIMESTAMP)
    return pa.Array.from_buffers(arrow_type, rows, [validity, a])


class MetadataColumnBuffer(ColumnRuns):
    """RowBuffer's interface over the C columns; declined batches go through the Python path."""

    def __init__(self, table: Table, native: ModuleType) -> None:
        super().__init__(table)
        self.columns = native_metadata_columns(native)
        self.order = {name: i for i, name in enumerate(_LEADING + _TYPED_ORDER)}

    def add_python(self, entry: StoredEntry, lo: int, hi: int) -> None:
        """The batch through metadata_rows (a run of its own, after the C rows before it)."""
        rows = RowBuffer(self.table)
        add_metadata_entry(rows, None, None, entry, lo, hi)
        self._end_run()
        batch = rows.flush()
        if batch is not None:
            self.done.append(batch)

    def _records_batch(self) -> pa.RecordBatch:
        rows, buffers = self.columns.take()
        arrays = []
        for column in self.table.columns:
            at = self.order.get(column.name)
            if at is None:  # _corrupt, _lost: null for a record
                arrays.append(pa.nulls(rows, column.arrow_type))
            else:
                arrays.append(_array(column.arrow_type, rows, buffers[at]))
        return pa.RecordBatch.from_arrays(arrays, schema=self.table.arrow_schema())


def add_metadata_columns(buf: MetadataColumnBuffer, topic: str | None, partition: int | None,
                         entry: StoredEntry, lo: int = 0, hi: int = OFFSET_END) -> None:
    """Append the records of one intact metadata-log batch with offsets in [lo, hi): in C, or through the
    Python path when the C walk declines the batch (KanalError from there when it does not decode)."""
    header = entry.header if entry.header is not None else scan_batch(entry.batch)
    payload: bytes | memoryview = entry.batch[header.records_start:header.records_end]
    if header.codec:
        payload = codecs.decompress(header.codec, bytes(payload))
    added = buf.columns.add(payload, header.record_count, entry.base_offset, lo, min(hi, _INT64_MAX),
                            entry.leader_epoch)
    if added is None:
        buf.add_python(entry, lo, hi)


def new_metadata_buffer(table: Table, native: bool = NATIVE):
    """The buffer and add function for the metadata table: the C columns when built, else the Python rows."""
    if native and _native is not None:
        return MetadataColumnBuffer(table, _native), add_metadata_columns
    return RowBuffer(table), add_metadata_entry
