"""BrokerService: the Broker gRPC service (broker.proto), a thin shell over the replica manager, the
metadata image and the controller client. Handlers translate messages and errors; they hold no state."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import grpc

from kanal.broker.grpc_errors import error_boundary
from kanal.metadata import MetadataImage
from kanal.v1 import broker_pb2, broker_pb2_grpc
from kanal.v1.error import ErrorCode, KanalError

if TYPE_CHECKING:
    from kanal.broker.server import BrokerServer

_FORWARDED_ADMIN_CALLS = (
    "CreateTopics", "DeleteTopics", "CreatePartitions", "DescribeConfigs", "AlterConfigs",
    "AlterClientQuotas", "DescribeClientQuotas", "DescribeCluster",
)


def metadata_response(image: MetadataImage, topics: list[str], metadata_offset: int) -> broker_pb2.MetadataResponse:
    """What clients see of the cluster: live brokers, and each requested topic's partitions."""
    reply = broker_pb2.MetadataResponse(cluster_id="kanal", controller_id=-1, metadata_offset=metadata_offset)
    for broker in sorted(image.live_brokers().values(), key=lambda b: b.broker_id):
        reply.brokers.add(broker_id=broker.broker_id, endpoint=broker.endpoint, rack=broker.rack,
                          fenced=False, broker_epoch=broker.broker_epoch)
    for name in topics or sorted(image.topics):
        topic = image.topics.get(name)
        if topic is None:
            reply.topics.add(name=name, error=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
            continue
        out = reply.topics.add(name=name, topic_id=topic.topic_id, is_internal=name.startswith("__"))
        for p in topic.partitions:
            out.partitions.add(
                partition=p.partition_id,
                error=ErrorCode.LEADER_NOT_AVAILABLE if p.leader < 0 else ErrorCode.NONE,
                leader=p.leader, leader_epoch=p.leader_epoch, replicas=p.replicas, isr=p.isr,
            )
    return reply


class BrokerService(broker_pb2_grpc.BrokerServicer):
    def __init__(self, server: BrokerServer) -> None:
        self._server = server

    def _timed(self, name: str, started: float) -> None:
        metrics = self._server.metrics
        metrics.requests.labels(name).inc()
        metrics.request_latency.labels(name).observe(time.perf_counter() - started)

    @error_boundary
    def Produce(self, request: broker_pb2.ProduceRequest, context: grpc.ServicerContext) -> broker_pb2.ProduceResponse:
        started = time.perf_counter()
        reply = self._server.replicas.produce(request)
        self._timed("Produce", started)
        return reply

    @error_boundary
    def Fetch(self, request: broker_pb2.FetchRequest, context: grpc.ServicerContext) -> broker_pb2.FetchResponse:
        started = time.perf_counter()
        reply = self._server.replicas.fetch(request, is_active=context.is_active, on_call_end=context.add_callback)
        self._timed("FetchFollower" if request.replica_id >= 0 else "FetchConsumer", started)
        return reply

    @error_boundary
    def ListOffsets(self, request: broker_pb2.ListOffsetsRequest,
                    context: grpc.ServicerContext) -> broker_pb2.ListOffsetsResponse:
        return self._server.replicas.list_offsets(request)

    @error_boundary
    def Metadata(self, request: broker_pb2.MetadataRequest, context: grpc.ServicerContext) -> broker_pb2.MetadataResponse:
        follower = self._server.metadata
        return metadata_response(follower.image, list(request.topics), follower.offset)

    @error_boundary
    def InitProducerId(self, request: broker_pb2.InitProducerIdRequest,
                       context: grpc.ServicerContext) -> broker_pb2.InitProducerIdResponse:
        if request.transactional_id:
            raise KanalError(ErrorCode.INVALID_REQUEST, "transactions are not supported; leave transactional_id empty")
        return broker_pb2.InitProducerIdResponse(producer_id=self._server.producer_ids.next_id(), producer_epoch=0)


    # ---- groups: failures of the whole call are answered in the reply's error field, as Kafka does ----

    @error_boundary
    def FindCoordinator(self, request, context):
        return _in_band(broker_pb2.FindCoordinatorResponse, self._server.groups.find_coordinator, request)

    @error_boundary
    def JoinGroup(self, request, context):
        host = context.peer().partition(":")[2].rpartition(":")[0]
        return _in_band(broker_pb2.JoinGroupResponse, self._server.groups.join, request, host)

    @error_boundary
    def SyncGroup(self, request, context):
        return _in_band(broker_pb2.SyncGroupResponse, self._server.groups.sync, request)

    @error_boundary
    def Heartbeat(self, request, context):
        return _in_band(broker_pb2.HeartbeatResponse, self._server.groups.heartbeat, request)

    @error_boundary
    def LeaveGroup(self, request, context):
        return _in_band(broker_pb2.LeaveGroupResponse, self._server.groups.leave, request)

    @error_boundary
    def OffsetCommit(self, request, context):
        return _in_band(broker_pb2.OffsetCommitResponse, self._server.groups.commit, request)

    @error_boundary
    def OffsetFetch(self, request, context):
        return _in_band(broker_pb2.OffsetFetchResponse, self._server.groups.fetch_offsets, request)

    @error_boundary
    def DescribeGroups(self, request, context):
        return self._server.groups.describe(request)

    @error_boundary
    def ListGroups(self, request, context):
        return self._server.groups.list_groups()

    @error_boundary
    def DeleteGroups(self, request, context):
        return self._server.groups.delete_groups(request)


def _in_band(response_type, handler, *args):
    """Run a group handler; a KanalError becomes the reply's `error` and `error_message`."""
    try:
        return handler(*args)
    except KanalError as exc:
        return response_type(error=exc.code, error_message=exc.message)


def _forwarder(method: str):
    @error_boundary
    def forward(self: BrokerService, request, context: grpc.ServicerContext):
        return self._server.controllers.call(method, request)

    forward.__name__ = method
    return forward


for _method in _FORWARDED_ADMIN_CALLS:
    setattr(BrokerService, _method, _forwarder(_method))
del _method
