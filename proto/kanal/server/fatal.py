"""stop_process: what a server (broker or controller) does when an invariant breaks on a path that cannot
report it.

Background threads run outside any request: a broker's metadata follower, replica fetchers and
coordinator tickers; a controller's applier thread and pysyncobj's hooks (pysyncobj's tick loop would
catch and log an exception there, then carry on with an image and a log that no longer match the other
controllers'). If such a thread died, or carried on with damaged state, the server would go on answering
from state that no longer moves: a zombie. STYLE: broken invariants stop the process. The cause is logged
with its traceback and the process exits at once with EXIT_BROKEN_INVARIANT; the supervisor restarts it,
and it rebuilds its state from its logs, the metadata log and its peers.

`os._exit`, not `sys.exit`: the caller is usually not the main thread, where SystemExit would end only
that thread.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable
from typing import NoReturn

# EX_SOFTWARE from sysexits.h: an internal software error.
EXIT_BROKEN_INVARIANT = 70

_log = logging.getLogger("kanal.server.fatal")

# What a component calls to stop its process: `stop_process`, or a recorder in tests of that component.
StopProcess = Callable[[str, BaseException | None], NoReturn]


def stop_process(reason: str, exc: BaseException | None = None) -> NoReturn:
    _log.critical("stopping the process: %s", reason, exc_info=exc)
    for handler in logging.getLogger().handlers:
        handler.flush()
    sys.stderr.flush()
    os._exit(EXIT_BROKEN_INVARIANT)
