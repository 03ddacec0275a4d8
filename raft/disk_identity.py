"""DiskIdentity: a controller's data directory id, checked against the quorum before it may vote (KIP-853).

Why. Raft is safe only while each voter keeps what it acknowledged. A controller restarted on an empty
disk (or another one) under its old id would vote as if it had never acknowledged anything: with one
more such voter, or with a lagging one, a leader could be elected without committed entries and
overwrite them. So a controller's disk carries an identity, and the quorum records it.

The identity is `<data_dir>/meta.properties` (format and atomic write: kanal.broker.storage
.meta_properties), made on the directory's first use with a random `directory.id`. The quorum records
`controller id -> directory id` in the metadata log (ControllerRegistrationRecord, written once and never
changed: kanal.metadata.controller_registration).

Rules, in the order a controller starts:

1. `open_identity` (before anything else touches the data directory): read meta.properties, or make it;
   the directory counts as *fresh* when it held nothing at all (a new controller, or an emptied disk).
   A file naming another node id stops the start.
2. `check_against_quorum` (the gRPC server is up, pysyncobj is not: this controller does not vote yet):
   ask the other controllers (DescribeMetadataImage: their committed image) what they recorded for this
   controller id.
   - Any of them recorded another directory id: refuse to start (one line, exit status 1). This is the
     empty-or-wrong-disk case; the quorum is not touched.
   - One recorded this directory id: start.
   - Nobody recorded anything: a fresh directory needs answers from enough controllers that one of them
     must hold the record if it had been committed: ceil(n/2) of the n-1 others (a committed record is
     on a majority, at least floor(n/2) of the others); it waits for them up to `check_timeout_s`, then
     refuses to start. A directory that is not fresh (it has its log) starts on whatever answered: this
     check is then a second look, the disk is the one the controller wrote.
3. `RegistrationThread`, after pysyncobj started: asks the active controller to record this
   controller's directory id (RegisterController) until it is recorded; a refusal (the quorum recorded
   another id meanwhile) stops the process.

Cluster identity. meta.properties also records the cluster the directory belongs to (`cluster.id`,
kanal.broker.storage.cluster_identity). A controller stops (one line naming both ids, its disk
untouched) when that id differs from its own metadata log's (at start), from a peer's committed image (rule
2), or from the log it follows once it runs (ControllerServer's step hook, which also records the id in a
directory that names none: a new directory, or one written before cluster ids).

Limits. A byte-for-byte restored backup of the right disk carries the right id and is not caught (as in
KIP-853). A controller whose disk was wiped before its id was ever recorded is indistinguishable from a
new one. A brand-new cluster starts all controllers fresh: each waits until ceil(n/2) others answer
(their gRPC servers start before this check), which `kanal dev` and the deployments do by starting them
together.
"""

from __future__ import annotations

import logging
import math
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import grpc

from kanal.broker.storage.cluster_identity import ClusterVerdict, judge_cluster_id, mismatch_message
from kanal.broker.storage.meta_properties import MetaPropertiesError, load_or_create
from kanal.metadata.controller_registration import decide_register_controller, directory_mismatch
from kanal.v1 import controller_pb2
from kanal.v1.error import ErrorCode, KanalError

_log = logging.getLogger("kanal.raft.disk_identity")

# How long a fresh controller waits for enough other controllers to answer.
CHECK_TIMEOUT_S = 60.0
# One DescribeMetadataImage call.
_CALL_TIMEOUT_S = 2.0
_RETRY_S = 0.5
# RegisterController attempts.
_REGISTER_INTERVAL_S = 1.0


class DiskIdentityError(Exception):
    """This controller must not start on this data directory; the message is one line."""


@dataclass(frozen=True, slots=True)
class DiskIdentity:
    controller_id: int
    directory_id: str
    # The data directory held nothing before this start.
    fresh: bool
    # meta.properties' cluster.id: "" until this controller learned its cluster (cluster_identity below).
    cluster_id: str = ""

    def __repr__(self) -> str:
        return (f"<DiskIdentity controller={self.controller_id} dir={self.directory_id}"
                f"{' fresh' if self.fresh else ''}>")


class _Peers(Protocol):
    def stub(self, controller_id: int): ...


class _Controller(Protocol):
    def is_active(self) -> bool: ...
    def active_hint(self) -> controller_pb2.ControllerHint: ...
    def decide_with(self, decide, request, *, principal: str, request_id: str, deadline_s: float): ...


def open_identity(data_dir: Path, controller_id: int) -> DiskIdentity:
    """Read or make the data directory's meta.properties (call before anything else writes there)."""
    fresh = not data_dir.exists() or not any(data_dir.iterdir())
    try:
        meta = load_or_create(data_dir, controller_id)
    except (MetaPropertiesError, OSError) as exc:
        raise DiskIdentityError(f"data directory {data_dir}: {exc}") from exc
    return DiskIdentity(controller_id, meta.directory_id, fresh, meta.cluster_id)


