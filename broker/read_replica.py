"""Which replica a consumer should read a partition from (KIP-392 follower fetching): a pure decision.

The leader makes it on each consumer Fetch that names the consumer's rack (`FetchRequest.rack_id`) and
answers `preferred_read_replica` when the choice is another broker; the consumer then fetches from
that broker, which serves it below its own high-water mark (partition.py), until the metadata max age
passes or that broker answers an error.

Selectors (the broker's `replica_selector`, Kafka's `replica.selector.class`):

| selector     | choice                                                                                 |
|--------------|----------------------------------------------------------------------------------------|
| `leader`     | always the leader (Kafka's default: follower fetching off)                             |
| `rack-aware` | the leader when the consumer has no rack or shares the leader's; else an in-sync        |
|              | follower in the consumer's rack that has the fetch offset (the one furthest ahead,      |
|              | lowest id on a tie); the leader when there is none                                     |

Only in-sync followers are candidates: one outside the ISR may be far behind, and a consumer sent there
would wait on it. "Has the fetch offset" is the leader's view of the follower's log end (its last fetch
offset): a follower that has not fetched past the consumer's offset would answer nothing new.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

REPLICA_SELECTORS = ("leader", "rack-aware")


@dataclass(frozen=True, slots=True)
class FollowerView:
    """What the leader knows of one follower of the partition."""

    broker_id: int
    in_sync: bool
    log_end_offset: int | None  # its last fetch offset as the leader saw it; None before its first fetch


def choose_read_replica(selector: str, client_rack: str, leader_id: int, racks: Mapping[int, str],
                        followers: Sequence[FollowerView], fetch_offset: int) -> int:
    """The broker the consumer in `client_rack` should read from at `fetch_offset`: `leader_id` or a
    follower's id. `racks` maps broker ids to their registered racks (a broker without one is absent or
    empty, and never matches)."""
    if selector == "leader" or not client_rack or racks.get(leader_id, "") == client_rack:
        return leader_id
    if selector != "rack-aware":
        raise ValueError(f"unknown replica selector {selector!r}")
    candidates = [f for f in followers
                  if f.in_sync and f.log_end_offset is not None and f.log_end_offset >= fetch_offset
                  and racks.get(f.broker_id, "") == client_rack]
    if not candidates:
        return leader_id
    best = max(candidates, key=lambda f: (f.log_end_offset or 0, -f.broker_id))
    return best.broker_id
