"""Stubs for the other brokers of the cluster, by endpoint: one channel each, opened on first use (TLS when
the listeners have it) and kept until close. The group coordinator asks leaders for high-water marks through
them (group_lag.py) and the transaction coordinator sends WriteTxnMarkers (through
`GroupCoordinator.peer`)."""

from __future__ import annotations

import grpc

from kanal.net.channel_options import channel_options
from kanal.security.channel_security import ClientSecurity, open_channel
from kanal.v1 import broker_pb2_grpc


class PeerBrokers:
    def __init__(self, security: ClientSecurity | None) -> None:
        self._security = security  # how to dial the other brokers (TLS when the listeners have it)
        self._peers: dict[str, broker_pb2_grpc.BrokerStub] = {}
        self._channels: list[grpc.Channel] = []

    def stub(self, endpoint: str) -> broker_pb2_grpc.BrokerStub:
        stub = self._peers.get(endpoint)
        if stub is None:
            channel = open_channel(endpoint, channel_options(), self._security)
            self._channels.append(channel)
            stub = self._peers[endpoint] = broker_pb2_grpc.BrokerStub(channel)
        return stub

    def close(self) -> None:
        for channel in self._channels:
            channel.close()
