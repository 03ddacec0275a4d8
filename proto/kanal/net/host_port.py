"""The one parser of HOST:PORT text that servers and tools share (listen, advertise, peers, metrics).

HOST is a name or IPv4 address (letters, digits, dots, hyphens; at most 253) or a bracketed IPv6 address;
PORT is 1..65535. Errors are HostPortError, a ValueError whose message says what was wrong; each caller
wraps it in its own config error, naming its flag.
"""

from __future__ import annotations

import re

from kanal.v1.error import ConfigError

_HOST = re.compile(r"^[A-Za-z0-9.-]{1,253}$|^\[[0-9A-Fa-f:.]{2,45}\]$")


# Malformed HOST:PORT text: the one ConfigError; callers that know the flag wrap it naming the flag.
HostPortError = ConfigError


def parse_host_port(text: str) -> tuple[str, int]:
    """'host:port' -> (host, port); HostPortError when malformed."""
    host, sep, port_text = text.rpartition(":")
    if not sep or not host or not port_text.isdigit():
        raise HostPortError(f"expected HOST:PORT, got {text!r}")
    if not _HOST.match(host):
        raise HostPortError(f"{host!r} is not a host name or address")
    port = int(port_text)
    if not 1 <= port <= 65535:
        raise HostPortError(f"port {port} is outside 1..65535")
    return host, port
