"""Whether a broker may be stopped now without leaving a partition below min.insync.replicas (issue 40).

A roll (a StatefulSet's preStop hook, an operator, a person) asks before it takes broker N down:
`kanal brokers safe-to-stop --id N`. The rule, Strimzi's roller's, from the metadata alone:

- a partition whose ISR holds N loses one in-sync replica when N stops: it must keep `min.insync.replicas`
  of them (ISR members other than N), or acks=all producers get NOT_ENOUGH_REPLICAS until N is back;
- a partition whose ISR lacks N loses nothing when N stops (N was not counted), so it never holds a stop;
- a partition with no more replicas than min.insync.replicas can never stay at min.insync through a restart
  of any in-sync replica: waiting would block every roll forever, so it is reported, not waited for.

Pure: the partitions and the topics' min.insync.replicas are arguments; the command (operations_cli.py)
fetches them and polls until the answer is yes or its bounded wait has passed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from kanal.clients.cluster_metadata import PartitionInfo

# Partitions named in a message, at most (the count is always given).
_NAMED_MAX = 10


@dataclass(frozen=True, slots=True)
class StopVerdict:
    # Partitions that would drop below min.insync.replicas: "topic-p (isr [..], min.insync n)".
    held_by: tuple[str, ...]
    # Partitions whose replication factor is at most min.insync.replicas: below it during any restart.
    unavoidable: tuple[str, ...]

    @property
    def safe(self) -> bool:
        return not self.held_by

    def reason(self, broker_id: int) -> str:
        if self.safe:
            return f"broker {broker_id} may stop: every partition keeps min.insync.replicas in-sync replicas"
        named = ", ".join(self.held_by[:_NAMED_MAX]) + (" ..." if len(self.held_by) > _NAMED_MAX else "")
        return (f"stopping broker {broker_id} would leave {len(self.held_by)} partitions below "
                f"min.insync.replicas: {named}")

    def __repr__(self) -> str:
        return f"<StopVerdict {'safe' if self.safe else 'held'} held_by={len(self.held_by)}>"


def judge_stop(broker_id: int, partitions: Iterable[PartitionInfo],
               min_insync: Mapping[str, int]) -> StopVerdict:
    """The verdict for stopping `broker_id`; `min_insync`: each partition's topic's min.insync.replicas."""
    held: list[str] = []
    unavoidable: list[str] = []
    for p in partitions:
        if broker_id not in p.isr:
            continue
        needed = min_insync[p.topic]
        name = f"{p.topic}-{p.partition}"
        if len(p.replicas) <= needed:
            unavoidable.append(name)
        elif len(p.isr) - 1 < needed:
            held.append(f"{name} (isr {list(p.isr)}, min.insync {needed})")
    return StopVerdict(tuple(held), tuple(unavoidable))
