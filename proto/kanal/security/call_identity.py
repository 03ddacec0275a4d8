"""Who a gRPC call comes from, as brokers and controllers both read it: the host (from the gRPC peer
address, the `host` ACL entries name) and, on a call a broker forwards, the original caller's principal.

Peer addresses look like `ipv4:127.0.0.1:53422`, `ipv6:[::1]:53422` or `unix:/path`; the host is the
address without the port and brackets (`127.0.0.1`, `::1`), as Kafka's ACL hosts are written.

Forwarding (broker → controller, standby controller → active controller): the forwarder puts the
principal of its own caller in the `kanal-forwarded-principal` call metadata. A receiver takes it only
from a caller that is itself a broker or a controller (`User:broker-<id>` / `User:controller-<id>`,
authenticated by its certificate); from anyone else the header is ignored and the call is the caller's
own, so no client can claim to be someone else by sending it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

PRINCIPAL_METADATA_KEY = "kanal-forwarded-principal"


def peer_host(peer: str) -> str:
    """The host part of a gRPC peer string ("" when there is none, e.g. a unix socket)."""
    kind, sep, rest = peer.partition(":")
    if not sep or kind not in ("ipv4", "ipv6"):
        return ""
    host = rest.rpartition(":")[0]
    return host[1:-1] if host.startswith("[") and host.endswith("]") else host


def effective_principal(
    caller: str,
    metadata: Iterable[tuple[str, str | bytes]] | None,
    may_speak_for_others: Callable[[str], bool],
) -> str:
    """The principal a call acts as: the forwarded one when the caller may forward, else the caller."""
    if not metadata or not may_speak_for_others(caller):
        return caller
    for key, value in metadata:
        if key == PRINCIPAL_METADATA_KEY and isinstance(value, str) and value:
            return value
    return caller
