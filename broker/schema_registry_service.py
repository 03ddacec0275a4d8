"""The SchemaRegistry gRPC service on a broker (schema_registry.proto): every call forwarded to the active
controller with the caller's principal (`kanal-forwarded-principal`), as the Broker service's admin calls
are. The controller decides writes and answers reads from its image, and checks each call against the ACLs
on subjects for that principal, so a broker holds no registry state and no answer depends on which broker
was asked. The REST listener (schema_registry_http.py) serves through `call` too.
"""

from __future__ import annotations

from typing import Any, Protocol

from kanal.security.call_identity import PRINCIPAL_METADATA_KEY
from kanal.security.principal import call_principal
from kanal.server.error_boundary import error_boundary
from kanal.v1 import schema_registry_pb2, schema_registry_pb2_grpc

# Every method of the service, in the order schema_registry.proto lists them.
METHODS = tuple(m.name for m in schema_registry_pb2.DESCRIPTOR.services_by_name["SchemaRegistry"].methods)


class _Controllers(Protocol):
    def call(self, method: str, request: Any, *, metadata: tuple[tuple[str, str], ...] = (),
             registry: bool = False) -> Any: ...


class _Server(Protocol):
    @property
    def controllers(self) -> _Controllers: ...


class BrokerSchemaRegistry(schema_registry_pb2_grpc.SchemaRegistryServicer):
    def __init__(self, server: _Server, refuse_until_ready: Any) -> None:
        self._server = server
        self._refuse_until_ready = refuse_until_ready

    def call(self, method: str, request: Any) -> Any:
        """`method` for the principal bound to this thread: the controller's reply, or KanalError."""
        self._refuse_until_ready()
        return self._server.controllers.call(method, request, registry=True,
                                             metadata=((PRINCIPAL_METADATA_KEY, str(call_principal())),))


def _forwarder(method: str) -> Any:
    def forward(self: BrokerSchemaRegistry, request: Any, context: Any) -> Any:
        return self.call(method, request)

    forward.__name__ = forward.__qualname__ = method
    return error_boundary(forward)


for _method in METHODS:
    setattr(BrokerSchemaRegistry, _method, _forwarder(_method))
del _method
