"""The clock fault's per-process wall clock: stepped through its file while the process runs, monotonic
clock untouched, the host's clock never changed (nothing here needs root)."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from kanal.deploy.chaos.skewed_clock import read_offset, write_offset

# The child reports (its wall clock - the real one, its monotonic clock - the real one) each time it is asked.
CHILD = """
import sys, time
from pathlib import Path
real_time, real_monotonic = time.time, time.monotonic
from kanal.deploy.chaos import skewed_clock
skewed_clock.install(Path(sys.argv[1]))
for line in sys.stdin:
    print(round(time.time() - real_time()), round(time.time_ns() / 1e9 - real_time()),
          round(time.monotonic() - real_monotonic()), flush=True)
"""


def _ask(child) -> list[int]:
    child.stdin.write("?\n")
    child.stdin.flush()
    return [int(x) for x in child.stdout.readline().split()]


def test_a_step_reaches_the_running_process_and_only_its_wall_clock(tmp_path):
    offset = tmp_path / "broker-0"
    assert read_offset(offset) == 0.0  # no file: the true clock
    write_offset(offset, 3600.0)
    host_before = time.time()
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(offset)], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    try:
        assert _ask(child) == [3600, 3600, 0]
        write_offset(offset, -90.0)
        deadline = time.monotonic() + 30
        while (answer := _ask(child))[0] != -90:  # the child's thread re-reads the file
            assert time.monotonic() < deadline, answer
        assert answer[1:] == [-90, 0]
    finally:
        child.stdin.close()
        child.wait(10)
    assert abs(time.time() - host_before) < 3600  # this process's (the host's) clock never moved with it


def test_the_launcher_runs_a_module_on_the_stepped_clock(tmp_path):
    offset = tmp_path / "clock"
    write_offset(offset, -7200.0)
    # clock_gettime is not patched: it is the real wall clock, to measure the module's against.
    (tmp_path / "show_clock.py").write_text(
        "import sys, time\n"
        "print(round(time.time() - time.clock_gettime(time.CLOCK_REALTIME)), *sys.argv[1:])\n")
    out = subprocess.run(
        [sys.executable, "-m", "kanal.deploy.chaos.skewed_clock", str(offset), "show_clock", "a", "b"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(tmp_path)},
    ).stdout
    assert out.split() == ["-7200", "a", "b"]
