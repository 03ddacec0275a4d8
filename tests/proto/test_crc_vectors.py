"""The batch test vectors for implementers in other languages (proto/kanal/v1/crc_vectors.json).

Each vector gives its inputs (producer fields, codec, records) and the exact bytes kanal writes for them:
the serialized RecordList, the `records` payload, the 44-byte CRC header, the CRC, the producer batch, the
broker suffix, the entry CRC and the log entry. These tests hold kanal's encoder and decoder
(kanal.v1.batch) byte-equal to the file, and check the file against independent references (protobuf's
own serialization, crc32c over the documented inputs), so neither the code nor the file can drift.

Regenerate after a deliberate format change (and say so in the commit: every client must follow):
    .venv/bin/python tests/proto/test_crc_vectors.py --write
A compressed payload is kept from the file when it exists (gzip output is not canonical across zlib
versions); only a new vector compresses afresh.
"""

from __future__ import annotations

import importlib.resources
import json
import struct
import sys
from pathlib import Path

import crc32c
import pytest

from kanal.v1 import records_pb2
from kanal.v1.batch import (
    CRC_HEADER,
    NewRecord,
    broker_suffix,
    decode_records,
    encode_record_list,
    entry_crc,
    frame_batch_parts,
    frame_entry,
    iter_entries,
    parse_batch,
    scan_batch,
    with_broker_suffix,
)
from kanal.v1.codecs import compress, decompress

from .test_batch import protobuf_record_list

VECTORS_PATH = Path(__file__).resolve().parents[2] / "proto/kanal/v1/crc_vectors.json"

# The inputs of the vectors; everything else in the file is derived from them by kanal's encoder.
_T0 = 1_700_000_000_000
INPUTS = [
    {
        "name": "plain",
        "description": "Not idempotent (producer id, epoch and sequence 0, so left out), uncompressed. "
        "Record 0: key and one header; record 1: null key (field absent), a later timestamp; "
        "record 2: an earlier timestamp than the first (negative zigzag delta), an empty but "
        "present value, a header whose value is null.",
        "producer_id": 0,
        "producer_epoch": 0,
        "base_sequence": 0,
        "codec": 0,
        "records": [
            {
                "key_hex": b"user-1".hex(),
                "value_hex": b"hello".hex(),
                "timestamp_ms": _T0,
                "headers": [{"key": "trace", "value_hex": b"t-1".hex()}],
            },
            {"key_hex": None, "value_hex": b"world".hex(), "timestamp_ms": _T0 + 5, "headers": []},
            {
                "key_hex": b"user-2".hex(),
                "value_hex": "",
                "timestamp_ms": _T0 - 3,
                "headers": [{"key": "h", "value_hex": None}],
            },
        ],
        "stored": {"base_offset": 1000, "partition_leader_epoch": 3},
    },
    {
        "name": "idempotent",
        "description": "An idempotent producer's batch: producer id 4242, epoch 3, base sequence 17 (its "
        "records take sequences 17, 18). Uncompressed.",
        "producer_id": 4242,
        "producer_epoch": 3,
        "base_sequence": 17,
        "codec": 0,
        "records": [
            {
                "key_hex": b"order-7".hex(),
                "value_hex": b'{"qty":1}'.hex(),
                "timestamp_ms": _T0 + 100,
                "headers": [],
            },
            {
                "key_hex": b"order-8".hex(),
                "value_hex": b'{"qty":2}'.hex(),
                "timestamp_ms": _T0 + 101,
                "headers": [],
            },
        ],
        "stored": {"base_offset": 5, "partition_leader_epoch": 0},
    },
    {
        "name": "gzip",
        "description": "COMPRESSION_GZIP: `records` is the gzip stream of the serialized RecordList, and "
        "the CRC covers the compressed bytes. Not idempotent.",
        "producer_id": 0,
        "producer_epoch": 0,
        "base_sequence": 0,
        "codec": records_pb2.COMPRESSION_GZIP,
        "records": [
            {
                "key_hex": b"sensor-%d" % (i % 2),
                "value_hex": b"temperature=21.%d" % i,
                "timestamp_ms": _T0 + i,
                "headers": [],
            }
            for i in range(4)
        ],
        "stored": {"base_offset": 123456789012, "partition_leader_epoch": 7},
    },
    {
        "name": "one-record",
        "description": "A single record with no key, no headers and the same timestamp as the batch: "
        "last_offset_delta is 0, so field 12 is left out of the producer bytes (the broker suffix "
        "restates it as 0), and the record's offset_delta and timestamp delta are left out too.",
        "producer_id": 0,
        "producer_epoch": 0,
        "base_sequence": 0,
        "codec": 0,
        "records": [{"key_hex": None, "value_hex": b"x".hex(), "timestamp_ms": _T0, "headers": []}],
        "stored": {"base_offset": 0, "partition_leader_epoch": 0},
    },
]
for _spec in INPUTS:  # the gzip records were written as bytes for brevity
    for _rec in _spec["records"]:
        if isinstance(_rec["key_hex"], bytes):
            _rec["key_hex"], _rec["value_hex"] = _rec["key_hex"].hex(), _rec["value_hex"].hex()

