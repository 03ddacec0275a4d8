"""Every in-sync replica's copy of the run's partitions, read from the brokers' data directories after the
final read, so the checker can compare replicas with one another and not only what clients were served.

A follower that kept records its leader never had (a deposed leader's unacknowledged tail that it did not
truncate) serves nobody while it follows; its divergence shows only when it leads again, which a run may
never bring about. Reading its log directly shows it at once. The rule it checks (`divergent`, checker.py):
below the high-water mark, every member of a partition's ISR holds the leader's records, offset by offset.

After the final read the run writes nothing more to its topic. `record_replicas` waits (up to a deadline)
for every partition's ISR to hold every replica, so a follower that is still catching up (and may still
hold a tail it is about to truncate, legitimately) is not read before it has fetched from the leader, and
then reads the log of each ISR member only: `replica` events (broker, topic, partition, offset, value). The
log files are the broker's own format (deploy/../broker/storage/segment.py: `<base offset>.log` files of
entries); a torn entry at the end of a file (a broker still appending) ends the read of that file.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

import grpc

from kanal.clients.cluster_metadata import ClusterMetadata
from kanal.deploy.chaos.history import Recorder
from kanal.v1.batch import CorruptEntry, decode_records, iter_entries, parse_batch
from kanal.v1.error import KanalError

log = logging.getLogger("kanal.chaos.replicas")

ISR_FULL_WAIT_S = 30.0


def read_partition_log(directory: Path) -> list[tuple[int, str]]:
    """(offset, value) of every record in a partition directory's segment files, in offset order."""
    out: list[tuple[int, str]] = []
    for segment in sorted(directory.glob("*.log")):
        data = segment.read_bytes()
        try:
            for entry in iter_entries(data, verify_crc=False):
                base = entry.suffix.base_offset
                for record in decode_records(parse_batch(entry.batch, verify_crc=False)):
                    value = record.value.decode(errors="replace") if record.value is not None else ""
                    out.append((base + record.offset_delta, value))
        except (CorruptEntry, KanalError) as exc:
            log.info("%s: read stops at a damaged or torn entry: %s", segment, exc)
    return out


def in_sync_replicas(
    bootstrap: str, topic: str, partitions: int, timeout_s: float
) -> dict[int, tuple[int, ...]]:
    """Each partition's ISR, once every ISR holds every replica or at the deadline (whatever it is then)."""
    deadline = time.monotonic() + timeout_s
    isr: dict[int, tuple[int, ...]] = {}
    md = ClusterMetadata(bootstrap)
    try:
        while True:
            try:
                infos = md.refresh([topic]).topics[topic]
                isr = {p: tuple(infos[p].isr) for p in range(partitions)}
                if all(set(infos[p].isr) == set(infos[p].replicas) for p in range(partitions)):
                    return isr
            except (KanalError, grpc.RpcError, KeyError, IndexError) as exc:
                log.info("metadata for %s: %s", topic, exc)
            if time.monotonic() > deadline:
                return isr
            time.sleep(0.2)
    finally:
        md.close()


def record_replicas(recorder: Recorder, bootstrap: str, data_dir: Path, topic: str, partitions: int,
                    timeout_s: float = ISR_FULL_WAIT_S) -> None:
    for partition, members in sorted(in_sync_replicas(bootstrap, topic, partitions, timeout_s).items()):
        for broker in members:
            directory = data_dir / f"broker-{broker}" / f"{topic}-{partition}"
            for offset, value in read_partition_log(directory):
                recorder.record("replica", "replicas", broker=broker, topic=topic, partition=partition,
                                offset=offset, value=value)
