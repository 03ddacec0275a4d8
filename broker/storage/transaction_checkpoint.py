"""The transaction index of a partition on disk: `<partition dir>/transactions.checkpoint` (issue 22).

Written at clean shutdown beside the producer-state snapshot, so the next start replays only the log
after it; without it (a crash, a damaged file, a file whose offset is past the log end after a
truncation) the index is rebuilt from the log start (TransactionIndex.rebuild over the stored batches:
headers, plus the one-record control batches). Both give the same index: the file is a cache of a
function of the log, never the only copy of anything.

Layout (big-endian):

    offset 0   4 bytes  magic b"KTXN"
           4   u16      version (1)
           6   u16      reserved, 0
           8   i64      next offset: the index covers the log below it
          16   u32      O, open transactions
          20   u32      A, aborted transactions
          24   O x 16   open transaction:    producer id i64, first offset i64
               A x 24   aborted transaction: last offset i64, producer id i64, first offset i64 (in last
                        offset order)
               u32      CRC-32C of every byte before it

Written atomically (temporary file, fsync, rename, directory fsync).
"""

from __future__ import annotations

import struct
from pathlib import Path

import crc32c

from kanal.broker.storage.durable_files import write_file_atomically
from kanal.broker.storage.transaction_index import AbortedTxn, TransactionIndex
from kanal.v1.error import ErrorCode, KanalError

CHECKPOINT_FILE = "transactions.checkpoint"
_MAGIC = b"KTXN"
_VERSION = 1
_HEADER = struct.Struct(">4sHHqII")
_OPEN = struct.Struct(">qq")
_ABORTED = struct.Struct(">qqq")
_CRC = struct.Struct(">I")


def encode_checkpoint(index: TransactionIndex) -> bytes:
    parts = [_HEADER.pack(_MAGIC, _VERSION, 0, index.next_offset, len(index.ongoing), len(index.aborted))]
    parts += [_OPEN.pack(pid, first) for pid, first in sorted(index.ongoing.items())]
    parts += [_ABORTED.pack(a.last_offset, a.producer_id, a.first_offset) for a in index.aborted]
    body = b"".join(parts)
    return body + _CRC.pack(crc32c.crc32c(body))


def decode_checkpoint(data: bytes) -> TransactionIndex:
    """CORRUPT_MESSAGE when the bytes are not a whole, undamaged checkpoint."""
    if len(data) < _HEADER.size + _CRC.size:
        raise KanalError(
            ErrorCode.CORRUPT_MESSAGE, f"transaction checkpoint of {len(data)} bytes is too short"
        )
    body, (crc,) = data[:-_CRC.size], _CRC.unpack_from(data, len(data) - _CRC.size)
    if crc32c.crc32c(body) != crc:
        raise KanalError(ErrorCode.CORRUPT_MESSAGE, "transaction checkpoint CRC does not match")
    magic, version, _, next_offset, open_count, aborted_count = _HEADER.unpack_from(body)
    if magic != _MAGIC or version != _VERSION:
        raise KanalError(ErrorCode.CORRUPT_MESSAGE, f"not a version {_VERSION} transaction checkpoint")
    if len(body) != _HEADER.size + open_count * _OPEN.size + aborted_count * _ABORTED.size:
        raise KanalError(ErrorCode.CORRUPT_MESSAGE, "transaction checkpoint length disagrees with its counts")
    pos = _HEADER.size
    index = TransactionIndex(next_offset=next_offset)
    for _ in range(open_count):
        pid, first = _OPEN.unpack_from(body, pos)
        index.ongoing[pid] = first
        pos += _OPEN.size
    for _ in range(aborted_count):
        index.aborted.append(AbortedTxn(*_ABORTED.unpack_from(body, pos)))
        pos += _ABORTED.size
    if index.aborted != sorted(index.aborted):
        raise KanalError(ErrorCode.CORRUPT_MESSAGE, "transaction checkpoint's aborted list is out of order")
    return index


def write_checkpoint(directory: Path, index: TransactionIndex) -> None:
    write_file_atomically(directory / CHECKPOINT_FILE, encode_checkpoint(index))


def read_checkpoint(
    directory: Path, log_start_offset: int, log_end_offset: int
) -> tuple[TransactionIndex | None, str]:
    """The checkpoint when it is usable here (its offset within [log start, log end]), else None and why."""
    path = directory / CHECKPOINT_FILE
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None, "no checkpoint"
    try:
        index = decode_checkpoint(data)
    except KanalError as exc:
        return None, exc.message
    if not log_start_offset <= index.next_offset <= log_end_offset:
        return None, (f"checkpoint at {index.next_offset} is outside the log [{log_start_offset}, "
                      f"{log_end_offset}]")
    index.drop_before(log_start_offset)
    return index, ""


def remove_checkpoint(directory: Path) -> None:
    (directory / CHECKPOINT_FILE).unlink(missing_ok=True)
