"""Controller registration: the quorum records each controller's data directory id (KIP-853).

A controller's data directory gets a random `directory.id` on first use (raft/disk_identity.py). Each
controller asks the active controller to record it once it runs; the record is written once and never
changed:

- not recorded yet                      -> one ControllerRegistrationRecord;
- recorded with the same id             -> nothing to write (a retry, or a restart on the same disk);
- recorded with another id              -> INVALID_REQUEST, nothing written: that controller runs on an
                                           empty or another disk and must not vote (it checks this at start
                                           and exits; this refusal is the second line).

What it buys: a controller restarted on an empty disk cannot silently become a voter again with a log
that lost entries it had acknowledged (it could help elect a leader without them and overwrite
committed entries). A byte-for-byte restored backup of the right disk carries the right id: this check
does not catch it (KIP-853 has the same limit).
"""

from __future__ import annotations

from kanal.metadata.decision import Decision, Stamp
from kanal.metadata.image import MetadataImage
from kanal.v1 import controller_pb2, metadata_pb2
from kanal.v1.error import ErrorCode


def decide_register_controller(
    image: MetadataImage,
    request: controller_pb2.RegisterControllerRequest,
    *,
    now_ms: int,
    principal: str,
    request_id: str,
) -> Decision[controller_pb2.RegisterControllerResponse]:
    """Record a controller's directory id, or refuse another one than recorded."""
    if request.controller_id < 0 or not request.directory_id:
        return Decision(
            [],
            controller_pb2.RegisterControllerResponse(
                error=ErrorCode.INVALID_REQUEST,
                error_message="a controller registration needs an id >= 0 and a directory id",
            ),
        )
    recorded = image.controller_directories.get(request.controller_id)
    if recorded == request.directory_id:
        return Decision([], controller_pb2.RegisterControllerResponse())
    if recorded is not None:
        return Decision([], controller_pb2.RegisterControllerResponse(
            error=ErrorCode.INVALID_REQUEST,
            error_message=directory_mismatch(request.controller_id, request.directory_id, recorded)))
    record = Stamp(now_ms, principal, request_id).record(
        controller_registration=metadata_pb2.ControllerRegistrationRecord(
            controller_id=request.controller_id, directory_id=request.directory_id))
    return Decision([record], controller_pb2.RegisterControllerResponse())


def directory_mismatch(controller_id: int, directory_id: str, recorded: str) -> str:
    """The one line a controller on the wrong disk is refused (or exits) with."""
    return (f"controller {controller_id} runs on data directory id {directory_id}, but the quorum recorded "
            f"{recorded} for it: its disk is empty or not the one it voted with, so it must not vote "
            f"(bring back its disk, or give the new disk a new controller id)")