def recorded_cluster(snapshot) -> str:
    """The cluster id a MetadataSnapshot records ("" none)."""
    for record in snapshot.records:
        if record.WhichOneof("record") == "cluster_identity":
            return str(record.cluster_identity.cluster_id)
    return ""


def cluster_problem(identity: DiskIdentity, data_dir: Path | str, quorum_cluster_id: str) -> str | None:
    """The one line a controller whose disk names another cluster than `quorum_cluster_id` (its own log's,
    or a peer's) stops with; None when they agree or either is unknown."""
    if not quorum_cluster_id or not identity.cluster_id:
        return None
    if judge_cluster_id(identity.cluster_id, quorum_cluster_id) is ClusterVerdict.MISMATCH:
        return mismatch_message(f"controller {identity.controller_id}", data_dir, identity.cluster_id,
                                quorum_cluster_id)
    return None


def answers_needed(voters: int) -> int:
    """Other controllers a fresh controller must hear from: enough that one holds any committed record."""
    return min(math.ceil(voters / 2), voters - 1)


def recorded_directory(snapshot, controller_id: int) -> str | None:
    """The directory id a MetadataSnapshot records for `controller_id` (None: none)."""
    for record in snapshot.records:
        kind = record.WhichOneof("record")
        if (
            kind == "controller_registration"
            and record.controller_registration.controller_id == controller_id
        ):
            return record.controller_registration.directory_id
    return None


def check_against_quorum(identity: DiskIdentity, peers: _Peers, other_ids: list[int], *,
                         check_timeout_s: float = CHECK_TIMEOUT_S, data_dir: Path | str = "") -> None:
    """Rule 2 of the module docstring; DiskIdentityError when this controller must not vote."""
    needed = answers_needed(len(other_ids) + 1) if identity.fresh else 0
    answered: set[int] = set()
    deadline = time.monotonic() + check_timeout_s
    while True:
        for peer in other_ids:
            if peer in answered:
                continue
            try:
                reply = peers.stub(peer).DescribeMetadataImage(controller_pb2.DescribeMetadataImageRequest(),
                                                               timeout=_CALL_TIMEOUT_S)
            except grpc.RpcError as exc:
                _log.info("disk identity check: controller %d did not answer (%s)", peer, exc.code())
                continue
            answered.add(peer)
            foreign = cluster_problem(identity, data_dir, recorded_cluster(reply.snapshot))
            if foreign is not None:
                raise DiskIdentityError(foreign)
            recorded = recorded_directory(reply.snapshot, identity.controller_id)
            if recorded is not None and recorded != identity.directory_id:
                raise DiskIdentityError(
                    directory_mismatch(identity.controller_id, identity.directory_id, recorded)
                )
            if recorded == identity.directory_id:
                _log.info("disk identity %s is the one the quorum recorded", identity.directory_id)
                return
        if len(answered) >= needed:
            _log.info("disk identity %s: no record of controller %d at controllers %s", identity.directory_id,
                      identity.controller_id, sorted(answered))
            return
        if time.monotonic() >= deadline:
            raise DiskIdentityError(
                f"controller {identity.controller_id} starts on an empty data directory and only "
                f"{len(answered)} of the {needed} other controllers needed answered within "
                f"{check_timeout_s:.0f} s: it cannot tell whether the quorum knows it with another disk, so "
                "it does not vote")
        time.sleep(_RETRY_S)  # waiting for peers to come up, bounded by the deadline


class RegistrationThread:
    """Rule 3: record this controller's directory id with the active controller, then end."""

    def __init__(self, identity: DiskIdentity, controller: _Controller, peers: _Peers, on_refused) -> None:
        self._identity = identity
        self._controller = controller
        self._peers = peers
        self._on_refused = on_refused
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="disk-identity", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        request = controller_pb2.RegisterControllerRequest(controller_id=self._identity.controller_id,
                                                           directory_id=self._identity.directory_id)
        while not self._stop.wait(_REGISTER_INTERVAL_S):
            try:
                reply = self._attempt(request)
            except KanalError as exc:
                _log.info("directory id not recorded yet: %s", exc)
                continue
            except grpc.RpcError as exc:
                _log.info("directory id not recorded yet: %s", exc.code())
                continue
            if reply.error == ErrorCode.NONE:
                _log.info("the quorum records directory %s for controller %d", request.directory_id,
                          request.controller_id)
                return
            if reply.error == ErrorCode.INVALID_REQUEST:
                self._on_refused(reply.error_message)
                return
            _log.info("directory id not recorded yet: %s", ErrorCode.Name(reply.error))

    def _attempt(self, request):
        deadline_s = time.monotonic() + 5.0
        if self._controller.is_active():
            return self._controller.decide_with(
                decide_register_controller, request, principal=f"controller-{request.controller_id}",
                request_id=f"register-controller-{uuid.uuid4().hex[:16]}", deadline_s=deadline_s)
        hint = self._controller.active_hint()
        if hint.controller_id < 0 or hint.controller_id == request.controller_id:
            raise KanalError(ErrorCode.CONTROLLER_NOT_AVAILABLE, "no active controller known yet")
        return self._peers.stub(hint.controller_id).RegisterController(request, timeout=5.0)
