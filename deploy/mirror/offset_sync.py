"""Offset syncs and their translation: where a consumer group of the source resumes on the target.

A mirrored record does not keep its offset: the target's log holds transaction markers the source's does
not, and the source's may have gaps (compaction, aborted transactions read past). So the flow records
*offset syncs*, pairs (upstream, downstream) of positions that mean the same point of the stream: every
source record before `upstream` that the flow copies is on the target before `downstream`, and every one
at or after `upstream` lands at or after `downstream`. It writes one every `offset_lag_max` source offsets
of a partition (MirrorMaker 2's `offset.lag.max`), and one for a transaction's end when the partition's
last sync is a second old (so a quiet partition's end translates exactly), in the same transaction as the
data: a sync never names data that was not committed.

Translating a group's committed source offset U: the sync with the largest upstream <= U gives its
downstream. The consumer that resumes there may read again the records between that sync and U (at most
`offset_lag_max`, or a transaction's worth), and misses none. With no sync at or below U there is no safe
translation (None): the group gets no checkpoint for that partition yet.

Record formats on the target (JSON, UTF-8; both topics are written only by the flow):

- `kanal-mirror.<source>.offset-syncs.internal`: key `{"topic": remote topic, "partition": p}`, value
  `{"upstream": U, "downstream": D}`. Deleted after `SYNCS_RETENTION_MS` (not compacted: a group behind
  needs the older syncs); a flow reads it from its start when it starts, and a group whose committed offset
  is older than every sync kept gets no translation.
- `<source>.checkpoints.internal`: key `{"group": g, "topic": remote topic, "partition": p}`, value
  `{"upstream": U, "downstream": D}` (the group's committed source offset and its translation).
- `heartbeats`: key `{"source": alias, "target": alias}`, value `{"timestamp_ms": t}`.
"""

from __future__ import annotations

import bisect
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

SYNCS_KEPT_MAX = 1024  # per partition; older ones are thinned, not dropped (coarser, never wrong)
SYNCS_RETENTION_MS = 24 * 3600 * 1000


@dataclass(frozen=True, order=True)
class OffsetSync:
    upstream: int
    downstream: int


@dataclass
class PartitionSyncs:
    """The syncs of one (remote topic, partition), oldest first, both offsets strictly increasing."""

    syncs: list[OffsetSync] = field(default_factory=list)

    def add(self, sync: OffsetSync) -> None:
        if self.syncs and sync.upstream <= self.syncs[-1].upstream:
            if sync.downstream < self.syncs[-1].downstream:
                # A sync going back means the target's partition was recreated or truncated: what came
                # before it no longer holds. Start over from this one.
                self.syncs = [sync]
            return
        self.syncs.append(sync)
        if len(self.syncs) > SYNCS_KEPT_MAX:
            # Keep the newest half as it is and every other one of the older half: a group far behind
            # translates to an older point (it re-reads more), never to a later one.
            half = len(self.syncs) // 2
            self.syncs = self.syncs[:half:2] + self.syncs[half:]

    def translate(self, upstream: int) -> int | None:
        i = bisect.bisect_right(self.syncs, OffsetSync(upstream, 1 << 62)) - 1
        return self.syncs[i].downstream if i >= 0 else None

    def latest(self) -> OffsetSync | None:
        return self.syncs[-1] if self.syncs else None


class OffsetTranslator:
    def __init__(self) -> None:
        self._by_partition: dict[tuple[str, int], PartitionSyncs] = {}

    def add(self, topic: str, partition: int, sync: OffsetSync) -> None:
        self._by_partition.setdefault((topic, partition), PartitionSyncs()).add(sync)

    def translate(self, topic: str, partition: int, upstream: int) -> int | None:
        syncs = self._by_partition.get((topic, partition))
        return syncs.translate(upstream) if syncs else None

    def latest(self, topic: str, partition: int) -> OffsetSync | None:
        syncs = self._by_partition.get((topic, partition))
        return syncs.latest() if syncs else None


def syncs_for(upstreams: Sequence[int], downstream_of: Callable[[int], int], position: int,
              last: OffsetSync | None, offset_lag_max: int, *, end_due: bool) -> list[OffsetSync]:
    """The syncs one partition's transaction adds. `upstreams`: the source offset of each record it
    copied, in order (strictly increasing); `downstream_of(i)`: the target offset of record i, asked only
    for the records a sync names (one every `offset_lag_max`, and the last), so the caller waits for no
    other acknowledgement; `position`: the source position after the transaction (past records the flow
    skipped and control records too); `last`: the partition's latest sync. One at least every
    `offset_lag_max` source offsets, and, when `end_due`, one for the end if the position moved and a
    target offset is known for it."""
    out: list[OffsetSync] = []
    anchor = last.upstream if last else None
    start = 0
    while start < len(upstreams):
        # The next record with upstream + 1 - anchor >= offset_lag_max (the first, with no sync yet).
        i = start if anchor is None else bisect.bisect_left(upstreams, anchor + offset_lag_max - 1, start)
        if i == len(upstreams):
            break
        anchor = upstreams[i] + 1
        out.append(OffsetSync(anchor, downstream_of(i) + 1))
        start = i + 1
    if not (anchor is None or (end_due and position > anchor)):
        return out
    if upstreams:
        downstream_next: int | None = (out[-1].downstream if start == len(upstreams)
                                       else downstream_of(len(upstreams) - 1) + 1)
    else:
        downstream_next = last.downstream if last else None
    if downstream_next is not None:
        out.append(OffsetSync(position, downstream_next))
    return out


def _json(value: dict) -> bytes:
    return json.dumps(value, separators=(",", ":"), sort_keys=True).encode()


def sync_record(topic: str, partition: int, sync: OffsetSync) -> tuple[bytes, bytes]:
    return (_json({"topic": topic, "partition": partition}),
            _json({"upstream": sync.upstream, "downstream": sync.downstream}))


def parse_sync(key: bytes | None, value: bytes | None) -> tuple[str, int, OffsetSync]:
    """Raises ValueError for a record that is not a sync (the topic is the flow's own, so that is a bug
    or a hand-written record: the caller skips it and says so)."""
    k, v = json.loads(key or b""), json.loads(value or b"")
    return str(k["topic"]), int(k["partition"]), OffsetSync(int(v["upstream"]), int(v["downstream"]))


def checkpoint_record(group: str, topic: str, partition: int, upstream: int,
                      downstream: int) -> tuple[bytes, bytes]:
    return (_json({"group": group, "topic": topic, "partition": partition}),
            _json({"upstream": upstream, "downstream": downstream}))


def parse_checkpoint(key: bytes | None, value: bytes | None) -> tuple[str, str, int, int, int]:
    k, v = json.loads(key or b""), json.loads(value or b"")
    return str(k["group"]), str(k["topic"]), int(k["partition"]), int(v["upstream"]), int(v["downstream"])


def heartbeat_record(source: str, target: str, timestamp_ms: int) -> tuple[bytes, bytes]:
    return _json({"source": source, "target": target}), _json({"timestamp_ms": timestamp_ms})
