"""The cooperative-sticky user data bytes as broker.proto (ConsumerSubscription.user_data) writes them out,
so a client in another language that follows the comment interoperates with kanal's assignors."""

from __future__ import annotations

import pytest

from kanal.clients.assignors import decode_subscription, encode_subscription
from kanal.v1 import broker_pb2


@pytest.mark.parametrize(("generation", "caller_data", "user_data_hex"), [
    (-1, b"", ""),  # no join completed yet: empty
    (7, b"", "0100000007"),  # the comment's first example
    (-1, b"x", "01ffffffff78"),  # the comment's second example
    (0x01020304, b"", "0101020304"),  # big-endian
])
def test_user_data_is_the_documented_bytes(generation, caller_data, user_data_hex):
    data = encode_subscription(
        ["t"], [("t", 1), ("t", 0), ("t", 1)], user_data=caller_data, generation=generation
    )
    message = broker_pb2.ConsumerSubscription.FromString(data)
    assert message.user_data.hex() == user_data_hex
    # owned_partitions: topics and partitions sorted, each once.
    assert [(g.topic, list(g.partitions)) for g in message.owned_partitions] == [("t", [0, 1])]
    assert decode_subscription("m", "", data).generation == generation


@pytest.mark.parametrize("user_data_hex", ["", "01", "01000000", "0200000007", "ff00000007aa"])
def test_unknown_or_short_user_data_reads_as_generation_unknown(user_data_hex):
    data = broker_pb2.ConsumerSubscription(
        topics=["t"], user_data=bytes.fromhex(user_data_hex)
    ).SerializeToString()
    assert decode_subscription("m", "", data).generation == -1
