"""`kanal controller`: run one controller of the metadata quorum until SIGTERM or SIGINT.

    kanal controller --id 1 --listen 127.0.0.1:9601 --raft 127.0.0.1:9701 \\
        --peers \\
        1=127.0.0.1:9701=127.0.0.1:9601,2=127.0.0.1:9702=127.0.0.1:9602,3=127.0.0.1:9703=127.0.0.1:9603 \\
        --data-dir /var/lib/kanal/controller-1 --cluster-secret-file /etc/kanal/secret

Exit status: 0 after a clean stop, 1 when the controller could not start, 2 for bad flags (one line on
stderr), 70 when an invariant broke while running (fatal.py).
"""

from __future__ import annotations

import logging
import signal
import sys
import threading
from collections.abc import Sequence

from kanal.commands.report import command_error
from kanal.raft.controller_config import ControllerConfigError, parse_controller_args
from kanal.server.logs import setup_logging
from kanal.v1.error import ErrorCode

EXIT_OK = 0
EXIT_STARTUP_FAILED = 1
EXIT_USAGE = 2


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        config = parse_controller_args(args)
    except ControllerConfigError as exc:
        return command_error("kanal controller: error", str(exc), exit_status=EXIT_USAGE)
    if config.cluster_secret is not None:
        from pysyncobj import HAS_CRYPTO

        if not HAS_CRYPTO:
            return command_error(
                "kanal controller: error",
                "--cluster-secret needs the 'cryptography' package",
                ErrorCode.MISSING_DEPENDENCY,
                EXIT_USAGE,
            )
    setup_logging(config.log_format, config.log_level, f"controller-{config.controller_id}")
    from kanal.raft.controller_server import ControllerServer, StartupError

    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    try:
        server = ControllerServer(config)
        server.start()
    except StartupError as exc:
        logging.getLogger("kanal.raft").error("%s", exc)
        return command_error("kanal controller: error", str(exc), ErrorCode.UNKNOWN_SERVER_ERROR,
                             EXIT_STARTUP_FAILED)
    try:
        while not stop.wait(1.0):
            pass
    finally:
        server.stop()
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