ENCODING_RULES = [
    ("RecordBatch, RecordList, Record and RecordHeader are ordinary protobuf messages (records.proto). "
    "The vectors hold the canonical encoding kanal's writers produce: fields in field-number order, "
    "each field once, and a scalar field whose value is zero (0, COMPRESSION_NONE, empty bytes or "
    "string) left out, as proto3 writes it. Readers accept any valid encoding and the broker stores a "
    "producer's bytes as they came, so only the CRC rules are binding; a writer that follows these "
    "rules can compare its bytes with the vectors."),
    ("Fields with presence (`optional`: Record.key, Record.value, RecordHeader.value) are written "
    "whenever they are set, even when empty (tag and a zero length): absent means null, present and "
    "empty means empty. Repeated fields (RecordList.records, Record.headers) are written element by "
    "element, in order."),
    ("Wire types: int32/int64/uint32/enum as varints (a negative int32 or int64 as the 10-byte varint "
    "of its 64-bit two's complement), sint64 (Record.timestamp_delta_ms) as a zigzag varint, "
    "fixed64/fixed32/sfixed32 little-endian, bytes/string/messages as a varint length then the bytes."),
    ("Record fields: offset_delta = the record's index in the batch (so the first record leaves it "
    "out); timestamp_delta_ms = its timestamp - first_timestamp_ms. Batch fields: first_timestamp_ms = "
    "the first record's timestamp, max_timestamp_ms = the largest, record_count = the number of "
    "records, last_offset_delta = record_count - 1 (left out of a one-record batch, being 0)."),
    ("A producer leaves base_offset (field 1) and partition_leader_epoch (field 2) out. The leader "
    "appends the 19-byte broker suffix 0x09 <base_offset u64 LE> 0x15 <partition_leader_epoch i32 LE> "
    "0x65 <last_offset_delta u32 LE> after the producer bytes without re-encoding them: the stored "
    "batch."),
    ("When a field occurs more than once, the last occurrence wins (protobuf's rule for scalar and "
    "bytes fields). The stored batch relies on it: the suffix restates fields 1, 2 and 12 after the "
    "producer's bytes. A reader that walks the bytes by hand must keep the last value of each field and "
    "compute both CRCs from those values."),
    ("RecordBatch.crc = CRC-32C (Castagnoli) of crc_header_hex followed by records_payload_hex. "
    "crc_header_hex is 44 bytes, big-endian: producer_id i64, producer_epoch i32, base_sequence i32, "
    "first_timestamp_ms i64, max_timestamp_ms i64, record_count i32, last_offset_delta i32, codec i32 "
    "(values as the batch carries them, zeros included even where the field is left out of the protobuf "
    "bytes). records_payload_hex is the value of field 10 as sent: compressed when codec is set. The "
    "crc field is not part of its own input, nor are base_offset and partition_leader_epoch. It is "
    "written as field 11 (tag 0x5d), 4 bytes little-endian, between `records` (field 10) and "
    "last_offset_delta (field 12); a CRC that happens to be 0 is left out like any zero field, and a "
    "reader that finds no crc field reads 0."),
    ("Log entry (segment files, FetchResponse.records): <N u32 BE> <entry CRC u32 BE> <N bytes: the "
    "stored batch>. Entry CRC = CRC-32C of the stored batch with the payload of field 10 left out: the "
    "bytes before the payload (field 10's tag and length included) followed by the bytes after it "
    "(entry_crc_input_hex)."),
    ("Compressed payloads are not canonical: another gzip writer may produce other bytes for the same "
    "RecordList. The CRC covers the bytes sent, whatever they are. The gzip vector gives the exact "
    "payload kanal wrote: a reader checks its decompression and CRC with it, a writer checks its "
    "framing by framing that payload. gzip is an RFC 1952 stream (zlib's default level 6 here)."),
]

CRC32C = {
    "name": "CRC-32C (Castagnoli), as in Kafka, iSCSI and ext4",
    "polynomial": "0x1EDC6F41 (reflected: 0x82F63B78)",
    "init": "0xFFFFFFFF",
    "reflect_in_out": True,
    "xor_out": "0xFFFFFFFF",
    "check": {"input_hex": b"123456789".hex(), "crc": 0xE3069283},
}


