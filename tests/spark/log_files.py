"""Partition logs written with the storage package for the Spark tests (the real format, no cluster)."""

from __future__ import annotations

from pathlib import Path

from kanal.broker.storage.log import Log
from kanal.broker.storage.log_config import LogConfig
from kanal.v1.batch import NewRecord, build_batch

SMALL_SEGMENTS = LogConfig(segment_bytes_max=6 * 1024, batch_bytes_max=3 * 1024, timestamp_difference_ms_max=None)


def write_log(directory: Path, batches: list[list[NewRecord]], *, producer_id: int = 0, leader_epoch: int = 0,
              config: LogConfig = SMALL_SEGMENTS) -> Log:
    """Append each list of records as one batch; returns the closed log."""
    log = Log.open(directory, config)
    for records in batches:
        log.append(build_batch(records, producer_id=producer_id), leader_epoch=leader_epoch,
                   now_ms=max(r.timestamp_ms for r in records))
    log.close()
    return log


def segment_paths(directory: Path) -> list[Path]:
    return sorted(directory.glob("*.log"))
