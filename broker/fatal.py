"""stop_process: what a broker does when a background thread hits an error nobody can report.

The metadata follower applies the metadata log and reconciles replicas outside any request; if that
thread died, the broker would go on serving from an image that no longer moves (a zombie that still
answers). STYLE: broken invariants stop the process. The cause is logged with its traceback and the
process exits at once with EXIT_BROKEN_INVARIANT; the supervisor restarts it, and it rebuilds its state
from its logs and the metadata log.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import NoReturn

# EX_SOFTWARE from sysexits.h: an internal software error.
EXIT_BROKEN_INVARIANT = 70

_log = logging.getLogger("kanal.broker")


def stop_process(reason: str, exc: BaseException | None = None) -> NoReturn:
    _log.critical("stopping the broker: %s", reason, exc_info=exc)
    for handler in logging.getLogger().handlers:
        handler.flush()
    sys.stderr.flush()
    os._exit(EXIT_BROKEN_INVARIANT)
