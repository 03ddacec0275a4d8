"""Decoding what a consumer fetched: one partition's log entries (both CRCs and the header rules of every
batch checked, decompressed, transaction markers and aborted transactions' records left out) into
`ConsumerRecord`s at or above the fetch position; `UndecodableBatch` when a batch is damaged. Importable from
`kanal.clients.consumer` too.

Decoding has two implementations with the same results and the same errors: the pure-Python one here
(upb parses each RecordList, a ConsumerRecord is built per record) and, when the optional C extension is
built, `kanal.clients._consumer_fast.decode_into` (clients/_consumer_fast.c), which reads the RecordList
bytes and builds the records in one pass, about 6x faster per record. Entry walking, CRCs, header checks
and decompression are per batch and stay here for both. `NATIVE` says whether the extension loaded
(`NATIVE_IMPORT_ERROR` why not), `Consumer.native` and the repr (`path=native|python`) which path a
consumer runs; KANAL_CONSUMER_PURE_PYTHON=1 or `ConsumerConfig(use_native_path=False)` keep Python.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterable

from google.protobuf.message import DecodeError

from kanal.clients.native_ext import load_optional
from kanal.v1 import records_pb2
from kanal.v1.batch import ATTR_CONTROL, ATTR_TRANSACTIONAL, iter_entries, parse_batch
from kanal.v1.codecs import decompress
from kanal.v1.error import ErrorCode, KanalError
from kanal.v1.topic_name import TopicPartition

native, NATIVE_IMPORT_ERROR = load_optional("_consumer_fast", "KANAL_CONSUMER_PURE_PYTHON")


class ConsumerRecord:
    """One record as poll() returns it. Records decoded by the C path, and their headers lists, are kept
    out of the cyclic garbage collector (they hold only plain values; tracked, a consumer's buffered records
    cost a third of its CPU in collections): they are freed by refcount as usual, but a reference cycle
    made through one (a record stored in its own headers) would never be freed."""

    __slots__ = ("headers", "key", "leader_epoch", "offset", "partition", "timestamp_ms", "topic", "value")

    def __init__(self, topic, partition, offset, timestamp_ms, key, value, headers, leader_epoch) -> None:
        self.topic = topic
        self.partition = partition
        self.offset = offset
        self.timestamp_ms = timestamp_ms
        self.key = key
        self.value = value
        self.headers = headers
        self.leader_epoch = leader_epoch

    def __repr__(self) -> str:
        return f"<ConsumerRecord {self.topic}-{self.partition}@{self.offset} key={self.key!r}>"


# The C decoder fills ConsumerRecord's slots itself, without calling __init__ (which only stores its
# arguments): it checks here, once, that every field is a plain slot.
if native is not None:
    try:
        native.bind_record_class(ConsumerRecord)
    except TypeError as exc:
        native = None
        NATIVE_IMPORT_ERROR = str(exc)
NATIVE = native is not None  # whether the C decoder can be used (see clients/_consumer_fast.c)

# decode_record_list(out, record_list, topic, partition, leader_epoch, base_offset, first_timestamp_ms,
# min_offset) -> key + value bytes appended: one batch's decompressed RecordList into ConsumerRecords.
RecordListDecoder = Callable[[list[ConsumerRecord], bytes, str, int, int, int, int, int], int]


def decode_record_list_python(
    out: list[ConsumerRecord],
    record_list: bytes,
    topic: str,
    partition: int,
    leader_epoch: int,
    base_offset: int,
    first_timestamp_ms: int,
    min_offset: int,
) -> int:
    """Append a ConsumerRecord to `out` for each record at or above `min_offset`; returns their key + value
    bytes. CORRUPT_MESSAGE, with `out` unchanged, when the bytes are not a RecordList. The reference for
    `_consumer_fast.decode_into`, which must give the same records and fail on the same input."""
    try:
        records = records_pb2.RecordList.FromString(record_list).records
    except DecodeError as exc:
        raise KanalError(ErrorCode.CORRUPT_MESSAGE, f"records do not parse: {exc}") from exc
    payload_bytes = 0
    for r in records:
        offset = base_offset + r.offset_delta
        if offset < min_offset:
            continue  # a fetch starts at the batch holding the position
        key = r.key if r.HasField("key") else None
        value = r.value if r.HasField("value") else None
        out.append(ConsumerRecord(
            topic, partition, offset, first_timestamp_ms + r.timestamp_delta_ms, key, value,
            [(h.key, h.value if h.HasField("value") else None) for h in r.headers] if r.headers else [],
            leader_epoch))
        payload_bytes += len(key or b"") + len(value or b"")
    return payload_bytes


class UndecodableBatch(KanalError):
    """poll() met a batch of `topic_partition` it cannot decode (a CRC that does not match, records that do
    not parse or do not decompress): CORRUPT_MESSAGE, with `offset`, where the position stays (the batch's
    first offset, or the position when it lies inside the batch). The records before it were returned by
    earlier polls; every poll raises this again until the application seeks past the batch (or gives up:
    `kanal consume` exits non-zero)."""

    def __init__(self, topic_partition: TopicPartition, offset: int, reason: str) -> None:
        topic, partition = topic_partition
        super().__init__(ErrorCode.CORRUPT_MESSAGE,
                         f"{topic}-{partition}: the batch at offset {offset} cannot be decoded: {reason}")
        self.topic_partition = topic_partition
        self.offset = offset


def decode_fetched_until_error(
    tp: TopicPartition,
    data: bytes,
    min_offset: int,
    decode_record_list: RecordListDecoder,
    aborted: Iterable[tuple[int, int]] | None = None,
) -> tuple[list[ConsumerRecord], int, int, UndecodableBatch | None]:
    """decode_fetched that keeps what it decoded before a damaged batch: the records of the batches before
    it, the offset after the last of those (-1 when none), their key + value bytes, and the error (None when
    every batch decoded).

    Transaction markers (control batches) are never returned. `aborted`, for a read_committed fetch, is
    the reply's aborted transactions as (producer id, first offset): a TRANSACTIONAL batch of a producer
    whose aborted transaction began at or before it, and that no marker of that producer has ended since,
    is dropped (Kafka's consumer walks the same way)."""
    topic, partition = tp
    out: list[ConsumerRecord] = []
    next_offset = -1
    payload_bytes = 0
    pending = sorted(aborted or (), key=operator.itemgetter(1), reverse=True)  # pop() gives the lowest first
    aborting: set[int] = set()
    try:
        for entry in iter_entries(data, verify_crc=True):  # entry CRC and producer CRC both checked
            batch = parse_batch(entry.batch, verify_crc=False)
            while pending and pending[-1][1] <= batch.base_offset + batch.last_offset_delta:
                aborting.add(pending.pop()[0])
            if batch.attributes & ATTR_CONTROL:
                aborting.discard(batch.producer_id)  # its marker ends the producer's transaction here
                next_offset = batch.base_offset + batch.last_offset_delta + 1
                continue
            if batch.attributes & ATTR_TRANSACTIONAL and batch.producer_id in aborting:
                next_offset = batch.base_offset + batch.last_offset_delta + 1
                continue
            payload_bytes += decode_record_list(  # appends nothing when it fails
                out, decompress(batch.codec, batch.records), topic, partition, batch.partition_leader_epoch,
                batch.base_offset, batch.first_timestamp_ms, min_offset)
            next_offset = batch.base_offset + batch.last_offset_delta + 1
    except KanalError as exc:
        return (
            out,
            next_offset,
            payload_bytes,
            UndecodableBatch(tp, max(next_offset, min_offset), exc.message),
        )
    return out, next_offset, payload_bytes, None


def decode_fetched(tp: TopicPartition, data: bytes, min_offset: int, decode_record_list: RecordListDecoder,
                   aborted: Iterable[tuple[int, int]] | None = None) -> tuple[list[ConsumerRecord], int, int]:
    """The records at or above `min_offset` in one partition's fetched log entries, the offset after the
    last batch (-1 when there is none) and the key + value bytes of the records. Both CRCs and the header
    rules of every batch are checked; UndecodableBatch (CORRUPT_MESSAGE) when anything is damaged."""
    out, next_offset, payload_bytes, error = decode_fetched_until_error(
        tp, data, min_offset, decode_record_list, aborted
    )
    if error is not None:
        raise error
    return out, next_offset, payload_bytes
