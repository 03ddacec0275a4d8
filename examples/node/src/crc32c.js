'use strict';
// CRC-32C (Castagnoli), written from its definition: reflected polynomial 0x82F63B78 (0x1EDC6F41 bit-reversed),
// initial value 0xFFFFFFFF, final XOR 0xFFFFFFFF. Check value: crc32c("123456789") = 0xE3069283.
// A table-driven byte-at-a-time loop: plenty for an example (kanal's own clients use hardware CRC).

const TABLE = new Uint32Array(256);
for (let n = 0; n < 256; n++) {
  let c = n;
  for (let k = 0; k < 8; k++) c = c & 1 ? (c >>> 1) ^ 0x82f63b78 : c >>> 1;
  TABLE[n] = c >>> 0;
}

// The CRC of `bufs` taken as one byte string (so a CRC over pieces needs no copy).
function crc32c(...bufs) {
  let crc = 0xffffffff;
  for (const buf of bufs) {
    for (let i = 0; i < buf.length; i++) crc = TABLE[(crc ^ buf[i]) & 0xff] ^ (crc >>> 8);
  }
  return (crc ^ 0xffffffff) >>> 0;
}

module.exports = { crc32c };
