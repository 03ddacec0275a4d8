"""LeaderEpochCache: which leader epoch started at which offset, for finding where two replicas' logs
diverge after a leader change (the follower asks the leader for the end offset of its last epoch and
truncates to it).

File `leader-epoch-checkpoint` in the partition directory, text, rewritten atomically on change:

    0                 format version
    N                 number of entries
    <epoch> <offset>  N lines, epochs and start offsets strictly increasing
"""

from __future__ import annotations

import os
from bisect import bisect_right
from pathlib import Path

from kanal.broker.storage.ids import LeaderEpoch, Offset

FILE_NAME = "leader-epoch-checkpoint"
_VERSION = 0


class LeaderEpochCache:
    def __init__(self, directory: Path) -> None:
        self.path = directory / FILE_NAME
        self._epochs: list[int] = []
        self._starts: list[int] = []

    def __repr__(self) -> str:
        pairs = ", ".join(f"{e}@{o}" for e, o in zip(self._epochs, self._starts))
        return f"<LeaderEpochCache [{pairs}]>"

    def entries(self) -> list[tuple[LeaderEpoch, Offset]]:
        return [(LeaderEpoch(e), Offset(o)) for e, o in zip(self._epochs, self._starts)]

    def load(self) -> bool:
        """Read the checkpoint; False when it is missing or damaged, and the cache is then empty: the log
        must rebuild it from its batches, or divergence detection is off for this replica."""
        self._epochs, self._starts = [], []
        try:
            lines = self.path.read_text().split("\n")
            if int(lines[0]) != _VERSION:
                return False
            count = int(lines[1])
            for line in lines[2 : 2 + count]:
                epoch, start = (int(x) for x in line.split())
                self._epochs.append(epoch)
                self._starts.append(start)
            return True
        except (FileNotFoundError, ValueError, IndexError):
            self._epochs, self._starts = [], []
            return False

    @property
    def latest_epoch(self) -> LeaderEpoch | None:
        return LeaderEpoch(self._epochs[-1]) if self._epochs else None

    def assign(self, epoch: int, start_offset: int) -> bool:
        """Record that `epoch` starts at `start_offset` if it is newer than every known epoch. Returns
        whether the cache changed (the caller then persists it)."""
        if self._epochs and epoch <= self._epochs[-1]:
            return False
        if self._starts and start_offset < self._starts[-1]:
            raise ValueError(f"epoch {epoch} at {start_offset} starts before epoch {self._epochs[-1]}")
        self._epochs.append(epoch)
        self._starts.append(start_offset)
        return True

    def prepend(self, entries: list[tuple[int, int]]) -> bool:
        """Put the epochs of `entries` (increasing, as the cache holds them) that began below the first
        known one in front of it: a tiered log's remote part, taken from the metadata when the checkpoint
        was lost and the cache was rebuilt from the local segments only. An entry of the first known epoch
        moves that epoch's start down; entries at or past the first known start or epoch are ignored.
        Returns whether the cache changed (the caller then persists it)."""
        first_epoch = self._epochs[0] if self._epochs else None
        first_start = self._starts[0] if self._starts else None
        epochs: list[int] = []
        starts: list[int] = []
        moved = False
        for epoch, start in entries:
            if first_start is not None and start >= first_start:
                break
            if epochs and (epoch <= epochs[-1] or start <= starts[-1]):
                raise ValueError(f"epoch {epoch} at {start} does not follow {epochs[-1]} at {starts[-1]}")
            if first_epoch is not None and epoch >= first_epoch:
                if epoch == first_epoch:
                    self._starts[0] = start
                    moved = True
                break
            epochs.append(epoch)
            starts.append(start)
        self._epochs[:0] = epochs
        self._starts[:0] = starts
        return moved or bool(epochs)

    def end_offset_for(self, epoch: int, log_end_offset: int) -> tuple[LeaderEpoch, Offset] | None:
        """The largest known epoch <= `epoch` and the offset where it ended (the next epoch's start, or
        the log end for the latest). None when `epoch` is older than every known epoch."""
        i = bisect_right(self._epochs, epoch)
        if i == 0:
            return None
        end = self._starts[i] if i < len(self._starts) else log_end_offset
        return LeaderEpoch(self._epochs[i - 1]), Offset(end)

    def truncate_from_end(self, end_offset: int) -> None:
        """Drop epochs that start at or after `end_offset` (the log was truncated there)."""
        while self._starts and self._starts[-1] >= end_offset:
            self._starts.pop()
            self._epochs.pop()

    def truncate_from_start(self, start_offset: int) -> None:
        """Forget epochs wholly below the log start, keeping the one that covers it (moved up to it)."""
        i = bisect_right(self._starts, start_offset)
        if i > 1:
            del self._epochs[: i - 1]
            del self._starts[: i - 1]
        if self._starts and self._starts[0] < start_offset:
            self._starts[0] = start_offset

    def clear(self) -> None:
        self._epochs, self._starts = [], []

    def save(self) -> None:
        lines = [str(_VERSION), str(len(self._epochs))] + [
            f"{e} {o}" for e, o in zip(self._epochs, self._starts)
        ]
        tmp = self.path.with_name(FILE_NAME + ".tmp")
        with open(tmp, "w") as f:
            f.write("\n".join(lines) + "\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)
