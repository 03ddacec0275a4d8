"""`kanal health`: ask a node's gRPC health service, for exec probes where the kubelet's own gRPC probe cannot
speak TLS (it has no TLS option at all).

    kanal health --endpoint localhost:9092 --command-config /etc/kanal/client/client.toml      # readiness
    kanal health --endpoint localhost:9092 --service kanal.liveness --command-config ...         # liveness

Exit 0 when the service answers SERVING, 1 otherwise (NOT_SERVING, unknown service, no answer within
`--timeout-ms`, a refused handshake), with one line on stderr saying which: what an exec probe needs. The
TLS files and credentials come from the client security flags or `--command-config`
(kanal.commands.command_config), the same files every other `kanal` command reads; in the production
overlay they are the node's own certificate, so the probe passes the listener's `--tls-client-auth required`.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from kanal.commands.command_config import add_client_security_flags, layered_settings, security_from
from kanal.commands.report import CommandParser, bounded_number, command_error
from kanal.security.channel_security import open_channel
from kanal.v1.error import ErrorCode, KanalError

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
PREFIX = "kanal health"


def build_parser() -> CommandParser:
    p = CommandParser(prog="kanal health", description=__doc__.split("\n\n", 1)[0])
    p.add_argument("--endpoint", required=True, help="HOST:PORT of the node's gRPC server")
    p.add_argument("--service", default="", help='health service: "" (readiness, default) or kanal.liveness')
    p.add_argument("--timeout-ms", type=bounded_number(int, 1, "a positive", 600_000), default=2000,
                   help="how long to wait for the answer (default 2000)")
    add_client_security_flags(p)
    return p


def main(argv: list[str] | None = None, environ: Mapping[str, str] | None = None) -> int:
    try:
        args = build_parser().parse_args(sys.argv[1:] if argv is None else argv)
    except SystemExit as exc:
        return EXIT_USAGE if exc.code else EXIT_OK
    try:
        security = security_from(layered_settings(args, os.environ if environ is None else environ, None,
                                                  talks_to_dev=False), interactive=False)
    except KanalError as exc:
        return command_error(PREFIX, exc.message, exc.code, EXIT_USAGE)
    with open_channel(args.endpoint, (), security) as channel:
        try:
            reply = health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(service=args.service), timeout=args.timeout_ms / 1000)
        except grpc.RpcError as exc:
            detail = exc.details() if hasattr(exc, "details") else str(exc)
            return command_error(PREFIX, f"{args.endpoint}: {exc.code().name}: {detail}",
                                 ErrorCode.BROKER_NOT_AVAILABLE)
    status = health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)
    if reply.status != health_pb2.HealthCheckResponse.SERVING:
        return command_error(PREFIX, f"{args.endpoint} service {args.service!r}: {status}",
                             ErrorCode.BROKER_NOT_AVAILABLE)
    print(f"{args.endpoint} service {args.service!r}: SERVING")
    return EXIT_OK
