"""host:port, parsed one way for every setting that names an endpoint: a client's bootstrap list, a
broker's listener, advertised address and controller list, a controller's listeners and quorum peers.

The host is a name or IPv4 address (letters, digits, dots and dashes) or a bracketed IPv6 address; the port
is 1..65535. Each config turns the ValueError into its own one-line error naming the setting.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_HOST = re.compile(r"^[A-Za-z0-9.-]{1,253}$|^\[[0-9A-Fa-f:.]{2,45}\]$")


@dataclass(frozen=True, slots=True)
class HostPort:
    host: str
    port: int

    def __str__(self) -> str:
        return f"{self.host}:{self.port}"


def parse_host_port(text: str) -> HostPort:
    """'host:port' -> HostPort; ValueError with a one-line reason (not naming the setting) otherwise."""
    host, sep, port_text = text.rpartition(":")
    if not sep or not host or not port_text.isdigit():
        raise ValueError(f"expected HOST:PORT, got {text!r}")
    if not _HOST.match(host):
        raise ValueError(f"{host!r} is not a host name or address")
    port = int(port_text)
    if not 1 <= port <= 65535:
        raise ValueError(f"port {port} is outside 1..65535")
    return HostPort(host, port)
