"""Partition logs written with the storage package for the Spark tests (the real format, no cluster)."""

from __future__ import annotations

from pathlib import Path

from kanal.broker.storage.log import Log
from kanal.broker.storage.log_config import LogConfig
from kanal.v1.batch import NewRecord, build_batch

SMALL_SEGMENTS = LogConfig(
    segment_bytes_max=6 * 1024, batch_bytes_max=3 * 1024, timestamp_difference_ms_max=None
)
LARGE_BATCHES = LogConfig(segment_bytes_max=1 << 20, batch_bytes_max=1 << 19)


def write_log(directory: Path, batches: list[list[NewRecord]], *, producer_id: int = 0, leader_epoch: int = 0,
              config: LogConfig = SMALL_SEGMENTS, producer_ids: list[int] | None = None) -> Log:
    """Append each list of records as one batch (with producer_ids[i], else producer_id); returns the
    closed log."""
    log = Log.open(directory, config)
    for i, records in enumerate(batches):
        pid = producer_ids[i] if producer_ids else producer_id
        log.append(build_batch(records, producer_id=pid), leader_epoch=leader_epoch,
                   now_ms=max(r.timestamp_ms for r in records))
    log.close()
    return log


def segment_paths(directory: Path) -> list[Path]:
    return sorted(directory.glob("*.log"))
