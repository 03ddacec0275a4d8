'use strict';
// The protobuf wire format, by hand: just what record batches need (records.proto). Varints are BigInt, so
// int64 fields keep all 64 bits. Writers follow the canonical proto3 rules the vectors use: fields in
// field-number order (the caller writes them in that order), scalar fields equal to zero left out, fields
// with presence (`optional`) written whenever set.

const WIRE_VARINT = 0;
const WIRE_FIXED64 = 1;
const WIRE_LEN = 2;
const WIRE_FIXED32 = 5;

function varint(value) {
  // int32/int64 negatives are the 10-byte varint of their 64-bit two's complement.
  let v = BigInt.asUintN(64, BigInt(value));
  const out = [];
  while (v >= 0x80n) {
    out.push(Number(v & 0x7fn) | 0x80);
    v >>= 7n;
  }
  out.push(Number(v));
  return Buffer.from(out);
}

function zigzag64(value) {
  const v = BigInt.asIntN(64, BigInt(value));
  return BigInt.asUintN(64, (v << 1n) ^ (v >> 63n));
}

function tag(field, wireType) {
  return varint((field << 3) | wireType);
}

class Writer {
  constructor() {
    this.parts = [];
  }
  // An int32/int64/uint32/enum field; left out when zero.
  varint(field, value) {
    if (BigInt(value) !== 0n) this.parts.push(tag(field, WIRE_VARINT), varint(value));
    return this;
  }
  // A sint64 field (zigzag); left out when zero.
  sint64(field, value) {
    if (BigInt(value) !== 0n) this.parts.push(tag(field, WIRE_VARINT), varint(zigzag64(value)));
    return this;
  }
  // A fixed32 field, little-endian; left out when zero.
  fixed32(field, value) {
    if (value !== 0) {
      const b = Buffer.alloc(4);
      b.writeUInt32LE(value >>> 0);
      this.parts.push(tag(field, WIRE_FIXED32), b);
    }
    return this;
  }
  // A bytes/string/message field. `always`: a field with presence that is set, written even when empty.
  bytes(field, buf, always = false) {
    if (buf.length > 0 || always) this.parts.push(tag(field, WIRE_LEN), varint(buf.length), buf);
    return this;
  }
  finish() {
    return Buffer.concat(this.parts);
  }
}

// Walk a message's fields in order: {field, wireType, value} with value a BigInt (varint, fixed64), a
// Number (fixed32) or {start, end} (length-delimited, a range of `buf`). Throws on malformed bytes.
function* fields(buf, start = 0, end = buf.length) {
  let pos = start;
  const readVarint = () => {
    let result = 0n;
    for (let shift = 0n; ; shift += 7n) {
      if (pos >= end || shift > 63n) throw new Error('truncated or overlong varint');
      const byte = buf[pos++];
      result |= BigInt(byte & 0x7f) << shift;
      if (byte < 0x80) return result;
    }
  };
  while (pos < end) {
    const key = readVarint();
    const field = Number(key >> 3n);
    const wireType = Number(key & 7n);
    let value;
    if (wireType === WIRE_VARINT) {
      value = readVarint();
    } else if (wireType === WIRE_FIXED64) {
      if (pos + 8 > end) throw new Error('truncated 64-bit field');
      value = buf.readBigUInt64LE(pos);
      pos += 8;
    } else if (wireType === WIRE_FIXED32) {
      if (pos + 4 > end) throw new Error('truncated 32-bit field');
      value = buf.readUInt32LE(pos);
      pos += 4;
    } else if (wireType === WIRE_LEN) {
      const length = Number(readVarint());
      if (pos + length > end) throw new Error('truncated length-delimited field');
      value = { start: pos, end: pos + length };
      pos += length;
    } else {
      throw new Error(`unsupported wire type ${wireType}`);
    }
    yield { field, wireType, value };
  }
}

module.exports = { Writer, fields, varint, zigzag64, WIRE_VARINT, WIRE_FIXED64, WIRE_LEN, WIRE_FIXED32 };
