"""The Kafka form of recent batches, so a consumer near the tail is served a batch without a transcode.

Apache Kafka stores its clients' batches as they arrive and serves those bytes; kanal stores its own form
(record_batch.py), so every fetched batch would be decompressed, re-framed and compressed again. This cache
keeps, per (topic, partition, base offset), the Kafka batch a producer sent (or the one a fetch already
transcoded) beside the kanal producer bytes it was stored as. A fetch that finds an entry serves the Kafka
batch with its base offset and partition leader epoch set from the stored batch: Kafka's CRC starts after
both fields, so the batch stays valid, and the records are the same records (record_batch.py maps every
field one to one; only the compressed bytes differ, and they decompress to the same records).

An entry is served only when the stored batch's producer bytes equal the entry's byte for byte. So a log
truncated and written again at the same offset (a new leader's copy), a topic deleted and created again
under the same name, or a batch the leader rewrote is never answered with an older copy: the comparison
fails and the batch is transcoded as if the cache were empty.

Bounded by `bytes_max` (both forms of every entry counted); the oldest entry is evicted first, which keeps
what consumers at the tail read next. `bytes_max` 0 turns the cache off. Pure: no I/O, no clock; the
broker's event loop is its only user."""

from __future__ import annotations

import struct
from collections import OrderedDict
from collections.abc import Callable

from kanal.broker.kafka.record_batch import Buffer, kanal_to_kafka
from kanal.v1 import batch as kbatch

Key = tuple[str, int, int]  # topic, partition, base offset
# A Kafka batch's first 16 bytes: base_offset i64, batch_length i32, partition_leader_epoch i32; the CRC
# (at byte 17) covers from byte 21 on.
_OFFSET_LENGTH_EPOCH = struct.Struct(">qii")
_KAFKA_PATCHED_BYTES = _OFFSET_LENGTH_EPOCH.size
_KAFKA_LENGTH = struct.Struct(">i")
_KAFKA_LENGTH_AT = 8


class KafkaBatchCache:
    def __init__(self, bytes_max: int) -> None:
        if bytes_max < 0:
            raise ValueError(f"bytes_max must be >= 0, not {bytes_max}")
        self.bytes_max = bytes_max
        self.bytes = 0
        self.hits = 0
        self.misses = 0
        self._entries: OrderedDict[Key, tuple[bytes, bytes]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: Key) -> bool:
        return key in self._entries

    def put(self, key: Key, kanal_producer_bytes: bytes, kafka_batch: bytes) -> None:
        """Keeps `kafka_batch` as the Kafka form of the batch stored from `kanal_producer_bytes`."""
        size = len(kanal_producer_bytes) + len(kafka_batch)
        if size > self.bytes_max:
            return
        old = self._entries.pop(key, None)
        if old is not None:
            self.bytes -= len(old[0]) + len(old[1])
        self._entries[key] = (kanal_producer_bytes, kafka_batch)
        self.bytes += size
        while self.bytes > self.bytes_max:
            _, (kanal, kafka) = self._entries.popitem(last=False)
            self.bytes -= len(kanal) + len(kafka)

    def put_produced(
        self, topic: str, partition: int, base_offset: int, batches: list[tuple[bytes, bytes]]
    ) -> None:
        """A Produce's batches (kanal producer bytes, the client's Kafka batch) for one partition, stored
        from `base_offset` on, each after the last. Should the offsets be other than assumed (a duplicate
        answered with its first offsets), the entries are never served: a fetch compares the stored bytes."""
        offset = base_offset
        for kanal, kafka in batches:
            self.put((topic, partition, offset), kanal, kafka)
            offset += kbatch.scan_batch(kanal).last_offset_delta + 1

    def kafka_batch(self, topic: str, partition: int, stored: memoryview) -> bytes:
        """The stored batch `stored` (broker suffix included) as a Kafka batch: from the cache when the
        entry's producer bytes are the stored ones, else transcoded and kept."""
        if not self.bytes_max:
            return kanal_to_kafka(stored)
        _, base_offset, _, epoch, _, _ = kbatch.BROKER_SUFFIX.unpack_from(
            stored, len(stored) - kbatch.BROKER_SUFFIX_BYTES
        )
        producer_bytes = bytes(stored[: len(stored) - kbatch.BROKER_SUFFIX_BYTES])
        key = (topic, partition, base_offset)
        entry = self._entries.get(key)
        if entry is not None and entry[0] == producer_bytes:
            self.hits += 1
            kafka = entry[1]
            (length,) = _KAFKA_LENGTH.unpack_from(kafka, _KAFKA_LENGTH_AT)
            return _OFFSET_LENGTH_EPOCH.pack(base_offset, length, epoch) + kafka[_KAFKA_PATCHED_BYTES:]
        self.misses += 1
        kafka = kanal_to_kafka(stored)
        self.put(key, producer_bytes, kafka)
        return kafka

    def transcoder(self, topic: str, partition: int) -> Callable[[Buffer], bytes]:
        """The per-batch transcode record_batch.entries_to_kafka takes, for one partition."""
        return lambda stored: self.kafka_batch(topic, partition, memoryview(stored))
