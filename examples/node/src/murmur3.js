'use strict';
// MurmurHash3 x86 32-bit, written from its definition, and kanal's key -> partition rule (records.proto):
// partition = murmur3_x86_32(key bytes, seed 0) as an unsigned 32-bit integer % partition_count.

function rotl32(x, r) {
  return (x << r) | (x >>> (32 - r));
}

function murmur3x86_32(data, seed = 0) {
  const c1 = 0xcc9e2d51;
  const c2 = 0x1b873593;
  let h = seed >>> 0;
  const rounded = data.length - (data.length % 4);
  for (let i = 0; i < rounded; i += 4) {
    let k = data.readUInt32LE(i);
    k = Math.imul(k, c1);
    k = rotl32(k, 15);
    k = Math.imul(k, c2);
    h ^= k;
    h = rotl32(h, 13);
    h = (Math.imul(h, 5) + 0xe6546b64) | 0;
  }
  let k = 0;
  switch (data.length & 3) {
    case 3: k ^= data[rounded + 2] << 16; // falls through
    case 2: k ^= data[rounded + 1] << 8; // falls through
    case 1:
      k ^= data[rounded];
      k = Math.imul(k, c1);
      k = rotl32(k, 15);
      k = Math.imul(k, c2);
      h ^= k;
  }
  h ^= data.length;
  h ^= h >>> 16;
  h = Math.imul(h, 0x85ebca6b);
  h ^= h >>> 13;
  h = Math.imul(h, 0xc2b2ae35);
  h ^= h >>> 16;
  return h >>> 0;
}

function partitionForKey(key, partitionCount) {
  if (!(partitionCount >= 1)) throw new RangeError(`partition count must be >= 1, got ${partitionCount}`);
  return murmur3x86_32(key, 0) % partitionCount;
}

module.exports = { murmur3x86_32, partitionForKey };
