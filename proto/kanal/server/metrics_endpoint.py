"""The Prometheus endpoint every kanal server runs: where it listens by default, the `--metrics` flag's
grammar, and a registry that carries the process and Python runtime collectors beside the node's own.

Defaults (documented in docs/metrics.md): a broker serves on port 9404, a controller on 9405 (two ports, so
one broker and one controller can share a machine with no flag), on the host of its gRPC `--listen`, so a
node bound to loopback does not expose its metrics further. `--metrics HOST:PORT` moves the endpoint,
`--metrics off` switches it off. Nodes sharing a machine beyond that (`kanal dev`, the tests) give each node
its own port.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.gc_collector import GCCollector
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector

from kanal.net.host_port import HostPortError, parse_host_port
from kanal.v1.error import ConfigError

BROKER_METRICS_PORT_DEFAULT = 9404
CONTROLLER_METRICS_PORT_DEFAULT = 9405
# The flag value that switches the endpoint off.
METRICS_OFF = "off"



# A `--metrics` value that is neither `off` nor HOST:PORT: the one ConfigError (a one-line message).
MetricsFlagError = ConfigError


@dataclass(frozen=True, slots=True)
class MetricsListen:
    host: str
    port: int

    def __str__(self) -> str:
        return f"{self.host}:{self.port}"


def metrics_listen(flag: str, listen: str, default_port: int) -> MetricsListen | None:
    """Where the endpoint binds: None for `off`; HOST:PORT as given; empty means the default port on the
    host of `listen` (the gRPC listen address, HOST:PORT)."""
    text = flag.strip()
    if text.lower() == METRICS_OFF:
        return None
    if not text:
        host = listen.rpartition(":")[0] or "127.0.0.1"
        return MetricsListen(host, default_port)
    try:
        host, port = parse_host_port(text)
    except HostPortError as exc:
        raise MetricsFlagError(f"--metrics: {exc} (or 'off')") from None
    return MetricsListen(host, port)


def node_registry() -> CollectorRegistry:
    """A registry of its own for one server process (not prometheus_client's global one, which tests
    running several nodes in one process would share), with the process (CPU, memory, open files), platform
    and garbage-collector collectors."""
    registry = CollectorRegistry()
    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)
    GCCollector(registry=registry)
    return registry


def serve_metrics(listen: MetricsListen, registry: CollectorRegistry) -> Any:
    """Serve `registry` at http://listen/metrics on a daemon thread; the HTTP server (its shutdown() and
    server_close() stop it). OSError when the address cannot be bound."""
    server, _thread = start_http_server(listen.port, addr=listen.host.strip("[]"), registry=registry)
    return server
