"""Readiness: when a (re)started broker may report SERVING, so that the next pod of a roll may go down.

Liveness is "the process serves" (grpc.health.v1 service `kanal.liveness`, always SERVING while the event
loop answers). Readiness (the "" and Broker services) means more: taking another broker down now would not
cost an ISR member that this one is about to provide. A broker is ready when

1. its initial metadata catch-up has published an image and the controller has unfenced it, and
2. it is in the ISR of every partition it hosts that has a leader (`partitions_out_of_isr`): a partition
   with no leader has no ISR to rejoin and does not hold readiness back,

or, once `ready_isr_wait_ms_max` has passed since (1), anyway, saying which partitions are still out
(a follower that cannot catch up, say with a huge backlog, must not keep the pod unready forever: the roll
then stops at the next broker's `kanal brokers safe-to-stop` check instead, deploy/k8s/README.md).

Pure: the image, the state and the time are arguments; BrokerServer polls it and sets the health status.
"""

from __future__ import annotations

from dataclasses import dataclass

from kanal.metadata import MetadataImage

# Partitions named in a reason, at most (the count is always given).
_NAMED_MAX = 10


@dataclass(frozen=True, slots=True)
class ReadinessVerdict:
    ready: bool
    # Why (one line): what it waits for, or why it is ready.
    reason: str

    def __repr__(self) -> str:
        return f"<Readiness {'ready' if self.ready else 'not ready'}: {self.reason}>"


def partitions_out_of_isr(image: MetadataImage, broker_id: int) -> list[str]:
    """`topic-partition` of each partition with a leader that has `broker_id` as a replica, not in its ISR."""
    return [f"{topic.name}-{p.partition_id}" for topic, p in image.iter_partitions()
            if broker_id in p.replicas and p.leader >= 0 and broker_id not in p.isr]


def judge_readiness(*, caught_up: bool, fenced: bool, out_of_isr: list[str], waited_ms: int,
                    wait_ms_max: int) -> ReadinessVerdict:
    """The verdict; `waited_ms`: time since the broker was caught up and unfenced (0 before)."""
    if not caught_up:
        return ReadinessVerdict(False, "catching up with the metadata log")
    if fenced:
        return ReadinessVerdict(False, "fenced: waiting for the controller to unfence this broker")
    if not out_of_isr:
        return ReadinessVerdict(True, "caught up, unfenced and in the ISR of every partition it hosts")
    named = ", ".join(out_of_isr[:_NAMED_MAX]) + (" ..." if len(out_of_isr) > _NAMED_MAX else "")
    if waited_ms >= wait_ms_max:
        return ReadinessVerdict(True, f"ready after waiting {waited_ms} ms (ready_isr_wait_ms_max) although "
                                      f"still out of the ISR of {len(out_of_isr)} partitions: {named}")
    return ReadinessVerdict(False, f"out of the ISR of {len(out_of_isr)} partitions: {named}")
