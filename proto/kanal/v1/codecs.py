"""Compression of RecordBatch.records as a whole: gzip (zlib), snappy, lz4 and zstd (cramjam).

Formats: gzip is an RFC 1952 stream; snappy is the snappy *framing* format; lz4 is the LZ4 *frame*
format; zstd is a Zstandard frame. These are the self-describing variants every language has a library for.
"""

from __future__ import annotations

import zlib

import cramjam

from kanal.v1 import records_pb2
from kanal.v1.error import ErrorCode, KanalError

Codec = records_pb2.CompressionCodec

# gzip level 6 is zlib's default; lower levels barely help speed on record data and compress worse.
_GZIP_LEVEL = 6
_ZSTD_LEVEL = 3


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
