"""Kafka clients' group protocol types and consumer assignments, as kanal's group coordinator keeps them.

A Kafka client's protocol type is stored as `kafka/<type>` (Kafka's consumers say `consumer`, as kanal's
do, but encode their subscriptions and assignments in Kafka's ConsumerProtocol, not kanal's protobuf), so
the two kinds of member never share a group, and `kanal groups describe` knows how to read a Kafka
consumer's assignment:

    ConsumerProtocolAssignment (versions 0-3, big-endian): version i16,
      assigned_partitions: count i32, per topic: name (length i16, UTF-8), partitions (count i32, i32 each),
      user_data: length i32 (-1 null), bytes"""

from __future__ import annotations

import struct

from kanal.v1 import broker_pb2

PREFIX = "kafka/"
KAFKA_CONSUMER = PREFIX + "consumer"
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")


def to_kanal(protocol_type: str) -> str:
    """The protocol type a Kafka client named, as the coordinator stores it."""
    return PREFIX + protocol_type if protocol_type else ""


def from_kanal(protocol_type: str) -> str:
    """What a Kafka client is shown: its own protocol type (a kanal client's is shown as kanal names it)."""
    return protocol_type.removeprefix(PREFIX)


def decode_consumer_assignment(data: bytes) -> broker_pb2.ConsumerAssignment:
    """A Kafka consumer's assignment; ValueError when the bytes are not one (struct.error is one)."""
    pos = 2  # version: every version 0-3 starts with the same fields
    out = broker_pb2.ConsumerAssignment()
    (topics,) = _I32.unpack_from(data, pos)
    pos += 4
    if topics < 0 or topics > len(data):
        raise ValueError(f"assignment claims {topics} topics")
    for _ in range(topics):
        (length,) = _I16.unpack_from(data, pos)
        pos += 2
        if length < 0 or pos + length > len(data):
            raise ValueError("assignment topic name runs past the end")
        name = bytes(data[pos : pos + length]).decode()
        pos += length
        (count,) = _I32.unpack_from(data, pos)
        pos += 4
        if count < 0 or pos + 4 * count > len(data):
            raise ValueError("assignment partitions run past the end")
        partitions = struct.unpack_from(f">{count}i", data, pos)
        pos += 4 * count
        out.partitions.add(topic=name, partitions=partitions)
    if pos + 4 <= len(data):
        (length,) = _I32.unpack_from(data, pos)
        pos += 4
        if length > 0:
            out.user_data = bytes(data[pos : pos + length])
    return out
