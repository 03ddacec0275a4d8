'use strict';
// Checks this example's murmur3, CRC-32C and batch encoding against the contract's vector files,
// proto/kanal/v1/partitioner_vectors.json and proto/kanal/v1/crc_vectors.json. No cluster needed:
//   node selftest.js [--proto-dir DIR]
// Prints one line per failure and a closing "selftest: N passed, M failed"; exits 1 on any failure.
const fs = require('fs');
const path = require('path');
const { murmur3x86_32, partitionForKey } = require('./src/murmur3');
const { crc32c } = require('./src/crc32c');
const { encodeRecordList, encodeBatch, frameBatch, crcHeader, parseLogEntries, decompress } = require('./src/batch');
const { protoDir } = require('./src/protodir');

const dir = path.join(protoDir(), 'kanal', 'v1');
const partitionerVectors = JSON.parse(fs.readFileSync(path.join(dir, 'partitioner_vectors.json'), 'utf8'));
const crcVectors = JSON.parse(fs.readFileSync(path.join(dir, 'crc_vectors.json'), 'utf8'));

let passed = 0;
let failed = 0;
function check(name, actual, expected) {
  const same = Buffer.isBuffer(actual) ? Buffer.isBuffer(expected) && actual.equals(expected)
    : JSON.stringify(actual) === JSON.stringify(expected);
  if (same) {
    passed++;
  } else {
    failed++;
    const show = (v) => (Buffer.isBuffer(v) ? v.toString('hex') : JSON.stringify(v));
    console.log(`FAIL ${name}: got ${show(actual)}, want ${show(expected)}`);
  }
}
const hex = (h) => Buffer.from(h, 'hex');
const optHex = (h) => (h === null ? null : hex(h));

check('murmur3 reference', murmur3x86_32(Buffer.from('The quick brown fox jumps over the lazy dog')), 0x2e4ff723);
for (const v of partitionerVectors.vectors) {
  const key = hex(v.key_hex);
  check(`murmur3 ${v.key_hex}`, murmur3x86_32(key), v.murmur3_x86_32_seed0);
  for (const [count, partition] of Object.entries(v.partitions)) {
    check(`partition ${v.key_hex} % ${count}`, partitionForKey(key, Number(count)), partition);
  }
}

check('crc32c check value', crc32c(hex(crcVectors.crc32c.check.input_hex)), crcVectors.crc32c.check.crc);
for (const v of crcVectors.vectors) {
  const records = v.records.map((r) => ({
    key: optHex(r.key_hex), value: optHex(r.value_hex), timestampMs: BigInt(r.timestamp_ms),
    headers: r.headers.map((h) => ({ key: h.key, value: optHex(h.value_hex) })),
  }));
  const f = {
    producerId: BigInt(v.producer_id), producerEpoch: v.producer_epoch, baseSequence: v.base_sequence,
    firstTimestampMs: BigInt(v.batch_fields.first_timestamp_ms), maxTimestampMs: BigInt(v.batch_fields.max_timestamp_ms),
    recordCount: v.batch_fields.record_count, lastOffsetDelta: v.batch_fields.last_offset_delta, codec: v.codec,
  };
  const payload = hex(v.records_payload_hex);
  check(`${v.name}: RecordList`, encodeRecordList(records, f.firstTimestampMs), hex(v.record_list_hex));
  check(`${v.name}: payload decompresses to the RecordList`, decompress(v.codec, payload), hex(v.record_list_hex));
  check(`${v.name}: CRC header`, crcHeader(f), hex(v.crc_header_hex));
  check(`${v.name}: CRC`, crc32c(crcHeader(f), payload), v.crc);
  check(`${v.name}: producer bytes framed around the payload`, frameBatch(payload, f), hex(v.batch_hex));
  if (v.codec === 0) {
    // Uncompressed, the whole encoder must write the vector's bytes (gzip output is not canonical).
    check(`${v.name}: producer bytes`, encodeBatch(records, {
      codec: v.codec, producerId: f.producerId, producerEpoch: f.producerEpoch, baseSequence: f.baseSequence,
    }), hex(v.batch_hex));
  }
  check(`${v.name}: entry CRC`, crc32c(hex(v.stored.entry_crc_input_hex)), v.stored.entry_crc);
  const batches = parseLogEntries(hex(v.stored.log_entry_hex));
  check(`${v.name}: one batch in the entry`, batches.length, 1);
  const b = batches[0];
  check(`${v.name}: broker suffix fields`, [b.baseOffset.toString(), b.partitionLeaderEpoch],
    [String(v.stored.base_offset), v.stored.partition_leader_epoch]);
  const show = (r) => ({
    offset: r.offset !== undefined ? r.offset.toString() : undefined,
    key: r.key === null ? null : r.key.toString('hex'),
    value: r.value === null ? null : r.value.toString('hex'),
    timestampMs: r.timestampMs.toString(),
    headers: r.headers.map((h) => [h.key, h.value === null ? null : h.value.toString('hex')]),
  });
  check(`${v.name}: decoded records`, b.records.map(show), records.map((r, i) => show({
    ...r, offset: BigInt(v.stored.base_offset) + BigInt(i),
  })));
}

console.log(`selftest: ${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
