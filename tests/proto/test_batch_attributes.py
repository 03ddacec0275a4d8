"""RecordBatch.attributes and transaction markers (records.proto, TRANSACTIONS): encoding, CRC coverage,
and the leader's rule 8 (control batches only from WriteTxnMarkers)."""

from __future__ import annotations

import pytest

from kanal.broker.batch_validation import validate_produced_batch
from kanal.v1 import records_pb2
from kanal.v1.batch import (
    ATTR_CONTROL,
    ATTR_TRANSACTIONAL,
    CONTROL_ABORT,
    CONTROL_COMMIT,
    NewRecord,
    build_batch,
    build_control_batch,
    control_type_in,
    parse_batch,
    producer_crc,
    scan_batch,
    with_broker_suffix,
)
from kanal.v1.error import ErrorCode, KanalError

RECORDS = [NewRecord(b"v1", b"k", 10), NewRecord(b"v2", None, 11)]


def test_attributes_zero_leave_the_bytes_and_crc_of_an_ordinary_batch_unchanged():
    assert build_batch(RECORDS, producer_id=7, attributes=0) == build_batch(RECORDS, producer_id=7)


def test_attributes_are_encoded_as_protobuf_writes_them_and_covered_by_the_crc():
    raw = build_batch(RECORDS, producer_id=7, producer_epoch=2, attributes=ATTR_TRANSACTIONAL)
    parsed = records_pb2.RecordBatch.FromString(raw)
    assert parsed.attributes == ATTR_TRANSACTIONAL
    assert parsed.SerializeToString() == raw, "canonical encoding: field 13 last, as protobuf writes it"
    assert scan_batch(raw).attributes == ATTR_TRANSACTIONAL
    assert producer_crc(parsed) == parsed.crc
    flipped = records_pb2.RecordBatch.FromString(raw)
    flipped.attributes = ATTR_TRANSACTIONAL | ATTR_CONTROL
    assert producer_crc(flipped) != parsed.crc, "a flipped attribute bit fails the producer CRC"
    stored = with_broker_suffix(raw, 40, 3)
    assert parse_batch(stored).attributes == ATTR_TRANSACTIONAL


@pytest.mark.parametrize("control_type", [CONTROL_ABORT, CONTROL_COMMIT])
def test_a_control_batch_holds_one_marker_record(control_type):
    raw = build_control_batch(
        control_type, producer_id=9, producer_epoch=4, coordinator_epoch=2, timestamp_ms=5
    )
    batch = parse_batch(raw)
    assert batch.attributes == ATTR_TRANSACTIONAL | ATTR_CONTROL
    assert (batch.producer_id, batch.producer_epoch, batch.record_count) == (9, 4, 1)
    assert control_type_in(with_broker_suffix(raw, 100, 1)) == control_type


def test_a_marker_needs_a_type_and_a_producer():
    with pytest.raises(KanalError) as info:
        build_control_batch(0, producer_id=9, producer_epoch=0, coordinator_epoch=0, timestamp_ms=0)
    assert info.value.code == ErrorCode.INVALID_RECORD
    with pytest.raises(KanalError):
        build_control_batch(
            CONTROL_COMMIT, producer_id=0, producer_epoch=0, coordinator_epoch=0, timestamp_ms=0
        )


def _validate(raw: bytes, **kw) -> None:
    validate_produced_batch(raw, scan_batch(raw), 1 << 20, **kw)


def test_client_produce_of_a_control_batch_is_refused_and_write_txn_markers_may_write_one():
    marker = build_control_batch(CONTROL_COMMIT, producer_id=9, producer_epoch=0, coordinator_epoch=0,
                                 timestamp_ms=1)
    with pytest.raises(KanalError) as info:
        _validate(marker)
    assert info.value.code == ErrorCode.INVALID_RECORD and "broker only" in info.value.message
    _validate(marker, allow_control=True)


@pytest.mark.parametrize("attributes, producer_id, why", [
    (0x01, 7, "unknown batch attribute"),
    (ATTR_TRANSACTIONAL, 0, "needs a producer id"),
    (ATTR_CONTROL, 7, "transactional and holds one record"),
])
def test_bad_attributes_are_invalid_record(attributes, producer_id, why):
    raw = build_batch([NewRecord(b"v", None, 1)], producer_id=producer_id, attributes=attributes)
    with pytest.raises(KanalError) as info:
        _validate(raw, allow_control=True)
    assert info.value.code == ErrorCode.INVALID_RECORD and why in info.value.message


def test_a_transactional_data_batch_is_accepted_from_produce():
    _validate(build_batch(RECORDS, producer_id=7, attributes=ATTR_TRANSACTIONAL))
