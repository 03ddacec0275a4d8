"""Key -> partition: the documented rule, the committed test vectors, and an independent implementation."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kanal.v1.partitioning import partition_for_key

VECTORS = json.loads(
    (Path(__file__).resolve().parents[2] / "proto/kanal/v1/partitioner_vectors.json").read_text()
)


def murmur3_x86_32(data: bytes, seed: int = 0) -> int:
    """A from-the-specification MurmurHash3 x86 32-bit, to check the library and the vectors independently."""
    c1, c2, mask = 0xCC9E2D51, 0x1B873593, 0xFFFFFFFF
    h = seed
    rounded = len(data) - len(data) % 4
    for i in range(0, rounded, 4):
        k = int.from_bytes(data[i : i + 4], "little")
        k = (k * c1) & mask
        k = ((k << 15) | (k >> 17)) & mask
        k = (k * c2) & mask
        h ^= k
        h = ((h << 13) | (h >> 19)) & mask
        h = (h * 5 + 0xE6546B64) & mask
    k = 0
    tail = data[rounded:]
    if len(tail) >= 3:
        k ^= tail[2] << 16
    if len(tail) >= 2:
        k ^= tail[1] << 8
    if tail:
        k ^= tail[0]
        k = (k * c1) & mask
        k = ((k << 15) | (k >> 17)) & mask
        k = (k * c2) & mask
        h ^= k
    h ^= len(data)
    h ^= h >> 16
    h = (h * 0x85EBCA6B) & mask
    h ^= h >> 13
    h = (h * 0xC2B2AE35) & mask
    h ^= h >> 16
    return h


def test_reference_value_from_the_murmur3_literature():
    assert murmur3_x86_32(b"The quick brown fox jumps over the lazy dog") == 0x2E4FF723


@pytest.mark.parametrize("vector", VECTORS["vectors"], ids=lambda v: v["key_hex"][:16] or "empty")
def test_vectors(vector):
    key = bytes.fromhex(vector["key_hex"])
    assert murmur3_x86_32(key) == vector["murmur3_x86_32_seed0"]
    for count, partition in vector["partitions"].items():
        assert partition_for_key(key, int(count)) == partition


def test_partition_count_must_be_positive():
    with pytest.raises(ValueError):
        partition_for_key(b"k", 0)
