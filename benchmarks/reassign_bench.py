"""Time to move a partition of a given size to another broker, with and without a replication throttle.

    python benchmarks/reassign_bench.py [--size-mb 1024] [--throttle-mb-s 20] [--record-bytes 10000]

Starts its own cluster (1 controller, 2 brokers, data in a temporary directory), fills partition 0 of a
replication-factor-1 topic on broker 0 with --size-mb of records (produce_many in 100-record calls into
256 KiB batches, acks=1, every future checked; ~30 s for 1 GiB here), checks that the log end offset is
the number of records produced and measures the partition's bytes on disk, then moves it
with the reassignment API: to broker 1 without a throttle, and back to broker 0 with
`follower.replication.throttled.rate` = --throttle-mb-s. Each move is timed from the
AlterPartitionReassignments call until ListPartitionReassignments shows it complete (the new replica caught
up, joined the ISR, the controller wrote the completion and the old replica's broker deleted it); after each
move the new replica's bytes on disk are measured too, so a move cannot be timed on a log that was not copied.
Prints one JSON object: fill time, bytes on disk, seconds and MB/s per move, the throttled rate as a fraction
of the setting. Bounded: filling stops at the size, each move waits at most --move-timeout-s.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

from kanal.clients.admin import BROKER, Admin
from kanal.clients.producer import Producer, ProducerConfig
from kanal.deploy.local_cluster import LocalCluster

MB = 1024 * 1024
THROTTLE_KEY = "follower.replication.throttled.rate"


def fill(bootstrap: str, topic: str, size_bytes: int, record_bytes: int) -> tuple[int, int]:
    """Produce records of `record_bytes` until `size_bytes` are acknowledged; (bytes, records)."""
    producer = Producer(ProducerConfig(bootstrap=bootstrap, acks="1", enable_idempotence=False, linger_ms=5,
                                       batch_size_bytes=256 * 1024, buffer_memory_bytes=64 * MB))
    value = b"x" * record_bytes
    written = records = 0
    pending = []
    try:
        while written < size_bytes:
            count = max(1, min(100, (size_bytes - written) // record_bytes))
            pending.append(producer.produce_many(topic, [value] * count, partition=0))
            written += count * record_bytes
            records += count
            if len(pending) >= 64:  # bounded: check acknowledgements as we go
                pending.pop(0).result(600)
        producer.flush(600)
        for futures in pending:
            futures.result(600)  # raises if a record was not stored: the size must be real
    finally:
        producer.close()
    return written, records


def partition_bytes(broker_dir: Path, topic: str) -> int:
    """Bytes of partition 0's files under a broker's data directory (0 once the replica is deleted)."""
    return sum(f.stat().st_size for d in broker_dir.rglob(f"{topic}-0") if d.is_dir() for f in d.rglob("*")
               if f.is_file())


def move(admin: Admin, topic: str, target: int, timeout_s: float) -> float:
    start = time.monotonic()
    (result,) = admin.alter_partition_reassignments({(topic, 0): (target,)})
    if result.error:
        raise SystemExit(f"reassignment refused: {result.error_message}")
    deadline = start + timeout_s
    while True:
        (state,) = admin.list_partition_reassignments([(topic, 0)])
        if list(state.replicas) == [target] and not state.adding_replicas and not state.removing_replicas:
            return time.monotonic() - start
        if time.monotonic() > deadline:
            raise SystemExit(f"the move to broker {target} did not finish within {timeout_s} s")
        time.sleep(0.05)


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--size-mb", type=int, default=1024, help="partition size to move (default 1024 = 1 GiB)")
    # 20 by default: the unthrottled copy ran at 48-72 MB/s on the loaded 2-core machine, so 50 hardly binds.
    p.add_argument("--throttle-mb-s", type=float, default=20.0, help="throttle for the second move, MB/s")
    p.add_argument("--record-bytes", type=int, default=10_000)
    p.add_argument("--move-timeout-s", type=float, default=3600)
    args = p.parse_args(argv)
    throttle = int(args.throttle_mb_s * MB)
    with tempfile.TemporaryDirectory(prefix="kanal-reassign-bench-") as tmp, \
            LocalCluster(Path(tmp), controllers=1, brokers=2,
                         controller_flags=["--auto-leader-rebalance-enable", "false"]) as cluster:
        cluster.start(timeout_s=120)
        with Admin(cluster.bootstrap) as admin:
            topic = "moving"
            admin.create_topic(topic, partitions=1, replication_factor=1)
            (home,) = admin.assignment([topic])[(topic, 0)]
            away = 1 - home
            fill_start = time.monotonic()
            written, records = fill(cluster.bootstrap, topic, args.size_mb * MB, args.record_bytes)
            fill_s = time.monotonic() - fill_start
            (start_offset, end_offset) = admin.log_bounds(topic, [0])[0]
            if end_offset - start_offset != records:
                raise SystemExit(
                    f"the log holds {end_offset - start_offset} records, {records} were acknowledged"
                )
            on_disk = partition_bytes(cluster.data_dir / f"broker-{home}", topic)
            unthrottled_s = move(admin, topic, away, args.move_timeout_s)
            copied = partition_bytes(cluster.data_dir / f"broker-{away}", topic)
            admin.alter_configs(BROKER, "", set_={THROTTLE_KEY: str(throttle)})
            throttled_s = move(admin, topic, home, args.move_timeout_s)
            copied_back = partition_bytes(cluster.data_dir / f"broker-{home}", topic)
    if min(copied, copied_back) < written:
        raise SystemExit(f"a moved replica holds fewer bytes ({min(copied, copied_back)}) than were written")
    size_mb = written / MB
    print(json.dumps({
        "size_mb": round(size_mb, 1),
        "records": records,
        "fill": {"seconds": round(fill_s, 1), "mb_per_s": round(size_mb / fill_s, 1)},
        "bytes_on_disk": {"filled": on_disk, "after_move": copied, "after_move_back": copied_back},
        "unthrottled": {"seconds": round(unthrottled_s, 2), "mb_per_s": round(size_mb / unthrottled_s, 1)},
        "throttled": {"seconds": round(throttled_s, 2), "mb_per_s": round(size_mb / throttled_s, 1),
                      "throttle_mb_per_s": args.throttle_mb_s,
                      "rate_vs_throttle": round(size_mb / throttled_s / args.throttle_mb_s, 3)},
    }, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
