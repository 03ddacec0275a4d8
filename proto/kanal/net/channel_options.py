"""gRPC channel options every kanal client of a kanal server uses (brokers, controllers, clients, Spark).

Reconnect backoff: gRPC's defaults start at 1 s and grow to 120 s while a peer is unreachable, so a
channel to a controller or broker that was down for a while (a restart, a failover, a node that started
after its peers) could fail fast for up to two minutes after the peer was back: a broker could miss the
new active controller, a client a new leader. kanal retries at the call level with its own deadlines, so
the channel itself reconnects quickly: from 50 ms up to at most 1 s (Kafka's reconnect.backoff.ms and
reconnect.backoff.max.ms).
"""

from __future__ import annotations

RECONNECT_BACKOFF_MS_MIN = 50
RECONNECT_BACKOFF_MS_MAX = 1000


def channel_options(message_bytes_max: int | None = None) -> list[tuple[str, int]]:
    """Options for grpc.insecure_channel: quick reconnects, and message size limits when given."""
    options = [
        ("grpc.initial_reconnect_backoff_ms", RECONNECT_BACKOFF_MS_MIN),
        ("grpc.min_reconnect_backoff_ms", RECONNECT_BACKOFF_MS_MIN),
        ("grpc.max_reconnect_backoff_ms", RECONNECT_BACKOFF_MS_MAX),
    ]
    if message_bytes_max is not None:
        options += [("grpc.max_receive_message_length", message_bytes_max),
                    ("grpc.max_send_message_length", message_bytes_max)]
    return options
