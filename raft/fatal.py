"""stop_process: what the controller does when an invariant breaks on a path that cannot report it.

The applier thread and pysyncobj's hooks (snapshot load) run outside any request: an exception there
would be caught and logged by pysyncobj's tick loop, which then carries on with an image and a metadata
log that no longer match the other controllers'. STYLE: broken invariants stop the process. So these
paths log the cause with its traceback and exit at once with EXIT_BROKEN_INVARIANT; the supervisor (or
the operator) restarts the controller, which rebuilds its state from its journal, its snapshot and the
other controllers.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import NoReturn

# EX_SOFTWARE from sysexits.h: an internal software error.
EXIT_BROKEN_INVARIANT = 70

_log = logging.getLogger("kanal.raft")


def stop_process(reason: str, exc: BaseException | None = None) -> NoReturn:
    _log.critical("stopping the controller: %s", reason, exc_info=exc)
    for handler in logging.getLogger().handlers:
        handler.flush()
    sys.stderr.flush()
    os._exit(EXIT_BROKEN_INVARIANT)
