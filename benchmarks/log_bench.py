"""Partition-log throughput: append and sequential read, beside plain sequential writes of the same bytes.

    python benchmarks/log_bench.py [--total-mib 256] [--dir DIR]

For 100-byte and 1 KiB records in batches of 1,000 it measures, on the same disk in the same run:
  plain_write   os.write of the exact entry bytes the log stores, one write per batch (the ceiling)
  append        Log.append of producer batches (validation, CRCs, offsets, indexes, segment rolls)
  read          Log.read in 1 MiB chunks from the page cache, start to end
Batches are built once up front: producer-side encoding is the client's cost, not the log's.
Plain writes and appends alternate for several rounds (the page cache's writeback makes single runs
noisy); medians are printed as one JSON object. fsync policy: none on the append path (the default; durability
comes from replication), so both the plain writes and the appends measure the page cache.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from kanal.broker.storage.log import Log
from kanal.broker.storage.log_config import LogConfig
from kanal.v1.batch import NewRecord, build_batch, frame_entry, iter_entries, with_broker_suffix

RECORDS_PER_BATCH = 1000
READ_CHUNK_BYTES = 1 << 20
DISTINCT_BATCHES = 16  # batches are reused round-robin; their bytes differ so nothing is trivially cached


def make_batches(record_bytes: int) -> list[bytes]:
    out = []
    for b in range(DISTINCT_BATCHES):
        records = [
            NewRecord(key=None, value=os.urandom(record_bytes), timestamp_ms=1_700_000_000_000 + b * 1000 + i)
            for i in range(RECORDS_PER_BATCH)
        ]
        out.append(build_batch(records))
    return out


ROUNDS = 3  # plain writes and appends alternate, each ROUNDS times; medians are reported


def bench_case(record_bytes: int, total_bytes: int, directory: Path) -> dict:
    batches = make_batches(record_bytes)
    batch_count = max(1, total_bytes // len(batches[0]))
    entries = [frame_entry(with_broker_suffix(b, 0, 0)) for b in batches]
    rounds = [one_round(record_bytes, batches, entries, batch_count, directory) for _ in range(ROUNDS)]
    result = {key: statistics.median(r[key] for r in rounds) for key in rounds[0]}
    result["append_vs_plain_write"] = round(result["plain_s"] / result["append_s"], 3)
    del result["plain_s"], result["append_s"], result["read_s"]
    return {
        "record_bytes": record_bytes,
        "records_per_batch": RECORDS_PER_BATCH,
        "batch_bytes": len(batches[0]),
        "batches": batch_count,
        "rounds": ROUNDS,
        **result,
    }


def one_round(record_bytes: int, batches: list[bytes], entries: list[bytes], batch_count: int,
              directory: Path) -> dict:
    records = batch_count * RECORDS_PER_BATCH
    plain_path = directory / f"plain-{record_bytes}.bin"
    fd = os.open(plain_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    start = time.perf_counter()
    written = 0
    for i in range(batch_count):
        written += os.write(fd, entries[i % DISTINCT_BATCHES])
    plain_s = time.perf_counter() - start
    os.close(fd)
    plain_path.unlink()

    log_dir = directory / f"bench-{record_bytes}-0"
    shutil.rmtree(log_dir, ignore_errors=True)
    log = Log.open(log_dir, LogConfig(segment_bytes_max=1 << 30, batch_bytes_max=(1 << 21)))
    now_ms = 1_700_000_000_000
    start = time.perf_counter()
    for i in range(batch_count):
        log.append(batches[i % DISTINCT_BATCHES], leader_epoch=0, now_ms=now_ms)
    append_s = time.perf_counter() - start
    stored_bytes = log.size_bytes

    start = time.perf_counter()
    offset, read_bytes = 0, 0
    end = log.log_end_offset
    while offset < end:
        data = log.read(offset, READ_CHUNK_BYTES).data
        read_bytes += len(data)
        last = None
        for entry in iter_entries(data, verify_crc=False):
            last = entry
        offset = last.suffix.last_offset + 1
    read_s = time.perf_counter() - start
    log.close()
    shutil.rmtree(log_dir, ignore_errors=True)

    def rate(nbytes: float, seconds: float) -> float:
        return round(nbytes / seconds / 1e6, 1)

    return {
        "plain_write_mb_s": rate(written, plain_s),
        "append_mb_s": rate(stored_bytes, append_s),
        "append_records_s": round(records / append_s),
        "read_mb_s": rate(read_bytes, read_s),
        "read_records_s": round(records / read_s),
        "plain_s": plain_s,
        "append_s": append_s,
        "read_s": read_s,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--total-mib", type=int, default=256, help="bytes appended per case (MiB)")
    parser.add_argument(
        "--dir", type=Path, default=None, help="directory on the disk to measure (default: a temp dir)"
    )
    args = parser.parse_args()
    if not 1 <= args.total_mib <= 8192:
        parser.error("--total-mib must be in [1, 8192]")
    directory = Path(tempfile.mkdtemp(prefix="kanal-log-bench-", dir=args.dir))
    try:
        cases = [bench_case(size, args.total_mib << 20, directory) for size in (100, 1024)]
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    print(json.dumps({
        "benchmark": "log",
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "directory_fs": str(directory.parent),
        "cases": cases,
    }, indent=2))


if __name__ == "__main__":
    main()
