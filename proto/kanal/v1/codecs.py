"""Compression of RecordBatch.records as a whole: gzip (zlib), snappy, lz4 and zstd (cramjam).

Formats: gzip is an RFC 1952 stream; snappy is the snappy *framing* format; lz4 is the LZ4 *frame*
format; zstd is a Zstandard frame. These are the self-describing variants every language has a library for.

Bounded decompression (`decompress_bounded`): a leader decompresses every produced batch to validate its
records, and a few KiB of zstd or gzip can expand to gigabytes. It never holds more than `bytes_max + 1`
bytes of output: gzip through zlib's `max_length`, the others by decompressing into a buffer that grows
(x4 from 4x the input, at least 64 KiB) up to `bytes_max + 1` bytes; a stream that still does not fit
is refused with MESSAGE_TOO_LARGE. For every input it accepts, it gives the same bytes as `decompress`,
and it refuses what `decompress` refuses (trailing bytes after a gzip member are ignored by both).
"""

from __future__ import annotations

import zlib
from typing import cast

import cramjam

from kanal.v1 import records_pb2
from kanal.v1.error import ErrorCode, KanalError

Codec = records_pb2.CompressionCodec

# gzip level 6 is zlib's default; lower levels barely help speed on record data and compress worse.
_GZIP_LEVEL = 6
_ZSTD_LEVEL = 3
# First guess of the output size of a bounded decompression, as a multiple of the input (record data
# compresses 2-8x), and the smallest first buffer.
_BOUNDED_FIRST_RATIO = 4
_BOUNDED_FIRST_BYTES = 64 << 10
# cramjam's message when decompress_into's buffer is full (Rust's io::ErrorKind::WriteZero).
_BUFFER_FULL = "failed to write whole buffer"
_CRAMJAM = {Codec.COMPRESSION_SNAPPY: cramjam.snappy, Codec.COMPRESSION_LZ4: cramjam.lz4,
            Codec.COMPRESSION_ZSTD: cramjam.zstd}


def compress(codec: int, data: bytes) -> bytes:
    """Compress `data` with `codec`; COMPRESSION_NONE returns it unchanged."""
    if codec == Codec.COMPRESSION_NONE:
        return data
    if codec == Codec.COMPRESSION_GZIP:
        packer = zlib.compressobj(_GZIP_LEVEL, zlib.DEFLATED, 31)  # wbits 31: gzip container
        return packer.compress(data) + packer.flush()
    if codec == Codec.COMPRESSION_SNAPPY:
        return bytes(cramjam.snappy.compress(data))
    if codec == Codec.COMPRESSION_LZ4:
        return bytes(cramjam.lz4.compress(data))
    if codec == Codec.COMPRESSION_ZSTD:
        return bytes(cramjam.zstd.compress(data, level=_ZSTD_LEVEL))
    raise KanalError(ErrorCode.UNSUPPORTED_COMPRESSION_TYPE, f"unknown compression codec {codec}")


def decompress(codec: int, data: bytes) -> bytes:
    """Undo `compress`. Damaged input raises CORRUPT_MESSAGE."""
    if codec == Codec.COMPRESSION_NONE:
        return data
    try:
        if codec == Codec.COMPRESSION_GZIP:
            return zlib.decompress(data, 47)  # wbits 47: gzip or zlib header, detected
        if codec == Codec.COMPRESSION_SNAPPY:
            return bytes(cramjam.snappy.decompress(data))
        if codec == Codec.COMPRESSION_LZ4:
            return bytes(cramjam.lz4.decompress(data))
        if codec == Codec.COMPRESSION_ZSTD:
            return bytes(cramjam.zstd.decompress(data))
    except (zlib.error, cramjam.DecompressionError) as exc:
        raise KanalError(ErrorCode.CORRUPT_MESSAGE, f"cannot decompress {Codec.Name(codec)}: {exc}") from exc
    raise KanalError(ErrorCode.UNSUPPORTED_COMPRESSION_TYPE, f"unknown compression codec {codec}")


def decompress_bounded(codec: int, data: bytes | memoryview, bytes_max: int) -> bytes | memoryview:
    """`decompress` that never produces more than `bytes_max` bytes: MESSAGE_TOO_LARGE when the output
    would be larger, CORRUPT_MESSAGE when the input is damaged, UNSUPPORTED_COMPRESSION_TYPE for an unknown
    codec. May return a memoryview (no copy of the output)."""
    if codec == Codec.COMPRESSION_NONE:
        return data
    too_large = KanalError(ErrorCode.MESSAGE_TOO_LARGE, f"records decompress to more than {bytes_max} bytes")
    try:
        if codec == Codec.COMPRESSION_GZIP:
            unpacker = zlib.decompressobj(47)  # as decompress: gzip or zlib header, detected
            out = unpacker.decompress(data, bytes_max + 1)
            if len(out) > bytes_max:
                raise too_large
            if not unpacker.eof:  # zlib.decompress raises the same for a stream that does not end
                raise zlib.error("Error -5 while decompressing data: incomplete or truncated stream")
            return out
        module = _CRAMJAM.get(cast(Codec, codec))
        if module is None:
            raise KanalError(ErrorCode.UNSUPPORTED_COMPRESSION_TYPE, f"unknown compression codec {codec}")
        size = min(bytes_max + 1, max(_BOUNDED_FIRST_BYTES, _BOUNDED_FIRST_RATIO * len(data)))
        while True:
            buffer = bytearray(size)
            try:
                written = module.decompress_into(data, buffer)
            except cramjam.DecompressionError as exc:
                if str(exc) != _BUFFER_FULL:
                    raise
            else:
                if written > bytes_max:  # only possible in the last buffer, of bytes_max + 1
                    raise too_large
                return memoryview(buffer)[:written]
            if size > bytes_max:
                raise too_large
            size = min(bytes_max + 1, size * 4)
    except (zlib.error, cramjam.DecompressionError) as exc:
        raise KanalError(ErrorCode.CORRUPT_MESSAGE, f"cannot decompress {Codec.Name(codec)}: {exc}") from exc
