"""ControllerClient against two real gRPC controllers on loopback: a call that moves on from a silent
controller keeps its request id, so a late attempt there can be recognised as a repeat
(metadata/request_ids.py)."""

from __future__ import annotations

import threading
from concurrent import futures

import grpc

from kanal.broker.controller_client import ControllerClient
from kanal.v1 import admin_pb2, controller_pb2_grpc


class _Controller(controller_pb2_grpc.ControllerServicer):
    """Records the request ids of CreateTopics; a silent one holds each call until released."""

    def __init__(self, *, silent: bool) -> None:
        self.silent = silent
        self.seen: list[str] = []
        self.arrived = threading.Event()
        self.release = threading.Event()

    def CreateTopics(self, request, context):
        self.seen.append(request.request_id)
        self.arrived.set()
        if self.silent:
            self.release.wait(30)  # past the caller's attempt deadline: it moves on meanwhile
        return admin_pb2.CreateTopicsResponse(results=[admin_pb2.CreateTopicResult(name="t")])


def _serve(servicer: _Controller) -> tuple[grpc.Server, str]:
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    controller_pb2_grpc.add_ControllerServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    return server, f"127.0.0.1:{port}"


def test_a_call_retried_on_another_controller_keeps_its_request_id():
    silent, answering = _Controller(silent=True), _Controller(silent=False)
    servers = [_serve(silent), _serve(answering)]
    client = ControllerClient([endpoint for _, endpoint in servers], request_timeout_ms=10_000)
    try:
        request = admin_pb2.CreateTopicsRequest(topics=[admin_pb2.CreatableTopic(name="t", partitions=1,
                                                                                   replication_factor=1)])
        reply = client.call("CreateTopics", request, attempt_timeout_s=0.5)
        assert reply.results[0].name == "t"
        assert silent.arrived.is_set() and len(answering.seen) == 1
        assert silent.seen == answering.seen and answering.seen[0].startswith("call-")
        # A new call gets a new id.
        client.call("CreateTopics", admin_pb2.CreateTopicsRequest(), attempt_timeout_s=0.5)
        assert answering.seen[-1] != answering.seen[0]
    finally:
        silent.release.set()
        client.close()
        for server, _ in servers:
            server.stop(0)
