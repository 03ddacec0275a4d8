"""gRPC server reflection in both versions that tools speak: `grpc.reflection.v1` (current grpcurl,
grpc-reflection-js, Postman) and `grpc.reflection.v1alpha` (older tools). Used by brokers and controllers.

The grpcio-reflection package serves v1alpha only. v1 changed nothing but the package name: its messages
have the same fields under the same numbers, so the bytes on the wire are the same. One servicer
therefore answers both: v1's method is registered by hand with v1alpha's message classes, and v1's file
descriptor (v1alpha's with the package renamed) is added to the default descriptor pool so that v1 can
describe itself like every other service listed.
"""

from __future__ import annotations

from collections.abc import Iterable

import grpc
from google.protobuf import descriptor_pb2, descriptor_pool
from grpc_reflection.v1alpha import reflection, reflection_pb2, reflection_pb2_grpc

V1ALPHA_SERVICE_NAME = reflection.SERVICE_NAME
V1_PACKAGE = "grpc.reflection.v1"
V1_SERVICE_NAME = f"{V1_PACKAGE}.ServerReflection"
_V1_FILE = "grpc/reflection/v1/reflection.proto"


def _renamed(type_name: str, old_package: str) -> str:
    prefix = f".{old_package}."
    return f".{V1_PACKAGE}." + type_name[len(prefix):] if type_name.startswith(prefix) else type_name


def _rename_fields(message: descriptor_pb2.DescriptorProto, old_package: str) -> None:
    for field in message.field:
        if field.type_name:
            field.type_name = _renamed(field.type_name, old_package)
    for nested in message.nested_type:
        _rename_fields(nested, old_package)


def register_v1_descriptor() -> None:
    """Add grpc/reflection/v1/reflection.proto to the default pool (once per process)."""
    pool = descriptor_pool.Default()
    try:
        pool.FindFileByName(_V1_FILE)
        return
    except KeyError:
        pass
    proto = descriptor_pb2.FileDescriptorProto()
    reflection_pb2.DESCRIPTOR.CopyToProto(proto)
    old_package = proto.package
    proto.name = _V1_FILE
    proto.package = V1_PACKAGE
    proto.ClearField("options")  # v1alpha's language options name v1alpha's packages
    for message in proto.message_type:
        _rename_fields(message, old_package)
    for service in proto.service:
        for method in service.method:
            method.input_type = _renamed(method.input_type, old_package)
            method.output_type = _renamed(method.output_type, old_package)
    pool.Add(proto)


def enable_reflection(service_names: Iterable[str], server: grpc.Server | grpc.aio.Server) -> None:
    """Serve reflection v1 and v1alpha on `server` (sync or asyncio) for `service_names` and itself."""
    register_v1_descriptor()
    names = (*service_names, V1_SERVICE_NAME, V1ALPHA_SERVICE_NAME)
    servicer: reflection.ReflectionServicer | reflection.aio.ReflectionServicer
    if isinstance(server, grpc.aio.Server):
        servicer = reflection.aio.ReflectionServicer(names)
    else:
        servicer = reflection.ReflectionServicer(names)
    reflection_pb2_grpc.add_ServerReflectionServicer_to_server(servicer, server)
    v1 = grpc.method_handlers_generic_handler(V1_SERVICE_NAME, {
        "ServerReflectionInfo": grpc.stream_stream_rpc_method_handler(
            servicer.ServerReflectionInfo,
            request_deserializer=reflection_pb2.ServerReflectionRequest.FromString,
            response_serializer=reflection_pb2.ServerReflectionResponse.SerializeToString),
    })
    server.add_generic_rpc_handlers((v1,))
