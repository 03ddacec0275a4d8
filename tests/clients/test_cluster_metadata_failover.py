"""ClusterMetadata.find_coordinator moves on from a broker that died (issue 22's stall): two real gRPC
brokers on 127.0.0.1 that answer Metadata and FindCoordinator; the one the client last used stops."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import grpc
import pytest

from kanal.clients.cluster_metadata import ClusterMetadata
from kanal.v1 import broker_pb2, broker_pb2_grpc
from kanal.v1.error import ErrorCode, KanalError


class _Broker(broker_pb2_grpc.BrokerServicer):
    def __init__(self, node_id: int) -> None:
        self.node_id = node_id
        self.server = grpc.server(ThreadPoolExecutor(max_workers=2))
        broker_pb2_grpc.add_BrokerServicer_to_server(self, self.server)
        self.endpoint = f"127.0.0.1:{self.server.add_insecure_port('127.0.0.1:0')}"
        self.server.start()

    def Metadata(self, request, context):
        return broker_pb2.MetadataResponse()

    def FindCoordinator(self, request, context):
        return broker_pb2.FindCoordinatorResponse(node_id=self.node_id, endpoint=self.endpoint)


@pytest.fixture
def brokers():
    started = [_Broker(0), _Broker(1)]
    yield started
    for b in started:
        b.server.stop(grace=None).wait(10)


def test_find_coordinator_asks_another_broker_after_the_last_one_died(brokers):
    first, second = brokers
    md = ClusterMetadata(f"{first.endpoint},{second.endpoint}", request_timeout_ms=5000)
    try:
        assert md.find_coordinator("g", broker_pb2.COORDINATOR_GROUP, 5).node_id == 0
        first.server.stop(grace=None).wait(10)
        with pytest.raises(KanalError) as err:
            md.find_coordinator("g", broker_pb2.COORDINATOR_GROUP, 5)
        assert err.value.code == ErrorCode.BROKER_NOT_AVAILABLE and err.value.retriable
        # The retry goes to a broker that answers, not to the dead one again.
        assert md.find_coordinator("g", broker_pb2.COORDINATOR_GROUP, 5).node_id == 1
    finally:
        md.close()
