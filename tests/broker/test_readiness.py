"""Readiness (broker/readiness.py): caught up, unfenced, and back in the ISR of every partition it hosts."""

from __future__ import annotations

from kanal.broker.readiness import judge_readiness, partitions_out_of_isr
from kanal.metadata import MetadataImage
from kanal.metadata.image import PartitionState, TopicImage


def _image() -> MetadataImage:
    image = MetadataImage()
    image.topics["t"] = TopicImage("t", "id-t", [
        PartitionState(0, (1, 2, 3), (1, 2), 1, 3, 4),   # broker 3 out of the ISR
        PartitionState(1, (2, 3, 1), (2, 3, 1), 2, 0, 0),  # in it
        PartitionState(2, (3, 1, 2), (), -1, 5, 6),       # offline: no ISR to rejoin
        PartitionState(3, (1, 2), (1, 2), 1, 0, 0),       # not hosted by 3
    ])
    return image


def test_partitions_out_of_isr() -> None:
    assert partitions_out_of_isr(_image(), 3) == ["t-0"]
    assert partitions_out_of_isr(_image(), 1) == []


def test_not_ready_until_back_in_every_isr_then_bounded() -> None:
    def judge(**kw):
        args = {"caught_up": True, "fenced": False, "out_of_isr": ["t-0"], "waited_ms": 0,
                "wait_ms_max": 60_000}
        return judge_readiness(**{**args, **kw})

    assert not judge(caught_up=False).ready and "catching up" in judge(caught_up=False).reason
    assert not judge(fenced=True).ready
    waiting = judge(waited_ms=59_999)
    assert not waiting.ready and "t-0" in waiting.reason
    assert judge(out_of_isr=[]).ready
    late = judge(waited_ms=60_000)
    assert late.ready and "still out of the ISR of 1 partitions: t-0" in late.reason
    many = judge(out_of_isr=[f"t-{i}" for i in range(25)])
    assert "25 partitions" in many.reason and "t-24" not in many.reason
