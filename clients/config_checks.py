"""Checks the client configs (ProducerConfig, ConsumerConfig) share: each bad value is INVALID_CONFIG
naming the setting, at construction, instead of a surprise later (a truthy "no" switching a flag on, a
number where a str goes, a bootstrap that is not host:port)."""

from __future__ import annotations

from typing import NoReturn

from kanal.net.host_port import parse_host_port
from kanal.v1.error import ConfigError


def bad_config(message: str) -> NoReturn:
    raise ConfigError(message)


def check_int(name: str, value: object, lo: int, hi: int) -> None:
    # bool is an int subclass; True as a byte count is a mistake, not 1.
    if not isinstance(value, int) or isinstance(value, bool) or not lo <= value <= hi:
        bad_config(f"{name} must be an integer in [{lo}, {hi}], got {value!r}")


def check_bool(name: str, value: object) -> None:
    if not isinstance(value, bool):
        bad_config(f"{name} must be True or False, got {value!r}")


def check_str(name: str, value: object) -> None:
    if not isinstance(value, str):
        bad_config(f"{name} must be a str, got {value!r}")


def check_callable(name: str, value: object) -> None:
    """A serializer or deserializer setting: a callable or None."""
    if value is not None and not callable(value):
        bad_config(f"{name} must be a callable (obj, ctx) or None, got {type(value).__name__}")


def parse_bootstrap(value: object) -> list[str]:
    """The endpoints of host:port[,host:port...]: checked by the configs, used by ClusterMetadata."""
    if not isinstance(value, str):
        bad_config(f"bootstrap must be a str, got {value!r}")
    endpoints = [e.strip() for e in value.split(",") if e.strip()]
    if not endpoints:
        bad_config("bootstrap needs at least one host:port")
    for endpoint in endpoints:
        try:
            parse_host_port(endpoint)
        except ValueError as exc:
            bad_config(f"bootstrap endpoint {endpoint!r}: {exc}")
    return endpoints


def check_security(value: object) -> None:
    # Imported here: kanal.security.channel_security imports grpc, which the configs' other checks do not
    # need.
    from kanal.security.channel_security import ClientSecurity

    if value is not None and not isinstance(value, ClientSecurity):
        bad_config(
            "security must be a kanal.security.channel_security.ClientSecurity or None, "
            f"got {type(value).__name__}"
        )
