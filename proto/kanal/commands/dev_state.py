"""Where kanal keeps per-user state, and how the other commands find a running `kanal dev`.

`$KANAL_HOME` (default `~/.kanal`) holds `dev.json`, written by `kanal dev` once its cluster serves and
removed when it stops: `{"pid": ..., "bootstrap": "host:port,...", "controllers": "host:port,...",
"control": <socket path>, ...}` (deploy/dev.py documents every key). Client commands take their default
bootstrap from it, `kanal metadata` its default controller.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

DEV_STATE_FILE_NAME = "dev.json"


def kanal_home() -> Path:
    """$KANAL_HOME, or ~/.kanal."""
    return Path(os.environ.get("KANAL_HOME", Path.home() / ".kanal"))


def dev_state_path() -> Path:
    return kanal_home() / DEV_STATE_FILE_NAME


def read_dev_state() -> dict[str, Any] | None:
    """dev.json's contents, or None when there is none, it is not a JSON object, or the `kanal dev` that
    wrote it is no longer running (killed, it could not remove the file): a stale file names no cluster."""
    try:
        state = json.loads(dev_state_path().read_text())
    except (OSError, ValueError):
        return None
    return state if isinstance(state, dict) and process_alive(state.get("pid")) else None


def process_alive(pid: object) -> bool:
    """Whether `pid` (an int) names a running process (one of another user's counts)."""
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
