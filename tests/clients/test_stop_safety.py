"""judge_stop: whether stopping a broker leaves every partition at min.insync.replicas (issue 40, item 4)."""

from __future__ import annotations

from kanal.clients.cluster_metadata import PartitionInfo
from kanal.clients.stop_safety import judge_stop


def part(topic: str, p: int, replicas: tuple[int, ...], isr: tuple[int, ...]) -> PartitionInfo:
    return PartitionInfo(topic, p, isr[0] if isr else -1, 0, replicas, isr)


def test_a_full_isr_above_min_insync_lets_any_member_stop():
    verdict = judge_stop(1, [part("t", 0, (0, 1, 2), (0, 1, 2))], {"t": 2})
    assert verdict.safe and verdict.held_by == () and verdict.unavoidable == ()


def test_an_isr_at_min_insync_holds_a_member_but_not_an_outsider():
    partitions = [part("t", 0, (0, 1, 2), (0, 2)), part("t", 1, (0, 1, 2), (0, 1, 2))]
    held = judge_stop(0, partitions, {"t": 2})
    assert not held.safe and held.held_by == ("t-0 (isr [0, 2], min.insync 2)",)
    assert "would leave 1 partitions below min.insync.replicas: t-0" in held.reason(0)
    # Broker 1 is not in t-0's ISR (it is the one catching up): stopping it costs t-0 nothing.
    assert judge_stop(1, partitions, {"t": 2}).safe


def test_each_topic_uses_its_own_min_insync():
    partitions = [part("a", 0, (0, 1, 2), (0, 1)), part("b", 0, (0, 1, 2), (0, 1))]
    verdict = judge_stop(0, partitions, {"a": 1, "b": 2})
    assert [h.split(" ")[0] for h in verdict.held_by] == ["b-0"]


def test_a_replication_factor_at_min_insync_is_reported_not_waited_for():
    # rf 1 (or rf == min.insync): any restart of an in-sync replica goes below; waiting would block rolls.
    verdict = judge_stop(0, [part("single", 0, (0,), (0,)), part("tight", 0, (0, 1), (0, 1))],
                         {"single": 1, "tight": 2})
    assert verdict.safe and verdict.unavoidable == ("single-0", "tight-0")


def test_the_message_names_ten_partitions_at_most():
    partitions = [part("t", p, (0, 1, 2), (0, 1)) for p in range(12)]
    verdict = judge_stop(0, partitions, {"t": 2})
    assert len(verdict.held_by) == 12
    assert verdict.reason(0).startswith("stopping broker 0 would leave 12 partitions") and \
        verdict.reason(0).endswith(" ...")
    assert repr(verdict) == "<StopVerdict held held_by=12>"
