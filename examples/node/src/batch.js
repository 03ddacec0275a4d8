'use strict';
// Record batches and log entries as bytes, written from records.proto and checked against
// crc_vectors.json (selftest.js):
//
//   producer bytes  a RecordBatch with fields 3..12 (base_offset and partition_leader_epoch left out)
//   stored batch    producer bytes + the broker's 19-byte suffix restating fields 1, 2 and 12
//   log entry       <N u32 BE> <entry CRC u32 BE> <N bytes: a stored batch>
//
// RecordBatch.crc = CRC-32C over a 44-byte big-endian header (producer_id i64, producer_epoch i32,
// base_sequence i32, first_timestamp_ms i64, max_timestamp_ms i64, record_count i32, last_offset_delta i32,
// codec i32) followed by the `records` payload. Entry CRC = CRC-32C of the stored batch without the
// `records` payload. This example handles COMPRESSION_NONE and COMPRESSION_GZIP (Node's zlib); snappy, lz4
// and zstd need a library each.

const zlib = require('zlib');
const { crc32c } = require('./crc32c');
const { Writer, fields, WIRE_VARINT, WIRE_FIXED64, WIRE_LEN, WIRE_FIXED32 } = require('./wire');

const CODEC = { NONE: 0, GZIP: 1, SNAPPY: 2, LZ4: 3, ZSTD: 4 };
const CODEC_NAMES = ['none', 'gzip', 'snappy', 'lz4', 'zstd'];

function compress(codec, data) {
  if (codec === CODEC.NONE) return data;
  if (codec === CODEC.GZIP) return zlib.gzipSync(data);
  throw new Error(`this example does not write codec ${CODEC_NAMES[codec] || codec}`);
}

function decompress(codec, data) {
  if (codec === CODEC.NONE) return data;
  if (codec === CODEC.GZIP) return zlib.gunzipSync(data);
  throw new Error(`this example does not read codec ${CODEC_NAMES[codec] || codec}`);
}

// records: [{key: Buffer|null, value: Buffer|null, timestampMs: BigInt, headers: [{key: string, value: Buffer|null}]}]
function encodeRecordList(records, firstTimestampMs) {
  const list = new Writer();
  records.forEach((rec, delta) => {
    const r = new Writer()
      .varint(1, delta) // offset_delta
      .sint64(2, BigInt(rec.timestampMs) - BigInt(firstTimestampMs)); // timestamp_delta_ms
    if (rec.key !== null && rec.key !== undefined) r.bytes(3, rec.key, true); // optional: absent = null
    if (rec.value !== null && rec.value !== undefined) r.bytes(4, rec.value, true);
    for (const h of rec.headers || []) {
      const hw = new Writer().bytes(1, Buffer.from(h.key, 'utf8'));
      if (h.value !== null && h.value !== undefined) hw.bytes(2, h.value, true);
      r.bytes(5, hw.finish(), true); // an empty header message is still a header
    }
    list.bytes(1, r.finish(), true);
  });
  return list.finish();
}

function crcHeader(f) {
  const b = Buffer.alloc(44);
  b.writeBigInt64BE(BigInt(f.producerId), 0);
  b.writeInt32BE(f.producerEpoch, 8);
  b.writeInt32BE(f.baseSequence, 12);
  b.writeBigInt64BE(BigInt(f.firstTimestampMs), 16);
  b.writeBigInt64BE(BigInt(f.maxTimestampMs), 24);
  b.writeInt32BE(f.recordCount, 32);
  b.writeInt32BE(f.lastOffsetDelta, 36);
  b.writeInt32BE(f.codec, 40);
  return b;
}

// Producer bytes around an already compressed `records` payload.
function frameBatch(payload, f) {
  const crc = crc32c(crcHeader(f), payload);
  return new Writer()
    .varint(3, f.producerId)
    .varint(4, f.producerEpoch)
    .varint(5, f.baseSequence)
    .varint(6, f.firstTimestampMs)
    .varint(7, f.maxTimestampMs)
    .varint(8, f.recordCount)
    .varint(9, f.codec)
    .bytes(10, payload)
    .fixed32(11, crc)
    .fixed32(12, f.lastOffsetDelta)
    .finish();
}

// Producer bytes for `records`. A producer that is not idempotent leaves producerId, producerEpoch and
// baseSequence at 0 (records.proto).
function encodeBatch(records, { codec = CODEC.NONE, producerId = 0n, producerEpoch = 0, baseSequence = 0 } = {}) {
  if (records.length === 0) throw new Error('a batch needs at least one record');
  const firstTimestampMs = BigInt(records[0].timestampMs);
  const maxTimestampMs = records.reduce((m, r) => (BigInt(r.timestampMs) > m ? BigInt(r.timestampMs) : m),
    firstTimestampMs);
  const recordList = encodeRecordList(records, firstTimestampMs);
  return frameBatch(compress(codec, recordList), {
    producerId: BigInt(producerId), producerEpoch, baseSequence, firstTimestampMs, maxTimestampMs,
    recordCount: records.length, lastOffsetDelta: records.length - 1, codec,
  });
}

