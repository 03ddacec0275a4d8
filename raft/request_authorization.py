"""The controller's authorization of every Controller call: `ControllerGate` (the call's principal and host
against this controller's committed image, with the `--authorizer` settings) and `gated`, the one
decorator controller_service.py puts on each handler.

Who a call is: the principal the listener's authenticator bound (kanal.security.principal; ANONYMOUS without
authentication), except that a broker or another controller forwarding an admin call names its own
caller in `kanal-forwarded-principal` (kanal.security.call_identity), and that name is taken from them only.
`ControllerGate.principal` is also what the admin decisions stamp on their records, authorizer on or off.

With `--authorizer on`:

| call | needs | refused |
|---|---|---|
| RegisterBroker, BrokerHeartbeat, AlterPartition, AllocateProducerIds, AlterRemoteLog | the caller IS `User:broker-<broker_id>` of the request, and CLUSTER_ACTION on the cluster | CLUSTER_AUTHORIZATION_FAILED in the reply |
| RegisterController | the caller IS `User:controller-<controller_id>`, and CLUSTER_ACTION | as above |
| FetchMetadata, DescribeMetadataImage | CLUSTER_ACTION on the cluster (the log holds the ACLs) | in the reply / gRPC status |
| admin calls | kanal.metadata.admin_authorization | per item, or the whole call |
| DescribeQuorum, DescribeCluster | nothing | — |

So with the authorizer on, brokers must authenticate as themselves (TLS client certificates) and be
allowed CLUSTER_ACTION (usually as super users); on a listener without authentication every broker is
ANONYMOUS and cannot register.
"""  # noqa: E501 (a Markdown table keeps each row on one line)

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

import grpc

from kanal.metadata import MetadataImage
from kanal.metadata.access import Access, Admission, admitted
from kanal.metadata.acl import CLUSTER, CLUSTER_RESOURCE_NAME
from kanal.metadata.admin_authorization import ADMIN_CALLS, admit_admin
from kanal.metadata.authorizer import (
    AuthorizerConfig,
    broker_principal,
    controller_principal,
    is_server_principal,
)
from kanal.security.call_identity import effective_principal, peer_host
from kanal.security.principal import call_principal
from kanal.v1 import controller_pb2, metadata_pb2
from kanal.v1.error import ErrorCode

Handler = TypeVar("Handler", bound=Callable[..., Any])
CLUSTER_REFUSED = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
CLUSTER_ACTION = metadata_pb2.ACL_OPERATION_CLUSTER_ACTION
ReadImage = Callable[[Callable[[MetadataImage], Any]], Any]


class ControllerGate:
    """The authorizer settings and the committed image to check calls against (`read` runs a function
    on the image under the store's lock: MetadataStore.read)."""

    def __init__(self, config: AuthorizerConfig, read: ReadImage) -> None:
        self.config = config
        self._read = read

    @property
    def enabled(self) -> bool:
        return self.config.enabled

    def principal(self, context: grpc.ServicerContext) -> str:
        """The principal the call acts as (and that its records are stamped with)."""
        return effective_principal(str(call_principal()), context.invocation_metadata(), is_server_principal)

    def admit(self, method: str, request: Any, context: grpc.ServicerContext) -> Admission:
        """The rule of `method` applied under the store's lock (the image changes under it; every rule here
        decides at once, and an Admission's `finish` reads no ACLs)."""
        principal, host = self.principal(context), peer_host(context.peer())
        rule = _RULES.get(method)

        def decide(image: MetadataImage) -> Admission:
            access = Access(principal, host, image.acls, self.config)
            return rule(request, access) if rule is not None else admit_admin(method, request, access)

        return self._read(decide)

    def admit_by(self, rule: Callable[[Any, Access], Admission], request: Any,
                 context: grpc.ServicerContext) -> Admission:
        """`rule` (another service's, e.g. the schema registry's) applied as `admit` applies the
        Controller calls' rules."""
        principal, host = self.principal(context), peer_host(context.peer())
        admission: Admission = self._read(
            lambda image: rule(request, Access(principal, host, image.acls, self.config)))
        return admission

    def __repr__(self) -> str:
        return f"<ControllerGate {self.config!r}>"


