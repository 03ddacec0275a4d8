"""The SchemaRegistry service on a controller (schema_registry.proto): brokers forward their clients' calls
here with the caller's principal; only the active controller answers, others refuse with NOT_CONTROLLER
naming it (the brokers' ControllerClient goes there).

Every call, reads included, is a decision of the active controller (`ActiveController.decide_with`): a
write's records are committed before it answers, and a read — a decision without records — waits for the
writes in flight before it reads, so no answer contradicts one given before it, by any node, across
failover too (a new active controller has applied every committed record before it decides).

Authorization: registry_authorization.py's rules for the principal the broker forwarded (ACLs on
subjects), with `--authorizer on`. Schemas are parsed through one CachingParser: decisions run one at a
time, and a registration parses the subject's versions, which seldom change.
"""

from __future__ import annotations

import base64
import time
import uuid
from collections.abc import Callable
from typing import Any

import grpc

from kanal.metadata import MetadataImage
from kanal.metadata.decision import Decision
from kanal.metadata.image import SchemaId
from kanal.metadata.registry_authorization import admit_registry
from kanal.metadata.schema_registry import (
    decide_delete_subject,
    decide_delete_version,
    decide_register_schema,
    decide_set_registry_config,
    decide_set_registry_mode,
)
from kanal.metadata.schema_registry_reads import (
    check_compatibility,
    get_referenced_by,
    get_registry_config,
    get_registry_mode,
    get_schema,
    get_version,
    list_subjects,
    list_versions,
    lookup_schema,
)
from kanal.metadata.schema_registry_rules import CachingParser, SchemaParser, parse_stored
from kanal.raft.request_authorization import ControllerGate
from kanal.schemas.schema_types import SchemaType
from kanal.server.error_boundary import error_boundary_with_hint
from kanal.v1 import schema_registry_pb2 as pb
from kanal.v1 import schema_registry_pb2_grpc
from kanal.v1.error import ErrorCode, KanalError

_DEADLINE_MARGIN_S = 0.05


class ControllerSchemaRegistry(schema_registry_pb2_grpc.SchemaRegistryServicer):
    def __init__(self, controller: Any, gate: ControllerGate, request_timeout_ms: int, controller_id: int,
                 hint: Callable[[KanalError], str]) -> None:
        self._controller = controller
        self._gate = gate
        self._timeout_s = request_timeout_ms / 1000
        self._controller_id = controller_id
        self.hint = hint  # the active controller's host:port a refusal names
        self._parse = CachingParser()

    def _serve(self, method: str, request: Any, context: grpc.ServicerContext, decide: Callable[..., Any]
               ) -> Any:
        principal = self._gate.principal(context)
        admission = None
        if self._gate.enabled:
            admission = self._gate.admit_by(lambda r, access: admit_registry(method, r, access), request,
                                            context)
            request = admission.request
        remaining = context.time_remaining()
        budget_s = self._timeout_s if remaining is None else min(self._timeout_s,
                                                                  max(0.0, remaining - _DEADLINE_MARGIN_S))
        request_id = getattr(request, "request_id", "") or f"{self._controller_id}-{uuid.uuid4().hex}"
        reply = self._controller.decide_with(decide, request, principal=principal, request_id=request_id,
                                             deadline_s=time.monotonic() + budget_s)
        return reply if admission is None else admission.reply(reply)

    def _write(self, decide: Callable[..., Any], *, parses: bool) -> Callable[..., Any]:
        def run(image: MetadataImage, request: Any, **stamp: Any) -> Any:
            return decide(image, request, parse=self._parse, **stamp) if parses else decide(image, request,
                                                                                             **stamp)

        return run

    def _read(self, read: Callable[..., Any], *, parses: bool = False) -> Callable[..., Decision[Any]]:
        """A read as a decision without records (module docstring)."""

        def run(image: MetadataImage, request: Any, **_stamp: Any) -> Decision[Any]:
            return Decision([], read(image, request, parse=self._parse) if parses else read(image, request))

        return run


def _get_schema(image: MetadataImage, request: pb.GetSchemaRequest, *, parse: SchemaParser
                ) -> pb.GetSchemaResponse:
    """GetSchema; with `format=serialized` a Protobuf schema comes as its base64 FileDescriptorProto
    (what confluent-kafka's Protobuf deserializer asks for), its references resolved as registered."""
    reply = get_schema(image, request)
    if request.format != "serialized" or reply.error != ErrorCode.NONE:
        return reply
    stored = image.schemas[SchemaId(request.id)]
    if stored.schema_type is not SchemaType.PROTOBUF:
        return reply
    parsed = parse_stored(image, stored, parse)
    reply.schema.schema = base64.b64encode(parsed.serialized()).decode()  # type: ignore[attr-defined]
    return reply


_rpc = error_boundary_with_hint(lambda service, exc: service.hint(exc))

# method -> (decision, whether it parses schemas)
_WRITES: dict[str, tuple[Callable[..., Any], bool]] = {
    "Register": (decide_register_schema, True),
    "DeleteSubject": (decide_delete_subject, False),
    "DeleteVersion": (decide_delete_version, False),
    "SetConfig": (decide_set_registry_config, False),
    "SetMode": (decide_set_registry_mode, False),
}
# method -> (read of the image, whether it parses schemas)
_READS: dict[str, tuple[Callable[..., Any], bool]] = {
    "GetSchema": (_get_schema, True),
    "ListSubjects": (list_subjects, False),
    "ListVersions": (list_versions, False),
    "GetVersion": (get_version, False),
    "LookupSchema": (lookup_schema, True),
    "CheckCompatibility": (check_compatibility, True),
    "GetConfig": (get_registry_config, False),
    "GetMode": (get_registry_mode, False),
    "GetReferencedBy": (get_referenced_by, False),
}


def _handler(method: str) -> Any:
    def handle(self: ControllerSchemaRegistry, request: Any, context: grpc.ServicerContext) -> Any:
        if method in _WRITES:
            write, parses = _WRITES[method]
            decide = self._write(write, parses=parses)
        else:
            read, parses = _READS[method]
            decide = self._read(read, parses=parses)
        return self._serve(method, request, context, decide)

    handle.__name__ = handle.__qualname__ = method
    return _rpc(handle)


for _method in (*_WRITES, *_READS):
    setattr(ControllerSchemaRegistry, _method, _handler(_method))
del _method
