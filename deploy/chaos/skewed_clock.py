"""A node's own wall clock, which the `clock` nemesis steps forward and back without touching the host's.

    python -m kanal.deploy.chaos.skewed_clock OFFSET_FILE MODULE [ARGS...]

runs `python -m MODULE ARGS...` (normally `kanal.deploy.cli broker ...`) with `time.time` and `time.time_ns`
answering the real wall clock plus the offset in OFFSET_FILE: one line, a float in seconds, re-read by a
thread every `OFFSET_POLL_S` (a missing file is 0). The monotonic clock is left alone, as a real step of the
system clock (NTP, settimeofday, a VM's bad RTC) leaves CLOCK_MONOTONIC alone. `write_offset` changes the
file atomically (write and rename).

Why not the system's clock: CLOCK_REALTIME is not namespaced, so stepping it (CAP_SYS_TIME, even inside a
container or a time namespace, which offsets only the monotonic and boot-time clocks) steps the host's.
Why not libfaketime: on this Debian (libfaketime 0.9.10) with the monotonic clock kept real, Python's
`time.sleep` fails with EINVAL (clock_nanosleep with an absolute monotonic deadline), and with the monotonic
clock faked too, every timeout of the process jumps with the step, which no real clock step does.

What it reaches: Python code reading `time.time`/`time.time_ns` (kanal's servers take the wall clock from
there once, when they start: proto/kanal/server/clock.py anchors it and advances it by the monotonic clock, so
a step while a node runs changes nothing it computes; a node started while its clock is off stamps and
judges by the stepped one). Not C code reading the clock itself (gRPC's core uses the monotonic clock for
deadlines) nor `datetime.now()`, which kanal's servers do not call.
"""

from __future__ import annotations

import os
import runpy
import sys
import threading
import time
from pathlib import Path

OFFSET_POLL_S = 0.05


def write_offset(path: Path, offset_s: float) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(f"{offset_s!r}\n")
    os.replace(tmp, path)


def read_offset(path: Path) -> float:
    try:
        text = path.read_text().strip()
    except FileNotFoundError:
        return 0.0
    return float(text) if text else 0.0


def install(path: Path) -> None:
    """Patch this process's wall clock to follow OFFSET_FILE (before the program imports anything)."""
    real_time, real_time_ns = time.time, time.time_ns
    offset = [read_offset(path)]

    def follow() -> None:
        while True:
            time.sleep(OFFSET_POLL_S)
            try:
                offset[0] = read_offset(path)
            except (OSError, ValueError):
                pass  # a half-written file cannot happen (rename), a vanished directory at shutdown can

    time.time = lambda: real_time() + offset[0]
    time.time_ns = lambda: real_time_ns() + int(offset[0] * 1e9)
    threading.Thread(target=follow, name="kanal-skewed-clock", daemon=True).start()


def main() -> int:
    if len(sys.argv) < 3:
        print(
            "usage: python -m kanal.deploy.chaos.skewed_clock OFFSET_FILE MODULE [ARGS...]", file=sys.stderr
        )
        return 2
    install(Path(sys.argv[1]))
    module = sys.argv[2]
    sys.argv = [module, *sys.argv[3:]]
    runpy.run_module(module, run_name="__main__", alter_sys=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