def gated(handler: Handler) -> Handler:
    """Check a ControllerService handler's call with the service's ControllerGate (`self._gate`)."""
    method = handler.__name__
    if method not in _RULES and method not in ADMIN_CALLS:
        raise ValueError(f"no authorization rule for Controller call {method}")

    @functools.wraps(handler)
    def checked(self: Any, request: Any, context: grpc.ServicerContext) -> Any:
        gate: ControllerGate = self._gate
        if not gate.enabled:
            return handler(self, request, context)
        admission = gate.admit(method, request, context)
        reply = None if admission.request is None else handler(self, admission.request, context)
        return admission.reply(reply)

    return checked  # type: ignore[return-value]


def _refused_in_reply(response_type: type, message: str) -> Admission:
    fields: dict[str, Any] = {"error": CLUSTER_REFUSED}
    if "error_message" in response_type.DESCRIPTOR.fields_by_name:  # type: ignore[attr-defined]
        fields["error_message"] = message
    return Admission(None, lambda _reply: response_type(**fields))


def _own_call(response_type: type, principal_of: Callable[[Any], str]):
    """A call only the node it names may make (and only with CLUSTER_ACTION)."""

    def rule(request: Any, access: Access) -> Admission:
        own = principal_of(request)
        if access.principal != own:
            return _refused_in_reply(
                response_type, f"{access.principal} from {access.host} may not make this call for {own}"
            )
        if not access.allows(CLUSTER_ACTION, CLUSTER, CLUSTER_RESOURCE_NAME):
            return _refused_in_reply(
                response_type, access.refusal(CLUSTER_ACTION, CLUSTER, CLUSTER_RESOURCE_NAME)
            )
        return admitted(request)

    return rule


def _fetch_metadata(request: controller_pb2.FetchMetadataRequest, access: Access) -> Admission:
    if access.allows(CLUSTER_ACTION, CLUSTER, CLUSTER_RESOURCE_NAME):
        return admitted(request)
    return _refused_in_reply(controller_pb2.FetchMetadataResponse,
                             access.refusal(CLUSTER_ACTION, CLUSTER, CLUSTER_RESOURCE_NAME))


def _describe_metadata_image(request: Any, access: Access) -> Admission:
    access.require(CLUSTER_ACTION, CLUSTER, CLUSTER_RESOURCE_NAME, CLUSTER_REFUSED)
    return admitted(request)


def _open(request: Any, access: Access) -> Admission:
    return admitted(request)


_RULES: dict[str, Callable[[Any, Access], Admission]] = {
    "RegisterBroker": _own_call(
        controller_pb2.RegisterBrokerResponse, lambda r: broker_principal(r.broker_id)
    ),
    "BrokerHeartbeat": _own_call(
        controller_pb2.BrokerHeartbeatResponse, lambda r: broker_principal(r.broker_id)
    ),
    "AlterPartition": _own_call(
        controller_pb2.AlterPartitionResponse, lambda r: broker_principal(r.broker_id)
    ),
    "AllocateProducerIds": _own_call(
        controller_pb2.AllocateProducerIdsResponse, lambda r: broker_principal(r.broker_id)
    ),
    # Only the broker itself records its uploads: another principal could otherwise point a partition's
    # remote log at objects it never wrote (the leader-epoch check alone trusts the broker id it is given).
    "AlterRemoteLog": _own_call(
        controller_pb2.AlterRemoteLogResponse, lambda r: broker_principal(r.broker_id)
    ),
    "RegisterController": _own_call(
        controller_pb2.RegisterControllerResponse, lambda r: controller_principal(r.controller_id)
    ),
    "FetchMetadata": _fetch_metadata,
    "DescribeMetadataImage": _describe_metadata_image,
    "DescribeQuorum": _open,
}