// The header fields of a batch (producer bytes or stored), the last occurrence of each field winning, as
// in any protobuf parser: in a stored batch, base_offset, partition_leader_epoch and last_offset_delta come
// from the broker suffix at the end.
function scanBatch(buf) {
  const h = {
    baseOffset: 0n, partitionLeaderEpoch: 0, producerId: 0n, producerEpoch: 0, baseSequence: 0,
    firstTimestampMs: 0n, maxTimestampMs: 0n, recordCount: 0, codec: 0, crc: 0, lastOffsetDelta: 0,
    recordsStart: 0, recordsEnd: 0,
  };
  const int32 = (v) => Number(BigInt.asIntN(32, v));
  const int64 = (v) => BigInt.asIntN(64, v);
  for (const { field, wireType, value } of fields(buf)) {
    if (wireType === WIRE_VARINT) {
      if (field === 3) h.producerId = int64(value);
      else if (field === 4) h.producerEpoch = int32(value);
      else if (field === 5) h.baseSequence = int32(value);
      else if (field === 6) h.firstTimestampMs = int64(value);
      else if (field === 7) h.maxTimestampMs = int64(value);
      else if (field === 8) h.recordCount = int32(value);
      else if (field === 9) h.codec = int32(value);
    } else if (wireType === WIRE_FIXED64 && field === 1) {
      h.baseOffset = value;
    } else if (wireType === WIRE_FIXED32) {
      if (field === 2) h.partitionLeaderEpoch = value | 0;
      else if (field === 11) h.crc = value;
      else if (field === 12) h.lastOffsetDelta = value;
    } else if (wireType === WIRE_LEN && field === 10) {
      h.recordsStart = value.start;
      h.recordsEnd = value.end;
    }
  }
  return h;
}

function decodeRecords(buf, baseOffset, firstTimestampMs) {
  const out = [];
  for (const rf of fields(buf)) {
    if (rf.field !== 1 || rf.wireType !== WIRE_LEN) continue;
    const rec = { offset: 0n, timestampMs: 0n, key: null, value: null, headers: [] };
    let offsetDelta = 0n;
    let timestampDelta = 0n;
    for (const { field, wireType, value } of fields(buf, rf.value.start, rf.value.end)) {
      if (field === 1 && wireType === WIRE_VARINT) offsetDelta = value;
      else if (field === 2 && wireType === WIRE_VARINT) timestampDelta = (value >> 1n) ^ -(value & 1n); // zigzag
      else if (field === 3 && wireType === WIRE_LEN) rec.key = buf.subarray(value.start, value.end);
      else if (field === 4 && wireType === WIRE_LEN) rec.value = buf.subarray(value.start, value.end);
      else if (field === 5 && wireType === WIRE_LEN) {
        const header = { key: '', value: null };
        for (const hf of fields(buf, value.start, value.end)) {
          if (hf.field === 1 && hf.wireType === WIRE_LEN) header.key = buf.toString('utf8', hf.value.start, hf.value.end);
          else if (hf.field === 2 && hf.wireType === WIRE_LEN) header.value = buf.subarray(hf.value.start, hf.value.end);
        }
        rec.headers.push(header);
      }
    }
    rec.offset = baseOffset + offsetDelta;
    rec.timestampMs = firstTimestampMs + timestampDelta;
    out.push(rec);
  }
  return out;
}

// The batches of a buffer of log entries (FetchResponse.records), both CRCs checked, records decoded.
function parseLogEntries(buf) {
  const batches = [];
  let pos = 0;
  while (pos < buf.length) {
    if (buf.length - pos < 8) throw new Error(`log entry at byte ${pos}: incomplete header`);
    const length = buf.readUInt32BE(pos);
    const entryCrc = buf.readUInt32BE(pos + 4);
    if (pos + 8 + length > buf.length) throw new Error(`log entry at byte ${pos}: length ${length} overruns`);
    const stored = buf.subarray(pos + 8, pos + 8 + length);
    const h = scanBatch(stored);
    if (crc32c(stored.subarray(0, h.recordsStart), stored.subarray(h.recordsEnd)) !== entryCrc) {
      throw new Error(`log entry at byte ${pos}: entry CRC does not match`);
    }
    const payload = stored.subarray(h.recordsStart, h.recordsEnd);
    if (crc32c(crcHeader(h), payload) !== h.crc) throw new Error(`batch at ${h.baseOffset}: CRC does not match`);
    const records = decodeRecords(decompress(h.codec, payload), h.baseOffset, h.firstTimestampMs);
    if (records.length !== h.recordCount) {
      throw new Error(`batch at ${h.baseOffset} says ${h.recordCount} records but holds ${records.length}`);
    }
    batches.push({ ...h, records });
    pos += 8 + length;
  }
  return batches;
}

module.exports = {
  CODEC, CODEC_NAMES, encodeRecordList, encodeBatch, frameBatch, crcHeader, scanBatch, parseLogEntries,
  decompress,
};
