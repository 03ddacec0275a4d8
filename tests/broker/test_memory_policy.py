"""The broker's malloc policy (kanal.broker.memory_policy): buffers of the data path's size come from the
heap and are reused, instead of being mapped and unmapped for each one; an operator's GLIBC_TUNABLES
wins. Each case runs in a fresh interpreter, so this test process keeps glibc's defaults."""

from __future__ import annotations

import json
import os
import subprocess
import sys

# Allocate one buffer of 1 MiB (a Produce request's size) with malloc and read glibc's chunk header:
# bit 0x2 of the size word before the pointer says the chunk was mapped for itself (mmap).
_PROBE = """
import ctypes, json, os, sys
from kanal.broker.memory_policy import keep_freed_memory
said = keep_freed_memory() if sys.argv[1] == "keep" else ""
libc = ctypes.CDLL(None)
libc.malloc.restype = ctypes.c_void_p
libc.malloc.argtypes = (ctypes.c_size_t,)
libc.free.argtypes = (ctypes.c_void_p,)
pointer = libc.malloc(1 << 20)
size_word = ctypes.c_size_t.from_address(pointer - ctypes.sizeof(ctypes.c_size_t)).value
libc.free(pointer)
print(json.dumps({"said": said, "mapped": bool(size_word & 0x2)}))
"""


def probe(mode: str, tunables: str | None = None) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "GLIBC_TUNABLES"}
    if tunables is not None:
        env["GLIBC_TUNABLES"] = tunables
    out = subprocess.run([sys.executable, "-c", _PROBE, mode], env=env, capture_output=True, text=True,
                         timeout=60, check=True)
    return json.loads(out.stdout)


def test_glibc_default_maps_a_one_mib_buffer_for_itself():
    # The behaviour the policy changes: without it, every such buffer is a fresh mapping (page faults and
    # zeroed pages each time it is touched).
    assert probe("default")["mapped"] is True


def test_kept_freed_memory_serves_a_one_mib_buffer_from_the_heap():
    result = probe("keep")
    assert result["mapped"] is False
    assert result["said"] == "malloc keeps freed memory (mmap threshold 32 MiB, trim threshold 128 MiB)"


def test_an_operators_glibc_tunables_are_left_alone():
    result = probe("keep", tunables="glibc.malloc.mmap_threshold=131072")
    assert result["said"] == "malloc thresholds left as GLIBC_TUNABLES sets them"
    assert result["mapped"] is True  # the operator's 128 KiB threshold still maps a 1 MiB buffer
