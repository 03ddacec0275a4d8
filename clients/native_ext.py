"""Loading the clients' optional C extensions (`_producer_fast`, `_consumer_fast`).

Each is built by `pip install` only where a C compiler and the Python headers were found (setup.py marks
them optional), and each has a pure-Python twin with the same behaviour, so a missing one is not an error:
the caller gets the module or None, and why not, to show in its repr and in the test that checks the
project's own setup built them.
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType


def load_optional(module: str, pure_python_env: str) -> tuple[ModuleType | None, str | None]:
    """(the extension `kanal.clients.<module>`, None), or (None, why it is not used): not built, or turned
    off by setting the environment variable `pure_python_env`."""
    if os.environ.get(pure_python_env):
        return None, f"{pure_python_env} is set"
    try:
        return importlib.import_module(f"kanal.clients.{module}"), None
    except ImportError as exc:  # not built (no compiler at install time): the Python path runs
        return None, str(exc)
