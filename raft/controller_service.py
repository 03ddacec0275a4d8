"""ControllerService: the kanal.v1.Controller gRPC service — a thin shell over the ActiveController.

Who answers what:
- Broker calls (RegisterBroker, BrokerHeartbeat, AlterPartition, AllocateProducerIds, AlterRemoteLog)
  are answered only by the active controller. A standby answers with error NOT_CONTROLLER and
  `active_controller` set (or CONTROLLER_NOT_AVAILABLE when no controller is active): a broker keeps its
  session with the active controller itself, so it should talk to it directly.
- Admin writes (CreateTopics, DeleteTopics, CreatePartitions, AlterConfigs, AlterClientQuotas, CreateAcls,
  DeleteAcls, AlterUserScramCredentials, AlterPartitionReassignments, ElectLeaders, UnregisterBroker,
  AddVoter, RemoveVoter)
  reaching a standby are forwarded to the active controller, so a tool may use any controller; their
  replies have no field to name the active controller. A forwarded call is not forwarded again; it
  carries its caller's principal (`kanal-forwarded-principal`).
- Reads (FetchMetadata, DescribeConfigs, DescribeClientQuotas, DescribeAcls, DescribeUserScramCredentials,
  DescribeCluster, DescribeQuorum, DescribeMetadataImage, ListPartitionReassignments) are
  answered by any controller from its own committed state, which may trail the active controller's by
  the few milliseconds it takes an entry to apply there.

Errors. Per-item failures are in the replies (kanal.metadata's decisions). A call that fails as a whole
carries the ErrorCode in the reply's `error` field where it has one (broker calls, FetchMetadata), else
as a gRPC status (kanal.server.error_boundary, the boundary every server shares) with trailing metadata
`kanal-error-code` (the number) and `kanal-error-message`. Anything that is not a KanalError is a bug: logged
with its traceback and answered INTERNAL with UNKNOWN_SERVER_ERROR.

Deadlines: a write waits at most `request_timeout_ms`, less when the caller's gRPC deadline is sooner
(the reply must reach the caller before it gives up). Principal: admin calls stamp the caller's principal
(`ControllerGate.principal`: as authenticated, `User:ANONYMOUS` without authentication, or the original
caller a broker or controller forwards for), broker calls "broker-<id>". Request id: the request's, or
"<controller id>-<random>".

Authorization: `@gated` (request_authorization.py) on every handler checks the call against the ACLs
when `--authorizer on`.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable
from typing import Any

import grpc

from kanal.metadata import (
    decide_allocate_producer_ids,
    decide_alter_client_quotas,
    decide_alter_configs,
    decide_alter_partition,
    decide_alter_partition_reassignments,
    decide_alter_remote_log,
    decide_alter_user_scram_credentials,
    decide_create_acls,
    decide_create_partitions,
    decide_create_topics,
    decide_decommission_broker,
    decide_delete_acls,
    decide_delete_topics,
    decide_elect_leaders,
    decide_register_controller,
    describe_acls,
    describe_brokers,
    describe_client_quotas,
    describe_configs,
    describe_user_scram_credentials,
    image_to_snapshot,
    list_partition_reassignments,
)
from kanal.metadata.image import MetadataImage
from kanal.metadata.request_ids import refuse_repeated
from kanal.raft.active_controller import ActiveController
from kanal.raft.controller_config import ControllerConfig
from kanal.raft.metadata_store import MetadataStore
from kanal.raft.peer_client import FORWARDED_METADATA_KEY, PeerClient
from kanal.raft.quorum_change import QuorumChange
from kanal.raft.quorum_status import QuorumStatus
from kanal.raft.request_authorization import ControllerGate, gated
from kanal.security.call_identity import PRINCIPAL_METADATA_KEY
from kanal.server.error_boundary import Forwarded, error_boundary_with_hint
from kanal.v1 import admin_pb2, controller_pb2, controller_pb2_grpc
from kanal.v1.error import ErrorCode, KanalError
from kanal.v1.error_trailer import ERROR_CODE_KEY

_log = logging.getLogger("kanal.raft.service")

# FetchMetadata: bytes per reply when the request says 0, and at most (at least one batch is returned
# whatever the limit, and a batch is at most metadata_batch_bytes_max).
FETCH_BYTES_DEFAULT = 1024 * 1024
FETCH_BYTES_MAX = 3 * 1024 * 1024
# Part of the caller's remaining deadline kept back so the reply arrives before the caller gives up.
_DEADLINE_MARGIN_S = 0.05

def _active_controller(service: ControllerService, exc: KanalError) -> str:
    """What a refusal says of the active controller (kanal-active-controller): its host:port, or ""."""
    active = service._hint(exc)
    return active.endpoint if active is not None else ""


# Turns escaping errors into a gRPC status with kanal's trailer; a refusal names the active controller.
_rpc = error_boundary_with_hint(_active_controller)


class ControllerService(controller_pb2_grpc.ControllerServicer):
    def __init__(
        self,
        config: ControllerConfig,
        controller: ActiveController,
        store: MetadataStore,
        quorum_status: Callable[[], QuorumStatus],
        peers: PeerClient,
        *,
        quorum: Callable[[], QuorumChange] | None = None,
    ) -> None:
        self._config = config
        self._quorum = quorum
        self._controller = controller
        self._store = store
        self._quorum_status = quorum_status
        self._peers = peers
        self._gate = ControllerGate(config.authorizer, store.read)

    def __repr__(self) -> str:
        return f"<ControllerService controller={self._config.controller_id}>"

    @property
    def gate(self) -> ControllerGate:
        """This controller's authorization of calls (the schema registry's service checks with it too)."""
        return self._gate

    def active_endpoint(self, exc: KanalError) -> str:
        """What a refusal says of the active controller: its host:port, or ""."""
        return _active_controller(self, exc)

    # -- broker calls ------------------------------------------------------------------------------

    @_rpc
    @gated
    def RegisterBroker(self, request, context):
        try:
            return self._controller.register_broker(
                request, request_id=self._request_id(""), deadline_s=self._deadline(context)
            )
        except KanalError as exc:
            return controller_pb2.RegisterBrokerResponse(
                error=exc.code, error_message=exc.message, active_controller=self._hint(exc)
            )

    @_rpc
    @gated
    def BrokerHeartbeat(self, request, context):
        try:
            return self._controller.broker_heartbeat(
                request, request_id=self._request_id(""), deadline_s=self._deadline(context)
            )
        except KanalError as exc:
            return controller_pb2.BrokerHeartbeatResponse(
                error=exc.code,
                error_message=exc.message,
                active_controller=self._hint(exc),
                metadata_end_offset=self._store.durable_end_offset,
                controller_epoch=self._store.controller_epoch,
            )

    @_rpc
    @gated
    def AlterPartition(self, request, context):
        return self._broker_write("AlterPartition", decide_alter_partition, request, context,
                                  controller_pb2.AlterPartitionResponse)

    @_rpc
    @gated
    def RegisterController(self, request, context):
        """A controller records its data directory id (raft/disk_identity.py); decided by the active one."""
        try:
            return self._controller.decide_with(
                decide_register_controller,
                request,
                principal=f"controller-{request.controller_id}",
                request_id=self._request_id(""),
                deadline_s=self._deadline(context),
            )
        except KanalError as exc:
            return controller_pb2.RegisterControllerResponse(error=exc.code, error_message=exc.message,
                                                            active_controller=self._hint(exc))

    @_rpc
    @gated
    def AllocateProducerIds(self, request, context):
        return self._broker_write("AllocateProducerIds", decide_allocate_producer_ids, request, context,
                                  controller_pb2.AllocateProducerIdsResponse)

    @_rpc
    @gated
    def AlterRemoteLog(
        self, request: controller_pb2.AlterRemoteLogRequest, context: grpc.ServicerContext
    ) -> controller_pb2.AlterRemoteLogResponse:
        """Tiered storage: a leader records uploaded segments or a new remote log start
        (kanal.metadata.remote_log); decided on the active controller's image, so a deposed leader is
        fenced there."""
        reply: controller_pb2.AlterRemoteLogResponse = self._broker_write(
            "AlterRemoteLog", decide_alter_remote_log, request, context, controller_pb2.AlterRemoteLogResponse
        )
        return reply

    @_rpc
    @gated
    def FetchMetadata(self, request, context):
        if request.max_bytes < 0 or request.max_wait_ms < 0:
            raise KanalError(ErrorCode.INVALID_REQUEST, "max_bytes and max_wait_ms must be >= 0")
        bytes_max = min(request.max_bytes or FETCH_BYTES_DEFAULT, FETCH_BYTES_MAX)
        wait_s = min(request.max_wait_ms, self._config.fetch_wait_ms_max) / 1000
        wait_s = min(wait_s, max(0.0, self._deadline(context) - time.monotonic()))
        try:
            result = self._store.fetch(request.offset, bytes_max, wait_s)
        except KanalError as exc:
            if exc.code != ErrorCode.OFFSET_OUT_OF_RANGE:
                raise
            return controller_pb2.FetchMetadataResponse(
                error=exc.code,
                error_message=exc.message,
                start_offset=self._store.log_start_offset,
                end_offset=self._store.durable_end_offset,
                controller_epoch=self._store.controller_epoch,
            )
        return controller_pb2.FetchMetadataResponse(
            entries=result.entries,
            end_offset=result.end_offset,
            start_offset=result.start_offset,
            controller_epoch=result.controller_epoch,
        )

    # -- admin writes ------------------------------------------------------------------------------

    @_rpc
    @gated
    def CreateTopics(self, request, context):
        return self._admin_write("CreateTopics", decide_create_topics, request, context, with_rng=True)

    @_rpc
    @gated
    def DeleteTopics(self, request, context):
        return self._admin_write("DeleteTopics", decide_delete_topics, request, context)

    @_rpc
    @gated
    def CreatePartitions(self, request, context):
        return self._admin_write(
            "CreatePartitions", decide_create_partitions, request, context, with_rng=True
        )

    @_rpc
    @gated
    def AlterConfigs(self, request, context):
        return self._admin_write("AlterConfigs", decide_alter_configs, request, context)

    @_rpc
    @gated
    def AlterClientQuotas(self, request, context):
        return self._admin_write("AlterClientQuotas", decide_alter_client_quotas, request, context)

    @_rpc
    @gated
    def CreateAcls(self, request, context):
        self._require_acls_enforced("CreateAcls", context)
        return self._admin_write("CreateAcls", decide_create_acls, request, context)

    @_rpc
    @gated
    def DeleteAcls(self, request, context):
        self._require_acls_enforced("DeleteAcls", context)
        return self._admin_write("DeleteAcls", decide_delete_acls, request, context)

    @_rpc
    @gated
    def AlterUserScramCredentials(self, request, context):
        return self._admin_write(
            "AlterUserScramCredentials", decide_alter_user_scram_credentials, request, context
        )

    @_rpc
    @gated
    def AlterPartitionReassignments(self, request, context):
        return self._admin_write("AlterPartitionReassignments", decide_alter_partition_reassignments, request,
                                 context)

    @_rpc
    @gated
    def ElectLeaders(self, request, context):
        return self._admin_write("ElectLeaders", decide_elect_leaders, request, context)

    @_rpc
    @gated
    def UnregisterBroker(self, request, context):
        return self._admin_write("UnregisterBroker", decide_decommission_broker, request, context)

    @_rpc
    @gated
    def AddVoter(self, request, context):
        return self._voter_change("AddVoter", lambda q: q.add_decider(request), request, context)

    @_rpc
    @gated
    def RemoveVoter(self, request, context):
        return self._voter_change("RemoveVoter", lambda q: q.remove_decider(), request, context)

    def _voter_change(self, method: str, decider: Callable[[QuorumChange], Any], request: Any,
                      context: grpc.ServicerContext) -> Any:
        """A quorum change (quorum_change.py): decided like any admin write (a standby forwards it), then,
        on the active controller, the reply waits for pysyncobj's membership to match the record."""
        if self._quorum is None:
            raise KanalError(ErrorCode.CONTROLLER_NOT_AVAILABLE, "quorum changes are not served here")
        quorum = self._quorum()
        was_active = self._controller.is_active()
        reply = self._admin_write(method, decider(quorum), request, context)
        if reply.error == ErrorCode.NONE and was_active and self._controller.is_active():
            quorum.wait_converged(list(reply.voter_ids), self._deadline(context))
        return reply

    # -- reads -------------------------------------------------------------------------------------

    @_rpc
    @gated
    def ListPartitionReassignments(self, request, context):
        return self._store.read(lambda image: list_partition_reassignments(image, request))

    @_rpc
    @gated
    def DescribeUserScramCredentials(self, request, context):
        return self._store.read(lambda image: describe_user_scram_credentials(image, request))

    @_rpc
    @gated
    def DescribeConfigs(self, request, context):
        return self._store.read(lambda image: describe_configs(image, request))

    @_rpc
    @gated
    def DescribeClientQuotas(self, request, context):
        return self._store.read(lambda image: describe_client_quotas(image, request))

    @_rpc
    @gated
    def DescribeAcls(self, request, context):
        self._require_acls_enforced("DescribeAcls", context)
        return self._store.read(lambda image: describe_acls(image, request))

    @_rpc
    @gated
    def DescribeQuorum(self, request, context):
        return self._quorum_status().describe(self._store.durable_end_offset)

    @_rpc
    @gated
    def DescribeCluster(self, request, context):
        return admin_pb2.DescribeClusterResponse(
            cluster_id=self._store.read(lambda image: image.cluster_id),
            brokers=self._store.read(describe_brokers),
            quorum=self._quorum_status().describe(self._store.durable_end_offset),
        )

    @_rpc
    @gated
    def DescribeMetadataImage(self, request, context):
        return controller_pb2.DescribeMetadataImageResponse(snapshot=self._store.read(image_to_snapshot))

    # -- helpers -----------------------------------------------------------------------------------

    def _require_acls_enforced(self, method: str, context: grpc.ServicerContext) -> None:
        """SECURITY_DISABLED for an ACL call made here directly while this controller does not enforce
        ACLs. A call a broker or another controller forwards was already held to that node's own
        authorizer (a broker forwards ACL calls only while it enforces them), so it is served: brokers
        that check ACLs beside controllers that do not is a working setup (tests/cluster/test_acls.py)."""
        forwarded = any(key in (FORWARDED_METADATA_KEY, PRINCIPAL_METADATA_KEY)
                        for key, _ in context.invocation_metadata())
        if not forwarded:
            self._config.authorizer.require_enforced(method, f"controller {self._config.controller_id}")

    def _broker_write(
        self,
        method: str,
        decide: Callable[..., Any],
        request: Any,
        context: grpc.ServicerContext,
        response_type: type,
    ) -> Any:
        """A broker's write, decided by the active controller and stamped `broker-<id>`. A refusal of the
        whole call (NOT_CONTROLLER, CONTROLLER_NOT_AVAILABLE, a timeout) goes into the reply's `error`
        (and `error_message` where the reply has one), naming the active controller: brokers keep their
        session with it and go there directly."""
        try:
            return self._controller.decide_with(
                decide,
                request,
                principal=f"broker-{request.broker_id}",
                request_id=self._request_id(""),
                deadline_s=self._deadline(context),
            )
        except KanalError as exc:
            _log.info("%s from broker %d failed: %s", method, request.broker_id, exc)
            fields: dict[str, Any] = {"error": exc.code, "active_controller": self._hint(exc)}
            if "error_message" in response_type.DESCRIPTOR.fields_by_name:  # type: ignore[attr-defined]
                fields["error_message"] = exc.message
            return response_type(**fields)

    def _admin_write(
        self,
        method: str,
        decide: Callable[..., Any],
        request: Any,
        context: grpc.ServicerContext,
        *,
        with_rng: bool = False,
    ) -> Any:
        deadline_s = self._deadline(context)
        if not request.request_id:
            request.request_id = self._request_id("")
        forwarded = any(key == FORWARDED_METADATA_KEY for key, _ in context.invocation_metadata())
        principal = self._gate.principal(context)

        def once(image: MetadataImage, request: Any, **given: Any) -> Any:
            # A broker keeps a call's request id across controllers: a late attempt of a call already
            # carried out must not be carried out again (metadata/request_ids.py).
            refuse_repeated(image, given["request_id"])
            return decide(image, request, **given)

        try:
            return self._controller.decide_with(
                once,
                request,
                principal=principal,
                request_id=request.request_id,
                deadline_s=deadline_s,
                with_rng=with_rng,
            )
        except KanalError as exc:
            if exc.code != ErrorCode.NOT_CONTROLLER or forwarded:
                raise
            return self._forward(method, request, deadline_s, principal)

    def _forward(self, method: str, request: Any, deadline_s: float, principal: str) -> Any:
        hint = self._controller.active_hint()
        if hint.controller_id < 0 or hint.controller_id == self._config.controller_id:
            raise self._controller.not_active_error()
        call = getattr(self._peers.stub(hint.controller_id), method)
        try:
            return call(
                request,
                timeout=max(0.001, deadline_s - time.monotonic()),
                metadata=(
                    (FORWARDED_METADATA_KEY, str(self._config.controller_id)),
                    (PRINCIPAL_METADATA_KEY, principal),
                ),
            )
        except grpc.RpcError as exc:
            trailing = tuple((k, v) for k, v in (exc.trailing_metadata() or ()) if isinstance(v, str))
            if exc.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED) and not any(
                k == ERROR_CODE_KEY for k, _ in trailing
            ):
                # The transport failed (the active controller died, or the call ran out of time): the
                # caller learns it as a retriable controller error, not as a bare gRPC failure.
                code = (
                    ErrorCode.REQUEST_TIMED_OUT
                    if exc.code() == grpc.StatusCode.DEADLINE_EXCEEDED
                    else ErrorCode.CONTROLLER_NOT_AVAILABLE
                )
                raise KanalError(
                    code, f"forwarding to controller {hint.controller_id} failed: {exc.details()}"
                )
            raise Forwarded(exc.code(), exc.details() or "", trailing) from None

    def _deadline(self, context: grpc.ServicerContext) -> float:
        budget_s = self._config.request_timeout_ms / 1000
        remaining = context.time_remaining()
        if remaining is not None:
            budget_s = min(budget_s, max(0.0, remaining - min(_DEADLINE_MARGIN_S, remaining / 10)))
        return time.monotonic() + budget_s

    def _request_id(self, given: str) -> str:
        return given or f"{self._config.controller_id}-{uuid.uuid4().hex}"

    def _hint(self, exc: KanalError) -> controller_pb2.ControllerHint | None:
        if exc.code not in (ErrorCode.NOT_CONTROLLER, ErrorCode.CONTROLLER_NOT_AVAILABLE):
            return None
        try:
            return self._controller.active_hint()
        except KanalError:  # still starting: no hint to give
            return None
