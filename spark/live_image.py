"""LiveImage: the controllers' view of the cluster, fetched over the Controller service, to check a replay.

Two comparisons per reachable controller, both through canonical forms:

1. Its metadata log, fetched with FetchMetadata (any controller serves its committed, durable log),
   applied with kanal.metadata.apply_batch up to the offset the replay reached (from offset 0, or from
   the snapshot the replay started from when the log starts past 0), and compared with the
   replayed image through the snapshot form (image_diff.py). This catches a data dir copy that is
   damaged, stale or from another cluster.
2. Its committed in-memory image, read with DescribeMetadataImage (the image in its snapshot form), and
   compared the same way with its log applied up to the memory's offset: the image of step 1 plus the
   records the controller committed after the replay's end (a live cluster moves on meanwhile: a new
   controller's NoOp, an ISR change), so the check holds on a cluster that keeps writing.

spark/ may import kanal.v1 (stubs included) but never kanal.clients or kanal.raft, so this speaks gRPC
directly. Controllers are reached on the endpoints given; network errors are reported, not raised.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import grpc

from kanal.metadata import MetadataImage, MetadataInvariantError, apply_batch, image_from_snapshot
from kanal.metadata.log_codec import iter_batches
from kanal.net.channel_options import channel_options
from kanal.security.channel_security import ClientSecurity, open_channel
from kanal.spark.image_diff import diff_images
from kanal.v1 import controller_pb2, controller_pb2_grpc
from kanal.v1.error import ErrorCode, KanalError, error_name
from kanal.v1.error_trailer import call_error
from kanal.v1.metadata_pb2 import MetadataSnapshot

REQUEST_TIMEOUT_S = 30.0
FETCH_BYTES_MAX = 4 * 1024 * 1024
_CHANNEL_OPTIONS = channel_options(64 * 1024 * 1024)


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


def fetch_image(stub: controller_pb2_grpc.ControllerStub, offset_limit: int,
                start: MetadataSnapshot | None = None) -> tuple[MetadataImage, int]:
    """The controller's metadata log applied up to `offset_limit` (whole batches), from offset 0 or from
    the snapshot the replay started from; and its log end."""
    image = image_from_snapshot(start) if start is not None else MetadataImage()
    return image, apply_fetched(stub, image, offset_limit)


def apply_fetched(stub: controller_pb2_grpc.ControllerStub, image: MetadataImage, offset_limit: int) -> int:
    """Apply the controller's log to `image` from its next offset up to `offset_limit` (whole batches);
    returns the log end the controller reported."""
    end = 0
    while image.next_offset < offset_limit:
        reply = stub.FetchMetadata(controller_pb2.FetchMetadataRequest(
            offset=image.next_offset, max_bytes=FETCH_BYTES_MAX, max_wait_ms=0), timeout=REQUEST_TIMEOUT_S)
        if reply.error != ErrorCode.NONE:
            raise RuntimeError(
                f"FetchMetadata at {image.next_offset}: {error_name(reply.error)} {reply.error_message}"
            )
        end = reply.end_offset
        if not reply.entries:
            break
        for stored in iter_batches(reply.entries):
            if stored.base_offset < image.next_offset:
                continue
            if stored.base_offset >= offset_limit:
                return end
            apply_batch(image, stored.metadata_batch(), stored.base_offset)
    return end


def check_controller(endpoint: str, replayed: MetadataImage, start: MetadataSnapshot | None = None,
                     security: ClientSecurity | None = None) -> ControllerCheck:
    check = ControllerCheck(endpoint)
    with open_channel(endpoint, _CHANNEL_OPTIONS, security) as channel:
        stub = controller_pb2_grpc.ControllerStub(channel)
        try:
            live, end = fetch_image(stub, replayed.next_offset, start)
            check.log_end_offset = end
            check.compared_at_offset = live.next_offset
            check.differences = diff_images(replayed, live, "replay", f"controller {endpoint}")
            memory = _in_memory_differences(stub, live, endpoint)
            if memory is not None:
                check.differences += memory
                check.in_memory_compared = True
        except grpc.RpcError as exc:
            error = call_error(exc)
            # Down or not answering: unreachable, left out of the comparison. A refusal (an authorization,
            # an invalid request) is a failed check, reported as such.
            check.reachable = error.retriable
            check.error = str(error)
        except (KanalError, MetadataInvariantError, RuntimeError) as exc:  # a finding, not a crash
            check.error = f"{type(exc).__name__}: {exc}"
    return check


def _in_memory_differences(stub, live: MetadataImage, endpoint: str) -> list[str] | None:
    """Differences between the controller's committed in-memory image (DescribeMetadataImage) and its log
    applied up to the same offset: `live` (its log up to where the replay reached, already compared with
    the replay) plus the records it committed since, when a live cluster moved on meanwhile. None when
    its memory is behind that point or its log does not reach the memory's offset (nothing to compare)."""
    snapshot = stub.DescribeMetadataImage(controller_pb2.DescribeMetadataImageRequest(),
                                          timeout=REQUEST_TIMEOUT_S).snapshot
    if snapshot.next_offset < live.next_offset:
        return None
    ahead = live.copy()
    apply_fetched(stub, ahead, snapshot.next_offset)
    if ahead.next_offset != snapshot.next_offset:
        return None
    return diff_images(ahead, image_from_snapshot(snapshot), f"controller {endpoint}'s log",
                       f"controller {endpoint}'s memory")


def check_controllers(endpoints: list[str], replayed: MetadataImage, start: MetadataSnapshot | None = None,
                      security: ClientSecurity | None = None) -> list[ControllerCheck]:
    """`start`: the snapshot the replay began from (a log whose start is past 0); each controller's log
    is then applied from its offset (a controller whose log starts later reports OFFSET_OUT_OF_RANGE)."""
    return [check_controller(e, replayed, start, security) for e in endpoints]