def _records(spec: dict) -> list[NewRecord]:
    def opt(h):
        return None if h is None else bytes.fromhex(h)

    return [NewRecord(value=opt(r["value_hex"]), key=opt(r["key_hex"]), timestamp_ms=r["timestamp_ms"],
                      headers=[(h["key"], opt(h["value_hex"])) for h in r["headers"]])
            for r in spec["records"]]


def derive(spec: dict, payload: bytes | None = None) -> dict:
    """The vector for `spec` as kanal's encoder writes it. `payload`: the compressed records to frame (the
    file's, for a codec); None compresses afresh."""
    records = _records(spec)
    first_ts = records[0].timestamp_ms
    record_list = encode_record_list(records, first_ts)
    if payload is None:
        payload = compress(spec["codec"], record_list)
    fields = {
        "record_count": len(records),
        "last_offset_delta": len(records) - 1,
        "first_timestamp_ms": first_ts,
        "max_timestamp_ms": max(r.timestamp_ms for r in records),
        "codec": spec["codec"],
        "producer_id": spec["producer_id"],
        "producer_epoch": spec["producer_epoch"],
        "base_sequence": spec["base_sequence"],
    }
    crc_header = CRC_HEADER.pack(
        fields["producer_id"],
        fields["producer_epoch"],
        fields["base_sequence"],
        fields["first_timestamp_ms"],
        fields["max_timestamp_ms"],
        fields["record_count"],
        fields["last_offset_delta"],
        fields["codec"],
    )
    batch = b"".join(frame_batch_parts(payload, **fields))
    stored_fields = spec["stored"]
    suffix = broker_suffix(stored_fields["base_offset"], stored_fields["partition_leader_epoch"],
                           fields["last_offset_delta"])
    stored = batch + suffix
    header = scan_batch(stored)
    entry = frame_entry(stored)
    crc = crc32c.crc32c(crc_header + payload)
    entry_value = entry_crc(header, [stored])
    return {
        **spec,
        "batch_fields": {k: fields[k] for k in ("first_timestamp_ms", "max_timestamp_ms", "record_count",
                                                "last_offset_delta")},
        "record_list_hex": record_list.hex(),
        "records_payload_hex": payload.hex(),
        "crc_header_hex": crc_header.hex(),
        "crc": crc,
        "crc_hex": f"0x{crc:08X}",
        "batch_hex": batch.hex(),
        "stored": {
            **stored_fields,
            "broker_suffix_hex": suffix.hex(),
            "entry_crc_input_hex": (stored[: header.records_start] + stored[header.records_end :]).hex(),
            "entry_crc": entry_value,
            "entry_crc_hex": f"0x{entry_value:08X}",
            "log_entry_hex": entry.hex(),
        },
    }


def build_file(existing: dict | None) -> dict:
    old = {v["name"]: v for v in (existing or {}).get("vectors", [])}
    vectors = []
    for spec in INPUTS:
        kept = old.get(spec["name"])
        payload = bytes.fromhex(kept["records_payload_hex"]) if kept and spec["codec"] else None
        vectors.append(derive(spec, payload))
    return {
        "about": "RecordBatch test vectors: the exact bytes kanal writes for the inputs of each vector, the "
                 "CRC-32C values and the bytes each covers. Checked against kanal's encoder by "
                 "tests/proto/test_crc_vectors.py; the rules are in records.proto.",
        "crc32c": CRC32C,
        "encoding_rules": ENCODING_RULES,
        "vectors": vectors,
    }


def load() -> dict:
    return json.loads(VECTORS_PATH.read_text())


FILE = load() if VECTORS_PATH.exists() else {"vectors": []}
BY_NAME = {v["name"]: v for v in FILE["vectors"]}


def test_the_file_is_what_kanals_encoder_writes():
    """Every derived field (bytes, CRCs, rules) equals what the code produces from the inputs."""
    assert FILE == build_file(FILE), "crc_vectors.json is stale: run this module with --write and review"


def test_every_input_has_a_vector_and_the_file_covers_the_required_cases():
    assert [v["name"] for v in FILE["vectors"]] == [s["name"] for s in INPUTS]
    assert any(v["codec"] == records_pb2.COMPRESSION_GZIP for v in FILE["vectors"])
    assert any(v["producer_id"] > 0 for v in FILE["vectors"])


def test_the_file_ships_as_package_data():
    shipped = importlib.resources.files("kanal.v1") / "crc_vectors.json"
    assert json.loads(shipped.read_text()) == FILE


def test_crc32c_check_value():
    check = FILE["crc32c"]["check"]
    assert crc32c.crc32c(bytes.fromhex(check["input_hex"])) == check["crc"] == 0xE3069283


