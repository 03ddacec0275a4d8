"""LiveImage: the controllers' view of the cluster, fetched over the Controller service, to check a replay.

Two comparisons per reachable controller, both through canonical forms:

1. Its metadata log, fetched with FetchMetadata (any controller serves its committed, durable log),
   applied with kanal.metadata.apply_batch up to the offset the replay reached, and compared with the
   replayed image through the snapshot form (image_diff.py). This catches a data dir copy that is
   damaged, stale or from another cluster.
2. Its in-memory image, read with the controller's own read functions: DescribeCluster answers with
   `describe_brokers(image)`, DescribeConfigs with `describe_configs(image, request)`. The same functions
   run on the replayed image must give the same messages. Compared only when the controller's durable log
   ends where the replay ended (a live cluster may have moved on).

spark/ may import kanal.v1 (stubs included) but never kanal.clients or kanal.raft, so this speaks gRPC
directly. Controllers are reached on the endpoints given; network errors are reported, not raised.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import grpc

from kanal.metadata import (
    MetadataImage,
    MetadataInvariantError,
    apply_batch,
    describe_brokers,
    describe_configs,
)
from kanal.metadata.log_codec import decode_metadata_entries
from kanal.spark.image_diff import diff_images
from kanal.v1 import admin_pb2, controller_pb2, controller_pb2_grpc, metadata_pb2
from kanal.v1.error import ErrorCode, KanalError, error_name

REQUEST_TIMEOUT_S = 30.0
FETCH_BYTES_MAX = 4 * 1024 * 1024
_CHANNEL_OPTIONS = [("grpc.max_receive_message_length", 64 * 1024 * 1024)]


@dataclass(slots=True)
class ControllerCheck:
    """The outcome of comparing the replay with one controller."""

    endpoint: str
    reachable: bool = True
    error: str | None = None
    log_end_offset: int | None = None
    compared_at_offset: int | None = None
    differences: list[str] = field(default_factory=list)
    in_memory_compared: bool = False

    @property
    def equal(self) -> bool:
        return self.reachable and self.error is None and not self.differences


def fetch_image(stub: controller_pb2_grpc.ControllerStub, offset_limit: int) -> tuple[MetadataImage, int]:
    """The controller's metadata log applied up to `offset_limit` (whole batches); and its log end."""
    image = MetadataImage()
    end = 0
    while image.next_offset < offset_limit:
        reply = stub.FetchMetadata(controller_pb2.FetchMetadataRequest(
            offset=image.next_offset, max_bytes=FETCH_BYTES_MAX, max_wait_ms=0), timeout=REQUEST_TIMEOUT_S)
        if reply.error != ErrorCode.NONE:
            raise RuntimeError(f"FetchMetadata at {image.next_offset}: {error_name(reply.error)} {reply.error_message}")
        end = reply.end_offset
        if not reply.entries:
            break
        for stored in decode_metadata_entries(reply.entries):
            if stored.base_offset < image.next_offset:
                continue
            if stored.base_offset >= offset_limit:
                return image, end
            apply_batch(image, stored.batch, stored.base_offset)
    return image, end


def check_controller(endpoint: str, replayed: MetadataImage) -> ControllerCheck:
    check = ControllerCheck(endpoint)
    with grpc.insecure_channel(endpoint, options=_CHANNEL_OPTIONS) as channel:
        stub = controller_pb2_grpc.ControllerStub(channel)
        try:
            live, end = fetch_image(stub, replayed.next_offset)
            check.log_end_offset = end
            check.compared_at_offset = live.next_offset
            check.differences = diff_images(replayed, live, "replay", f"controller {endpoint}")
            if end == replayed.next_offset:
                check.differences += _in_memory_differences(stub, replayed, endpoint)
                check.in_memory_compared = True
        except grpc.RpcError as exc:
            check.reachable = False
            check.error = f"{exc.code().name}: {exc.details()}"
        except (KanalError, MetadataInvariantError, RuntimeError) as exc:  # a finding, not a crash
            check.error = f"{type(exc).__name__}: {exc}"
    return check


def _in_memory_differences(stub, replayed: MetadataImage, endpoint: str) -> list[str]:
    out = []
    cluster = stub.DescribeCluster(admin_pb2.DescribeClusterRequest(), timeout=REQUEST_TIMEOUT_S)
    ours = sorted(describe_brokers(replayed), key=lambda b: b.broker_id)
    theirs = sorted(cluster.brokers, key=lambda b: b.broker_id)
    if [b.SerializeToString(deterministic=True) for b in ours] != [b.SerializeToString(deterministic=True) for b in theirs]:
        out.append(f"brokers differ from controller {endpoint}'s memory: replay {[str(b).replace(chr(10), ' ') for b in ours]} "
                   f"vs {[str(b).replace(chr(10), ' ') for b in theirs]}")
    resources = [admin_pb2.ConfigResource(type=metadata_pb2.CONFIG_RESOURCE_TOPIC, name=name)
                 for name in sorted(replayed.topics)]
    if resources:
        request = admin_pb2.DescribeConfigsRequest(resources=resources)
        ours_configs = describe_configs(replayed, request)
        theirs_configs = stub.DescribeConfigs(request, timeout=REQUEST_TIMEOUT_S)
        if ours_configs.SerializeToString(deterministic=True) != theirs_configs.SerializeToString(deterministic=True):
            out.append(f"topic configs differ from controller {endpoint}'s memory")
    return out


def check_controllers(endpoints: list[str], replayed: MetadataImage) -> list[ControllerCheck]:
    return [check_controller(e, replayed) for e in endpoints]
