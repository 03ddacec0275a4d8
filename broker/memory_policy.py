"""How the broker process asks glibc's malloc to keep the memory it frees, for its next buffers.

Why: a broker's data path allocates and frees buffers of hundreds of KiB per call (gRPC joins a request's
slices into one bytes object, protobuf decodes it into its arena and copies each batch out). With glibc's
defaults such a buffer is either mapped and unmapped for itself (above the mmap threshold) or freed to the
top of a thread's heap, which is handed back to the kernel (madvise) once the free top passes the trim
threshold. Either way the next buffer lands on fresh pages: a page fault and a zeroed page for every 4 KiB
it touches. Measured on a one-broker cluster taking 2.6-3.4 M records/s from two producers (100 B records,
right after a 5 s raw-produce case, as `benchmarks/ab_produce.py` runs them): page faults and their
zeroing were ~20 % of the broker's CPU samples, and with the thresholds below (set through GLIBC_TUNABLES)
the broker's CPU per record fell from 315-317 ns to 245-248 ns.

What: the mmap threshold is fixed at MMAP_THRESHOLD_BYTES (32 MiB, glibc's largest on 64-bit; buffers
below it come from the heaps and are reused) and the trim threshold at TRIM_THRESHOLD_BYTES, above the
64 MiB a thread's heap can hold, so freed memory stays for the next buffer. The cost is memory: a process
keeps up to its peak heap instead of returning the free part; a broker's peak is bounded by what it
holds in flight (requests up to their size limits, fetch replies up to fetch_max_bytes).

Only `kanal broker` calls it: the controllers' messages are small, and client libraries leave the memory
policy of the process they run in to its owner.

An operator's own choice wins: when GLIBC_TUNABLES already sets any glibc.malloc tunable, nothing is
changed. Without glibc (musl, macOS) nothing is changed either: `keep_freed_memory` reports what it did.
"""

from __future__ import annotations

import ctypes
import os

MMAP_THRESHOLD_BYTES = 32 * 1024 * 1024
TRIM_THRESHOLD_BYTES = 128 * 1024 * 1024
# mallopt parameter numbers (glibc's malloc.h).
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3


def keep_freed_memory(environ: dict[str, str] | None = None) -> str:
    """Set the thresholds above in this process; returns what was done, for the start-up log line."""
    tunables = (os.environ if environ is None else environ).get("GLIBC_TUNABLES", "")
    if "glibc.malloc." in tunables:
        return "malloc thresholds left as GLIBC_TUNABLES sets them"
    libc = ctypes.CDLL(None)  # the symbols this interpreter is linked with, its C library's among them
    if not hasattr(libc, "mallopt") or not hasattr(libc, "gnu_get_libc_version"):
        return "malloc thresholds unchanged: not glibc"
    libc.mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    ok = libc.mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES) and libc.mallopt(
        _M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES
    )
    if not ok:
        return "malloc thresholds unchanged: mallopt refused them"
    return (f"malloc keeps freed memory (mmap threshold {MMAP_THRESHOLD_BYTES >> 20} MiB, "
            f"trim threshold {TRIM_THRESHOLD_BYTES >> 20} MiB)")
