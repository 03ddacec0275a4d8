"""`kanal demo`: kanal's main job end to end on the embedded default.

Today the embedded default is a partition log on local disk (the storage engine every broker and the
controllers' metadata log are built on): the demo produces keyed records in batches, reads them back
with CRC checks, looks an offset up by time, crashes the log mid-write and recovers it, and compacts it.
When the local cluster lands (`kanal dev`), this command runs the same story against it.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

from kanal.broker.storage.log import Log
from kanal.broker.storage.log_config import LogConfig
from kanal.v1.batch import NewRecord, build_batch, decode_records, iter_entries, parse_batch
from kanal.v1.partitioning import partition_for_key
from kanal.v1.records_pb2 import COMPRESSION_ZSTD

CUSTOMERS = 50
PARTITIONS = 3


def read_all(log: Log) -> list[tuple[int, bytes, bytes | None]]:
    out, offset = [], log.log_start_offset
    while offset < log.log_end_offset:
        data = log.read(offset, 1 << 20).data
        if not data:
            break
        for entry in iter_entries(data):  # checks both CRCs of every batch
            batch = parse_batch(entry.batch)
            for rec in decode_records(batch):
                out.append((batch.base_offset + rec.offset_delta, rec.key, rec.value if rec.HasField("value") else None))
            offset = entry.suffix.last_offset + 1
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="kanal demo", description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", type=Path, default=None, help="where to keep the log (default: a temp dir, removed)")
    parser.add_argument("--records", type=int, default=200_000, help="records to produce (1..10,000,000)")
    args = parser.parse_args(argv)
    if not 1 <= args.records <= 10_000_000:
        parser.error("--records must be in [1, 10000000]")
    root = args.data_dir or Path(tempfile.mkdtemp(prefix="kanal-demo-"))
    try:
        return run(root, args.records)
    finally:
        if args.data_dir is None:
            shutil.rmtree(root, ignore_errors=True)


def run(root: Path, total: int) -> int:
    now_ms = int(time.time() * 1000)
    config = LogConfig(segment_bytes_max=4 << 20, cleanup_policy="compact", delete_retention_ms=0)
    partition = partition_for_key(b"customer-7", PARTITIONS)
    directory = root / f"orders-{partition}"
    print(f"kanal demo: partition log orders-{partition} in {directory}")
    print(f"  key 'customer-7' -> partition {partition} of {PARTITIONS} (murmur3, seed 0)")

    log = Log.open(directory, config)
    started = time.perf_counter()
    produced = batches = 0
    while produced < total:
        n = min(1000, total - produced)
        records = [
            NewRecord(key=b"customer-%d" % ((produced + i) % CUSTOMERS), value=b"order %d" % (produced + i),
                      timestamp_ms=now_ms + produced + i)
            for i in range(n)
        ]
        log.append(build_batch(records, codec=COMPRESSION_ZSTD), leader_epoch=0, now_ms=now_ms)
        produced += n
        batches += 1
    seconds = time.perf_counter() - started
    print(f"  produced {produced:,} records in {batches:,} zstd batches: offsets [0, {log.log_end_offset}) "
          f"in {len(log.segments)} segment(s), {log.size_bytes / 1e6:.1f} MB, "
          f"{produced / seconds:,.0f} records/s (encoding included)")

    records = read_all(log)
    if [r[0] for r in records] != list(range(produced)):
        raise SystemExit("kanal demo: the log did not return every offset in order")
    print(f"  read back {len(records):,} records, every CRC checked; last: offset {records[-1][0]} "
          f"key={records[-1][1].decode()} value={records[-1][2].decode()}")
    hit = log.offset_for_timestamp(now_ms + produced // 2)
    print(f"  first record at or after t0+{produced // 2} ms: offset {hit[0]}")

    log.close_unclean()
    active = sorted(directory.glob("*.log"))[-1]
    active.write_bytes(active.read_bytes()[:-7])  # a crash tore the last write
    log = Log.open(directory, config)
    print(f"  crash: the last batch was torn; recovery cut {log.recovered_bytes_cut} bytes and the log ends at "
          f"{log.log_end_offset} (every whole batch kept)")

    log.roll()
    stats = log.compact(now_ms + produced)
    latest = read_all(log)
    print(f"  compaction: {stats.records_removed:,} superseded records removed, {len(latest)} left "
          f"(the latest per key, offsets kept: {latest[0][0]}..{latest[-1][0]})")
    log.close()
    return 0
