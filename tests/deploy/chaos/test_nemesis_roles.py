"""The nemesis aims a fault at a role ("the leader of chaos-0") by asking a broker when the fault starts
(a real gRPC broker on loopback, scripted): a partition whose leader is still being elected gets its fault
once one is, within half the fault's hold; with none by then the fault is recorded as skipped."""

from __future__ import annotations

from kanal.deploy.chaos.history import Recorder
from kanal.deploy.chaos.nemesis import Nemesis
from kanal.deploy.chaos.schedule import Fault
from tests.clients.scripted_broker import Layout, ScriptedBroker


class _Electing(ScriptedBroker):
    """Answers partition 0 without a leader until its `elected_after`-th Metadata call."""

    elected_after = 3

    def Metadata(self, request, context):
        if self.calls["Metadata"] + 1 >= self.elected_after:
            self.layout.topics["chaos"][0] = self.broker_id
        return super().Metadata(request, context)


class _Target:
    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap
        self.killed: list[str] = []

    def kill(self, node: str) -> None:
        self.killed.append(node)


def _nemesis(elected_after: int) -> tuple[Nemesis, _Target, Recorder, ScriptedBroker]:
    layout = Layout(topics={"chaos": [-1]})
    broker = _Electing(1, layout)
    broker.elected_after = elected_after
    target, recorder = _Target(broker.endpoint), Recorder()
    return Nemesis(target, recorder), target, recorder, broker


def test_a_leader_being_elected_is_waited_for_and_then_hit():
    nemesis, target, recorder, broker = _nemesis(elected_after=3)
    try:
        detail = nemesis.start(Fault(0.0, 6.0, "kill", "node", ("leader:chaos:0",)))
        assert detail == "broker-1" and target.killed == ["broker-1"]
        assert broker.calls["Metadata"] >= 3
        assert [e["action"] for e in recorder.events if e["type"] == "nemesis"] == ["start"]
    finally:
        broker.stop()


def test_no_leader_within_half_the_hold_is_a_skip():
    nemesis, target, recorder, broker = _nemesis(elected_after=10_000)
    try:
        assert nemesis.start(Fault(0.0, 1.0, "kill", "node", ("leader:chaos:0",))) == ""
        assert target.killed == []
        skipped = [e for e in recorder.events if e["type"] == "nemesis"]
        assert [e["action"] for e in skipped] == ["skip"] and "leader:chaos:0" in skipped[0]["detail"]
    finally:
        broker.stop()
