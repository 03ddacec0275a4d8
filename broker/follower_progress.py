"""FollowerProgress: what a partition leader knows about one follower, from the follower's fetches.

A follower fetching from offset X has every offset below X (it appends in order and asks for the next
one), so X is its log end offset (LEO) as far as the leader can tell.

**When is a follower caught up?** ISR membership is about time: a follower leaves the ISR when it has not
been caught up for more than `replica_lag_ms_max`. "Caught up at time T" must mean "by now it has
everything the leader had at T". kanal uses Kafka's rule (Replica.updateFetchState):

- fetch offset >= the leader's LEO now        -> caught up now;
- else fetch offset >= the leader's LEO at the previous fetch -> caught up as of the previous fetch's
  time (it now has everything the leader had then);
- else no change.

The second case is what makes the rule fair to a busy partition: with a steady stream of appends a
follower is almost never exactly at the leader's LEO when it fetches, but if every fetch brings it to
where the leader was at the previous fetch, its lag is one fetch round trip, and it stays in the ISR.
A follower whose LEO equals the leader's is never out of sync, however long ago it fetched (an idle
partition needs no fetches to stay in sync); this is Kafka's `isCaughtUp` too.

**Which incarnation?** Progress belongs to one registration of the follower: its broker epoch, which
every follower Fetch carries (`replica_epoch`, checked against the image by fetch_call.py). A fetch at
another epoch than the recorded one is a restarted broker (its log may be shorter, or empty): what the
earlier incarnation reached says nothing about it, so its progress starts over. The leader sends the
epoch with its ISR proposals (KIP-903) so the controller can refuse progress of an incarnation that is
no longer registered.

Unknown values are None: a new leader knows nothing of its followers' logs until they fetch.
Pure; times are arguments.
"""

from __future__ import annotations

from dataclasses import dataclass

from kanal.broker.storage.ids import Offset
from kanal.metadata.ids import BrokerId


@dataclass(slots=True)
class FollowerProgress:
    broker_id: BrokerId
    # The broker epoch the follower fetched at (-1 before its first fetch, or when fetches carry none).
    broker_epoch: int = -1
    # The follower's LEO: its last fetch offset in this leadership; None before its first fetch.
    log_end_offset: Offset | None = None
    last_fetch_ms: int | None = None
    # The leader's LEO when that fetch arrived (for the caught-up rule above).
    last_fetch_leader_leo: Offset | None = None
    # When it was last caught up; None when never during this leadership.
    last_caught_up_ms: int | None = None

    def __repr__(self) -> str:
        return (
            f"<FollowerProgress {self.broker_id} epoch={self.broker_epoch} leo={self.log_end_offset} "
            f"last_fetch={self.last_fetch_ms} caught_up={self.last_caught_up_ms}>"
        )

    def on_fetch(self, fetch_offset: Offset, leader_log_end_offset: Offset, now_ms: int,
                 broker_epoch: int = -1) -> None:
        """Record a fetch from `fetch_offset` arriving at `now_ms` while the leader's LEO is
        `leader_log_end_offset`, made by the follower's registration at `broker_epoch` (-1: unknown)."""
        if broker_epoch != -1 and broker_epoch != self.broker_epoch:
            if self.broker_epoch != -1:
                # Another incarnation: the earlier one's progress is not this one's.
                self.log_end_offset = self.last_fetch_ms = self.last_fetch_leader_leo = None
                self.last_caught_up_ms = None
            self.broker_epoch = broker_epoch
        caught_up_at: int | None = None
        if fetch_offset >= leader_log_end_offset:
            caught_up_at = now_ms
        elif self.last_fetch_leader_leo is not None and fetch_offset >= self.last_fetch_leader_leo:
            caught_up_at = self.last_fetch_ms
        if caught_up_at is not None and (
            self.last_caught_up_ms is None or caught_up_at > self.last_caught_up_ms
        ):
            self.last_caught_up_ms = caught_up_at
        self.log_end_offset = fetch_offset
        self.last_fetch_ms = now_ms
        self.last_fetch_leader_leo = leader_log_end_offset

    def is_caught_up(self, leader_log_end_offset: Offset, now_ms: int, replica_lag_ms_max: int) -> bool:
        """In sync: at the leader's LEO, or caught up within the last `replica_lag_ms_max`."""
        if self.log_end_offset is not None and self.log_end_offset == leader_log_end_offset:
            return True
        return self.last_caught_up_ms is not None and now_ms - self.last_caught_up_ms <= replica_lag_ms_max

    def lag_ms(self, now_ms: int) -> int | None:
        """How long since it was last caught up (None when never), for the ISR-shrink reason."""
        return None if self.last_caught_up_ms is None else now_ms - self.last_caught_up_ms