@pytest.mark.parametrize("name", [s["name"] for s in INPUTS])
def test_batch_bytes_equal_protobufs_own_serialization(name):
    """An independent writer: protobuf's SerializeToString of the same fields gives the vector's bytes, so
    the encoding rules in the file are protobuf's canonical ones."""
    v = BY_NAME[name]
    expected = records_pb2.RecordBatch(
        producer_id=v["producer_id"],
        producer_epoch=v["producer_epoch"],
        base_sequence=v["base_sequence"],
        first_timestamp_ms=v["batch_fields"]["first_timestamp_ms"],
        max_timestamp_ms=v["batch_fields"]["max_timestamp_ms"],
        record_count=v["batch_fields"]["record_count"],
        codec=v["codec"],
        records=bytes.fromhex(v["records_payload_hex"]),
        crc=v["crc"],
        last_offset_delta=v["batch_fields"]["last_offset_delta"],
    )
    assert expected.SerializeToString() == bytes.fromhex(v["batch_hex"])
    record_list = protobuf_record_list(_records(v), v["batch_fields"]["first_timestamp_ms"])
    assert record_list.SerializeToString() == bytes.fromhex(v["record_list_hex"])


@pytest.mark.parametrize("name", [s["name"] for s in INPUTS])
def test_crcs_cover_the_documented_bytes(name):
    v = BY_NAME[name]
    f = v["batch_fields"]
    header = struct.pack(
        ">qiiqqiii",
        v["producer_id"],
        v["producer_epoch"],
        v["base_sequence"],
        f["first_timestamp_ms"],
        f["max_timestamp_ms"],
        f["record_count"],
        f["last_offset_delta"],
        v["codec"],
    )
    assert len(header) == 44 and header.hex() == v["crc_header_hex"]
    assert crc32c.crc32c(header + bytes.fromhex(v["records_payload_hex"])) == v["crc"]
    entry = bytes.fromhex(v["stored"]["log_entry_hex"])
    length, crc = struct.unpack_from(">II", entry)
    assert length == len(entry) - 8 and crc == v["stored"]["entry_crc"]
    assert crc32c.crc32c(bytes.fromhex(v["stored"]["entry_crc_input_hex"])) == crc


@pytest.mark.parametrize("name", [s["name"] for s in INPUTS])
def test_kanal_reads_the_vectors_back(name):
    """The decoder side: the stored entry passes both CRC checks and decodes to the inputs."""
    v = BY_NAME[name]
    batch_bytes = bytes.fromhex(v["batch_hex"])
    if not v["codec"]:  # uncompressed: the producer's own path writes exactly these bytes
        from kanal.v1.batch import build_batch

        assert (
            build_batch(
                _records(v),
                codec=v["codec"],
                producer_id=v["producer_id"],
                producer_epoch=v["producer_epoch"],
                base_sequence=v["base_sequence"],
            )
            == batch_bytes
        )
    assert decompress(v["codec"], bytes.fromhex(v["records_payload_hex"])) == bytes.fromhex(
        v["record_list_hex"]
    )
    stored = with_broker_suffix(
        batch_bytes, v["stored"]["base_offset"], v["stored"]["partition_leader_epoch"]
    )
    assert stored == batch_bytes + bytes.fromhex(v["stored"]["broker_suffix_hex"])
    (entry,) = iter_entries(bytes.fromhex(v["stored"]["log_entry_hex"]), verify_crc=True)
    assert bytes(entry.batch) == stored
    parsed = parse_batch(entry.batch)
    assert (parsed.base_offset, parsed.partition_leader_epoch) == (v["stored"]["base_offset"],
                                                                   v["stored"]["partition_leader_epoch"])
    got = [
        (
            r.key if r.HasField("key") else None,
            r.value if r.HasField("value") else None,
            parsed.first_timestamp_ms + r.timestamp_delta_ms,
            [(h.key, h.value if h.HasField("value") else None) for h in r.headers],
        )
        for r in decode_records(parsed)
    ]
    assert got == [(r.key, r.value, r.timestamp_ms, list(r.headers)) for r in _records(v)]


def test_a_changed_byte_fails_the_check():
    """The comparison can fail: a vector with one byte changed is not what the encoder writes."""
    damaged = json.loads(json.dumps(FILE))
    hexed = damaged["vectors"][0]["batch_hex"]
    damaged["vectors"][0]["batch_hex"] = hexed[:-2] + f"{int(hexed[-2:], 16) ^ 1:02x}"
    assert damaged != build_file(damaged)


if __name__ == "__main__":
    if sys.argv[1:] != ["--write"]:
        sys.exit("usage: python tests/proto/test_crc_vectors.py --write")
    current = load() if VECTORS_PATH.exists() else None
    VECTORS_PATH.write_text(json.dumps(build_file(current), indent=2) + "\n")
    print(f"wrote {VECTORS_PATH}")
