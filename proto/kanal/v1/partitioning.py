"""Key -> partition, the rule every client must share (records.proto; vectors in partitioner_vectors.json).

partition = murmur3_x86_32(key, seed=0) as an unsigned 32-bit integer, modulo the partition count.
"""

from __future__ import annotations

import mmh3


def partition_for_key(key: bytes, partition_count: int) -> int:
    """The partition a keyed record goes to."""
    if partition_count < 1:
        raise ValueError(f"partition_count must be >= 1, got {partition_count}")
    return mmh3.hash(key, seed=0, signed=False) % partition_count
