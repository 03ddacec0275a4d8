"""Deprecated alias: `ClientSecurity` and `open_channel` moved to kanal.security.channel_security (the TLS
code is no part of the contract package); `from kanal.clients import ClientSecurity` is the clients' name.

Nothing is loaded until a name is used, so importing kanal.v1 never loads TLS code; each use warns once.
"""

from __future__ import annotations

import importlib
import warnings
from typing import Any

_MOVED = ("ClientSecurity", "open_channel", "open_aio_channel")
_NEW_HOME = "kanal.security.channel_security"


def __getattr__(name: str) -> Any:
    if name not in _MOVED:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    warnings.warn(f"{__name__}.{name} moved to {_NEW_HOME}.{name}", DeprecationWarning, stacklevel=2)
    return getattr(importlib.import_module(_NEW_HOME), name)
