"""The history checker on hand-made histories: each anomaly it names is caught, named first when it is the
earliest, shown by the events that prove it; clean histories (including legal indeterminate outcomes)
pass."""

from __future__ import annotations

import io
import json

import pytest

from kanal.deploy.chaos.checker import check
from kanal.deploy.chaos.history import Recorder, parse_lines


class H:
    """A history under construction; every event gets the next time step."""

    def __init__(self) -> None:
        self.events: list[dict] = []

    def add(self, type_: str, process: str, **fields) -> dict:
        event = {"type": type_, "time": float(len(self.events)), "process": process, **fields}
        self.events.append(event)
        return event

    def produce(self, process: str, seq: int, offset: int, topic: str = "t", partition: int = 0) -> str:
        value = f"{process}:{seq}"
        self.add("send", process, topic=topic, partition=partition, value=value)
        self.add("ack", process, topic=topic, partition=partition, value=value, offset=offset)
        return value

    def final(self, records: list[str], topic: str = "t", partition: int = 0, epoch: int = 1) -> None:
        for offset, value in enumerate(records):
            self.add("final", "final", topic=topic, partition=partition, offset=offset, value=value,
                     leader_epoch=epoch)
        self.add("final_end", "final", topic=topic, partition=partition, end_offset=len(records))


def clean() -> H:
    h = H()
    a = [h.produce("p0", i, i) for i in range(3)]
    h.add("read", "c0", topic="t", partition=0, offset=0, value=a[0], leader_epoch=1)
    h.add("commit", "c0", group="g", topic="t", partition=0, offset=1)
    h.add("committed", "c1", group="g", topic="t", partition=0, offset=1, invoked=h.events[-1]["time"] + 0.5)
    h.add("read", "c1", topic="t", partition=0, offset=1, value=a[1], leader_epoch=1)
    h.add("commit", "c1", group="g", topic="t", partition=0, offset=2)
    for observer in (0, 1, 2):
        h.add("leader", "monitor", observer=observer, topic="t", partition=0, leader=1, epoch=1)
        h.add("controller", "monitor", observer=observer, leader=0, epoch=3)
    h.add("leader", "monitor", observer=0, topic="t", partition=0, leader=-1, epoch=2)  # offline: no leader
    h.add("leader", "monitor", observer=0, topic="t", partition=0, leader=2, epoch=3)
    h.add("controller", "monitor", observer=2, leader=-1, epoch=4)  # an election in progress
    h.add("controller", "monitor", observer=1, leader=1, epoch=4)
    h.final(a)
    return h


def test_a_clean_history_passes():
    report = check(clean().events)
    assert report.ok, [str(v) for v in report.violations]
    assert (report.sent, report.acknowledged, report.read, report.final_records) == (3, 3, 2, 3)
    assert report.unchecked == []


def test_indeterminate_records_may_or_may_not_be_stored():
    h = H()
    a = h.produce("p0", 0, 0)
    h.add("send", "p0", topic="t", partition=0, value="p0:1")
    h.add("fail", "p0", topic="t", partition=0, value="p0:1", error="REQUEST_TIMED_OUT")
    h.add("send", "p0", topic="t", partition=0, value="p0:2")
    h.add("fail", "p0", topic="t", partition=0, value="p0:2", error="REQUEST_TIMED_OUT")
    b = h.produce("p0", 3, 2)
    h.final([a, "p0:1", b])  # p0:1 stored, p0:2 not: both fine
    assert check(h.events).ok


def test_records_of_a_deleted_topic_may_go():
    h = H()
    h.produce("p0", 0, 0, topic="churn-1")
    h.add("read", "c0", topic="churn-1", partition=0, offset=0, value="p0:0", leader_epoch=1)
    h.add("delete_topic", "admin", topic="churn-1", ok=True, error="")
    h.final([])
    report = check(h.events)
    assert report.ok and report.unchecked == []


def test_a_partition_without_a_final_read_is_unchecked_not_passed():
    h = H()
    h.produce("p0", 0, 0, partition=1)
    h.final([])
    report = check(h.events)
    assert report.ok and report.unchecked == [("t", 1)]


def only(report, kind):
    kinds = {v.kind for v in report.violations}
    assert kind in kinds, [str(v) for v in report.violations]
    return next(v for v in report.violations if v.kind == kind)


def test_an_acknowledged_record_missing_at_the_end_is_lost():
    h = H()
    a = [h.produce("p0", i, i) for i in range(3)]
    h.final(a[:2])
    report = check(h.events)
    v = only(report, "lost")
    assert report.first is v and "p0:2" in v.message and "ends at 2" in v.message
    assert [e["type"] for e in v.events] == ["ack", "final_end"]


def test_an_acknowledged_record_overwritten_is_lost():
    h = H()
    a = [h.produce("p0", i, i) for i in range(2)]
    h.final([a[0], "p1:0"])
    v = only(check(h.events), "lost")
    assert "holds 'p1:0'" in v.message and [e["type"] for e in v.events] == ["ack", "final"]


def test_a_value_at_two_offsets_is_a_duplicate():
    h = H()
    a = h.produce("p0", 0, 0)
    h.final([a, a])
    report = check(h.events)
    v = only(report, "duplicate")
    assert {e["offset"] for e in v.events} == {0, 1}
    assert report.counts()["duplicate"] == 1


def test_a_producers_records_stored_out_of_order_are_reordered():
    h = H()
    h.add("send", "p0", topic="t", partition=0, value="p0:0")
    h.add("send", "p0", topic="t", partition=0, value="p0:1")
    h.final(["p0:1", "p0:0"])
    v = only(check(h.events), "reorder")
    assert [e["value"] for e in v.events] == ["p0:1", "p0:0"]


def test_two_reads_of_one_offset_that_disagree_are_divergent():
    h = H()
    a = h.produce("p0", 0, 0)
    h.add("read", "c0", topic="t", partition=0, offset=0, value=a, leader_epoch=1)
    h.add("read", "c1", topic="t", partition=0, offset=0, value="p9:9", leader_epoch=2)
    h.final([a])
    report = check(h.events)
    v = only(report, "divergent")
    assert [e["process"] for e in v.events] == ["p0", "c1"] or [e["process"] for e in v.events] == [
        "c0",
        "c1",
    ]


def test_an_acknowledgement_and_a_read_that_disagree_are_divergent():
    h = H()
    h.add("read", "c0", topic="t", partition=0, offset=0, value="p1:0", leader_epoch=1)
    a = h.produce("p0", 0, 0)
    h.final([a])
    only(check(h.events), "divergent")


def test_an_in_sync_replica_whose_own_log_disagrees_with_the_leader_below_the_end_is_divergent():
    h = H()
    a = [h.produce("p0", i, i) for i in range(3)]
    h.final(a)
    for broker in (1, 2):  # two replicas that agree with the leader: fine
        for offset, value in enumerate(a):
            h.add("replica", "replicas", broker=broker, topic="t", partition=0, offset=offset, value=value)
    h.add("replica", "replicas", broker=0, topic="t", partition=0, offset=0, value=a[0])
    h.add(
        "replica", "replicas", broker=0, topic="t", partition=0, offset=3, value="p1:7"
    )  # past the end: not judged
    assert check(h.events).ok
    # broker 0 kept a deposed leader's tail where the leader stored other records: once per replica
    h.add("replica", "replicas", broker=0, topic="t", partition=0, offset=1, value="p1:5")
    h.add("replica", "replicas", broker=0, topic="t", partition=0, offset=2, value="p1:6")
    v = only(check(h.events), "divergent")
    assert "broker 0's own log of t-0 holds 'p1:5' at offset 1" in v.message
    assert [e["type"] for e in v.events] == ["final", "replica"]


def test_a_read_record_gone_from_the_final_read_vanished():
    h = H()
    a = h.produce("p0", 0, 0)
    h.add("send", "p0", topic="t", partition=0, value="p0:1")
    h.add("read", "c0", topic="t", partition=0, offset=1, value="p0:1", leader_epoch=1)  # above the HW
    h.add("fail", "p0", topic="t", partition=0, value="p0:1", error="NOT_ENOUGH_REPLICAS")
    h.final([a])
    report = check(h.events)
    v = only(report, "vanished")
    assert report.first is v and [e["type"] for e in v.events] == ["read", "final_end"]


def test_a_commit_below_an_acknowledged_commit_goes_backwards():
    h = H()
    h.add("commit", "c0", group="g", topic="t", partition=0, offset=5)
    h.add("commit", "c1", group="g", topic="t", partition=0, offset=3)
    h.final([])
    v = only(check(h.events), "commit_backwards")
    assert [e["offset"] for e in v.events] == [5, 3]


def test_a_committed_fetch_below_an_earlier_commit_goes_backwards():
    h = H()
    h.add("commit", "c0", group="g", topic="t", partition=0, offset=5)
    h.add("committed", "c1", group="g", topic="t", partition=0, offset=2, invoked=0.5)
    h.final([])
    only(check(h.events), "commit_backwards")


def test_a_committed_fetch_asked_before_the_commit_may_see_the_old_offset():
    h = H()
    h.add("commit", "c0", group="g", topic="t", partition=0, offset=2)
    h.add("commit", "c0", group="g", topic="t", partition=0, offset=5)  # at t=1
    h.add("committed", "c1", group="g", topic="t", partition=0, offset=2, invoked=0.5)  # asked at 0.5
    h.final([])
    assert check(h.events).ok


def test_two_leaders_in_one_leader_epoch():
    h = H()
    h.add("leader", "monitor", observer=0, topic="t", partition=0, leader=1, epoch=4)
    h.add("leader", "monitor", observer=2, topic="t", partition=0, leader=2, epoch=4)
    h.final([])
    v = only(check(h.events), "two_leaders")
    assert "epoch 4" in v.message


def test_two_active_controllers_in_one_epoch():
    h = H()
    h.add("controller", "monitor", observer=0, leader=0, epoch=7)
    h.add("controller", "monitor", observer=1, leader=1, epoch=7)
    h.final([])
    v = only(check(h.events), "two_controllers")
    assert "epoch 7" in v.message


def test_an_older_leader_epoch_after_a_newer_one_goes_backwards():
    h = H()
    for offset, epoch in enumerate([1, 2, 2, 1, 3]):
        h.add(
            "final", "final", topic="t", partition=0, offset=offset, value=f"p0:{offset}", leader_epoch=epoch
        )
    h.add("final_end", "final", topic="t", partition=0, end_offset=5)
    v = only(check(h.events), "epoch_backwards")
    assert [e["offset"] for e in v.events] == [1, 3] and check(h.events).counts()["epoch_backwards"] == 1


def test_the_first_violation_is_the_earliest_proven():
    h = H()
    h.add("controller", "monitor", observer=0, leader=0, epoch=7)
    h.add("leader", "monitor", observer=0, topic="t", partition=0, leader=1, epoch=4)
    h.add("leader", "monitor", observer=2, topic="t", partition=0, leader=2, epoch=4)  # t=2: proven here
    h.add("controller", "monitor", observer=1, leader=1, epoch=7)  # t=3
    h.final([])
    report = check(h.events)
    assert [v.kind for v in report.violations] == ["two_leaders", "two_controllers"]
    assert report.first.kind == "two_leaders" and "two_leaders at t=2.000s" in str(report.first)


def test_a_recorded_history_reads_back_and_a_torn_last_line_is_ignored():
    out = io.StringIO()
    ticks = iter([0.0, 0.25, 0.5])
    recorder = Recorder(out, clock=lambda: next(ticks))
    recorder.record("send", "p0", topic="t", partition=0, value="p0:0")
    recorder.record("ack", "p0", topic="t", partition=0, value="p0:0", offset=0)
    lines = out.getvalue().splitlines()
    assert [json.loads(line)["time"] for line in lines] == [0.25, 0.5]
    events = list(parse_lines([*lines, '{"type": "ack", "ti']))
    assert events == recorder.events
    with pytest.raises(ValueError, match="line 1"):
        list(parse_lines(['{"type": "nonsense", "time": 0}', lines[0]]))
    with pytest.raises(ValueError):
        recorder.record("nonsense", "p0")


@pytest.mark.parametrize("line", [
    '{"type": "ack", "time": 1.5}',                       # no process
    '{"type": "ack", "time": "1.5", "process": "p0"}',    # time as text
    '{"type": "ack", "time": true, "process": "p0"}',     # time as a bool
    '["ack", 1.5, "p0"]',                                 # not an object
])
def test_a_line_without_the_fields_every_event_has_is_not_an_event(line):
    with pytest.raises(ValueError, match="line 1 is not a history event"):
        list(parse_lines([line, '{"type": "ack", "time": 2, "process": "p0"}']))


def test_kanal_chaos_check_exits_1_on_a_violation_and_0_on_a_clean_history(tmp_path, capsys):
    from kanal.deploy.chaos.cli import main

    clean_file, bad_file = tmp_path / "clean.jsonl", tmp_path / "bad.jsonl"
    clean_file.write_text("".join(json.dumps(e) + "\n" for e in clean().events))
    h = H()
    a = [h.produce("p0", i, i) for i in range(3)]
    h.final(a[:2])
    bad_file.write_text("".join(json.dumps(e) + "\n" for e in h.events))
    assert main(["check", str(clean_file)]) == 0
    assert "no violations" in capsys.readouterr().out
    assert main(["check", str(bad_file)]) == 1
    out = capsys.readouterr().out
    assert "violations: lost 1" in out and "'p0:2' acknowledged at t-0 offset 2" in out
    assert main(["check", str(tmp_path / "missing.jsonl")]) == 2
    assert main(["check", str(bad_file), "--output", "json"]) == 1
    verdict = json.loads(capsys.readouterr().out)
    assert verdict["ok"] is False and verdict["violations_by_kind"] == {"lost": 1}
    assert len(verdict["violations"]) == 1
    assert "'p0:2' acknowledged at t-0 offset 2" in verdict["violations"][0]
    assert main(["check", str(clean_file), "--output", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["ok"] is True


# ---- issue 41: reads by leader epoch, metadata in the history, recovery, loss unclean election allows ----

def test_a_read_of_a_truncated_copy_is_flagged_even_when_a_retry_wrote_the_same_value_back():
    h = H()
    a = [h.produce("p0", i, i) for i in range(3)]
    # A consumer read offset 2 from a leader (epoch 1) that was then deposed; the copy was truncated and
    # the producer's retry wrote the same value at the same offset under the new leader (epoch 2).
    h.add("read", "c0", topic="t", partition=0, offset=2, value=a[2], leader_epoch=1)
    for offset, value in enumerate(a):
        h.add("final", "final", topic="t", partition=0, offset=offset, value=value,
              leader_epoch=1 if offset < 2 else 2)
    h.add("final_end", "final", topic="t", partition=0, end_offset=3)
    report = check(h.events)
    assert report.counts()["read_uncommitted"] == 1
    assert report.counts()["vanished"] == 0  # the value is the same: only the epoch tells
    assert "leader epoch 1" in report.first.message and "epoch 2" in report.first.message


def acks1_history() -> tuple[H, list[str]]:
    """Beside an idempotent producer, an acks=1 producer's records: acknowledged at offsets 2-5 by a leader
    that was then cut off, the last two truncated away; its retry of 1 stored it twice; the new leader
    stored 5 before 4 and the idempotent producer's p0:2 where the deposed leader had acks1-0:3."""
    h = H()
    strict = [h.produce("p0", i, i) for i in range(2)]
    sent = [f"acks1-0:{i}" for i in range(6)]
    for offset, value in enumerate(sent[:4], start=2):
        h.add("send", "acks1-0", topic="t", partition=0, value=value, acks="1")
        h.add("ack", "acks1-0", topic="t", partition=0, value=value, offset=offset, acks="1")
    h.add("read", "c0", topic="t", partition=0, offset=3, value=sent[1], leader_epoch=1)
    last = h.produce("p0", 2, 7)
    h.final([*strict, sent[0], sent[1], sent[1], sent[5], sent[4], last])
    return h, sent


def test_acks1_records_may_be_lost_duplicated_or_reordered_but_their_reads_must_be_committed():
    h, sent = acks1_history()
    report = check(h.events)
    assert report.ok, [str(v) for v in report.violations]
    # A consumer read a record of the truncated tail (above the high-water mark): that is still vanished.
    h.add("read", "c0", topic="t", partition=0, offset=5, value=sent[3], leader_epoch=1)
    v = only(check(h.events), "vanished")
    assert "read 'acks1-0:3' at t-0 offset 5" in v.message
    # ... and an in-sync replica that kept the deposed leader's tail below the end is divergent.
    h, sent = acks1_history()
    h.add("replica", "replicas", broker=2, topic="t", partition=0, offset=5, value=sent[3])
    assert "broker 2's own log of t-0" in only(check(h.events), "divergent").message
    # The idempotent producer beside it is held to the strict rules: its record lost is a violation.
    h, _sent = acks1_history()
    h.events = [e for e in h.events if not (e["type"] == "final" and e["value"] == "p0:2")]
    assert "'p0:2' acknowledged at t-0 offset 7" in only(check(h.events), "lost").message


def test_without_the_acks1_mark_the_same_history_is_lost_duplicated_and_reordered():
    h, _sent = acks1_history()
    for e in h.events:
        e.pop("acks", None)
    kinds = {v.kind for v in check(h.events).violations}
    assert {"lost", "duplicate", "reorder"} <= kinds, kinds


def test_a_read_with_no_epoch_known_is_judged_by_value_alone():
    h = H()
    a = [h.produce("p0", i, i) for i in range(2)]
    h.add("read", "c0", topic="t", partition=0, offset=1, value=a[1], leader_epoch=None)
    h.final(a, epoch=2)
    assert check(h.events).ok


def metadata_view(h: H, node: str, offset: int, topics: dict, *, configs_known: bool = True) -> dict:
    return h.add("metadata", "final", node=node, offset=offset, final=True, configs_known=configs_known,
                 topics={name: {"partitions": n, "configs": c} for name, (n, c) in topics.items()})


def test_an_acknowledged_topic_missing_from_a_node_after_the_faults_is_metadata_lost():
    h = H()
    h.add("create_topic", "admin", topic="chaos", ok=True, error="", count=3, configs={})
    h.add("metadata", "monitor", node="broker-0", offset=120, final=False)
    h.add("nemesis", "nemesis", fault="power/controllers", action="start",
          detail="controller-0,controller-1,controller-2")
    metadata_view(h, "controller-0", 4, {})
    metadata_view(h, "broker-0", 130, {"chaos": (3, {})})
    report = check(h.events)
    lost = [v for v in report.violations if v.kind == "metadata_lost"]
    assert len(lost) == 1
    assert "creation of topic 'chaos'" in lost[0].message and "controller-0" in lost[0].message
    assert "broker-0" not in lost[0].message
    backwards = [v for v in report.violations if v.kind == "metadata_backwards"]
    assert [v.message.split("'")[0] for v in backwards] == ["controller-0"]
    assert "below offset 120 that broker-0 had applied" in backwards[0].message


def test_deletes_partitions_and_configs_acknowledged_are_checked_and_later_operations_excuse():
    h = H()
    h.add("create_topic", "admin", topic="a", ok=True, error="", count=1, configs={})
    h.add("delete_topic", "admin", topic="a", ok=True, error="")
    h.add("create_topic", "admin", topic="b", ok=True, error="", count=1, configs={})
    h.add("create_partitions", "admin", topic="b", count=2, ok=True, error="")
    h.add("alter_config", "admin", topic="b", key="retention.ms", value="5000", ok=True, error="")
    h.add("create_topic", "admin", topic="c", ok=True, error="", count=1, configs={})
    h.add("delete_topic", "admin", topic="c", ok=False, error="timeout")  # indeterminate: may be gone
    h.add("create_topic", "admin", topic="d", ok=False, error="timeout")  # indeterminate: may be there
    metadata_view(h, "controller-1", 50, {"a": (1, {}), "b": (1, {"retention.ms": "100"})})
    metadata_view(h, "broker-2", 50, {"b": (2, {})}, configs_known=False)
    lost = [v.message for v in check(h.events).violations if v.kind == "metadata_lost"]
    assert len(lost) == 3
    assert "deletion of topic 'a'" in lost[0] and "controller-1" in lost[0] and "broker-2" not in lost[0]
    assert "raising 'b' to 2 partitions" in lost[1] and "gives it 1 partitions" in lost[1]
    assert "retention.ms='5000'" in lost[2] and "broker-2" not in lost[2]


def test_users_and_acls_acknowledged_are_checked_on_the_controllers_only():
    acl = "ALLOW User:u1@* READ TOPIC:LITERAL:t1"
    h = H()
    h.add("create_user", "admin", user="u0", ok=True, error="")
    h.add("create_user", "admin", user="u1", ok=True, error="")
    h.add("create_acl", "admin", acl=acl, ok=True, error="")
    h.add("create_user", "admin", user="u2", ok=True, error="")
    h.add("delete_user", "admin", user="u2", ok=False, error="timeout")  # indeterminate: may be gone
    h.add("delete_user", "admin", user="u0", ok=True, error="")
    metadata_view(h, "controller-0", 50, {})
    h.events[-1].update(users=["u0", "u1"], acls=[])
    metadata_view(h, "controller-1", 50, {})
    h.events[-1].update(users=["u1"], acls=[acl])
    metadata_view(h, "broker-0", 50, {}, configs_known=False)  # a broker knows no users or ACLs
    lost = [v.message for v in check(h.events).violations if v.kind == "metadata_lost"]
    assert len(lost) == 2, lost
    assert f"creation of acl {acl!r}" in lost[0]
    assert "controller-0" in lost[0] and "controller-1" not in lost[0]
    assert "deletion of user 'u0'" in lost[1]
    assert "controller-0 (metadata offset 50) still holds it" in lost[1]


def test_a_running_nodes_metadata_offset_going_down_is_a_violation_but_not_across_its_restart():
    h = H()
    h.add("metadata", "monitor", node="broker-1", offset=40, final=False)
    h.add("nemesis", "nemesis", fault="kill/node", action="start", detail="broker-1")
    h.add("metadata", "monitor", node="broker-1", offset=0, final=False)  # restarted, replaying
    h.add("metadata", "monitor", node="broker-1", offset=45, final=False)
    assert check(h.events).ok
    h.add("metadata", "monitor", node="broker-1", offset=30, final=False)
    report = check(h.events)
    assert report.counts()["metadata_backwards"] == 1
    assert "from offset 45 down to 30 while it ran" in report.first.message


def test_a_cluster_that_does_not_come_back_is_a_violation_with_its_evidence():
    h = clean()
    h.add("no_recovery", "runner", detail="final read: no end offsets for chaos after 60s")
    report = check(h.events)
    assert report.counts()["no_recovery"] == 1
    assert "no end offsets" in report.first.message


def unclean_history(setting: str | None) -> H:
    h = H()
    configs = {} if setting is None else {"unclean.leader.election.enable": setting}
    h.add("create_topic", "admin", topic="t", ok=True, error="", count=1, configs=configs)
    h.add("leader", "monitor", observer=0, topic="t", partition=0, leader=1, epoch=1, isr=[1, 2])
    a = [h.produce("p0", i, i) for i in range(3)]
    # Every ISR member down; broker 0, a stale replica outside the ISR, is elected alone.
    h.add("leader", "monitor", observer=0, topic="t", partition=0, leader=0, epoch=2, isr=[0])
    b = h.produce("p0", 3, 1)
    h.final([a[0], b])
    return h


def test_loss_after_an_unclean_election_is_allowed_only_where_the_topic_allows_it():
    allowed = check(unclean_history("true").events)
    # a[1] and a[2] (acknowledged before the election) gone, and offset 1 acknowledged twice (divergent)
    assert allowed.ok and allowed.allowed_loss == 3
    assert check(unclean_history(None).events).counts()["lost"] == 2  # off by default, as in Kafka
    assert check(unclean_history("false").events).counts()["lost"] == 2


# ---- transactions: atomicity and aborts against the read_committed final read ----

def txn(h: H, number: int, partitions: list[int], action: str | None, ok: bool = True,
        process: str = "txn-0") -> list[str]:
    """A transaction's records, then its end (`action` None: no end recorded, the producer was stopped)."""
    values = []
    for i, partition in enumerate(partitions):
        value = f"{process}:{number}:{i}"
        h.add("txn_send", process, txn=number, topic="x", partition=partition, value=value)
        values.append(value)
    if action is not None:
        h.add("txn_end", process, txn=number, action=action, ok=ok, error="" if ok else "REQUEST_TIMED_OUT")
    return values


def txn_final(h: H, by_partition: dict[int, list[str]]) -> None:
    for partition, values in by_partition.items():
        h.final(values, topic="x", partition=partition)


def test_transactions_read_committed_as_they_ended_pass():
    h = H()
    committed = txn(h, 0, [0, 1, 0], "commit")
    txn(h, 1, [1], "abort")
    unknown_absent = txn(h, 2, [0], "commit", ok=False)  # the commit's outcome unknown: none shown
    unknown_whole = txn(h, 3, [0, 1], "abort", ok=False)  # unknown again: all shown
    txn(h, 4, [1], None)  # left open when the producer stopped: the coordinator aborted it
    assert unknown_absent
    txn_final(h, {0: [committed[0], committed[2], unknown_whole[0]], 1: [committed[1], unknown_whole[1]]})
    report = check(h.events)
    assert report.ok, [str(v) for v in report.violations]
    assert report.transactions == {"committed": 1, "aborted": 1, "unknown": 3}


def test_a_record_of_an_acknowledged_abort_in_the_read_committed_read_is_read_aborted():
    h = H()
    aborted = txn(h, 0, [0, 1], "abort")
    txn_final(h, {0: [aborted[0]], 1: []})
    report = check(h.events)
    assert report.counts()["read_aborted"] == 1, report.counts()
    (violation,) = report.violations
    assert "transaction 0 of txn-0 was aborted" in violation.message and "1 of its 2" in violation.message
    assert [e["type"] for e in violation.events].count("final") == 1


def test_a_committed_transaction_not_whole_is_partial_and_so_is_an_unknown_one_half_shown():
    h = H()
    committed = txn(h, 0, [0, 1], "commit")
    unknown = txn(h, 1, [0, 1], "commit", ok=False)
    # The producer's retried abort after a failed commit: the acknowledged end is the one that counts.
    retried = txn(h, 2, [0], "commit", ok=False)
    h.add("txn_end", "txn-0", txn=2, action="abort", ok=True, error="")
    txn_final(h, {0: [committed[0], unknown[0], retried[0]], 1: []})
    kinds = sorted(v.kind for v in check(h.events).violations)
    assert kinds == ["read_aborted", "txn_partial", "txn_partial"]


def test_a_transaction_on_a_partition_the_final_read_did_not_end_is_not_judged():
    h = H()
    txn(h, 0, [0, 1], "commit")
    txn_final(h, {0: []})  # partition 1 never read to its end
    report = check(h.events)
    assert report.ok and report.unchecked == [("x", 1)]


# ---- a compacted topic: acknowledged records may go only when a later record of their key stays ----

def compacted(kept_offsets: list[int], *, policy: str = "compact") -> H:
    h = H()
    h.add("create_topic", "admin", topic="c", ok=True, error="", count=1, configs={"cleanup.policy": policy})
    acked = []
    for offset in range(6):  # key a: offsets 0-3, key b: 4-5
        key = "a" if offset < 4 else "b"
        value = f"keyed-0:{offset}"
        h.add("send", "keyed-0", topic="c", partition=0, value=value, key=key)
        acked.append(h.add("ack", "keyed-0", topic="c", partition=0, value=value, offset=offset, key=key))
    for offset in kept_offsets:
        h.add("final", "final", topic="c", partition=0, offset=offset, value=acked[offset]["value"],
              leader_epoch=1, key=acked[offset]["key"])
    h.add("final_end", "final", topic="c", partition=0, end_offset=6)
    return h


# compact,delete compacts too (either order, spaces allowed): the same exemption.
COMPACTING_POLICIES = ["compact", "compact,delete", "delete, compact"]


@pytest.mark.parametrize("policy", COMPACTING_POLICIES)
def test_compaction_may_remove_a_record_only_when_a_later_one_of_its_key_is_kept(policy):
    assert check(compacted([3, 5], policy=policy).events).ok  # each key's latest kept: the rest compacted
    assert check(compacted([0, 1, 2, 3, 4, 5], policy=policy).events).ok  # nothing compacted yet
    # Kept more than the latest: compaction need not be done.
    assert check(compacted([1, 3, 5], policy=policy).events).ok


@pytest.mark.parametrize("policy", COMPACTING_POLICIES)
def test_compaction_that_kept_an_older_record_of_a_key_instead_of_its_latest_is_lost(policy):
    report = check(compacted([0, 5], policy=policy).events)  # key a's first record kept, later three gone
    assert [v.kind for v in report.violations] == ["lost"] * 3
    assert all("compaction left no later record of its key 'a'" in v.message for v in report.violations)
    assert sorted(int(v.events[0]["offset"]) for v in report.violations) == [1, 2, 3]


@pytest.mark.parametrize("policy", ["delete", "compact,foo"])  # the second could not have been created
def test_outside_a_compacted_topic_a_superseded_record_still_counts_as_lost(policy):
    report = check(compacted([3, 5], policy=policy).events)
    assert [v.kind for v in report.violations] == ["lost"] * 4


@pytest.mark.parametrize(("copy", "kinds"), [
    (lambda src: src, set()),
    (lambda src: src[:1] + src[2:], {"mirror_lost"}),
    (lambda src: src + ["p9:0"], {"mirror_extra"}),
    (lambda src: src[:2] + src[1:], {"mirror_duplicate"}),
    (lambda src: [src[1], src[0], src[2]], {"mirror_reorder"}),
])
def test_a_mirrors_copy_must_be_its_sources_final_log(copy, kinds):
    """The `mirror` fault (issue 46): the copy of each partition on the other cluster holds the source's
    final log, each record once, in order; anything else is named."""
    h = H()
    values = [h.produce("p0", i, i) for i in range(3)]
    h.add("mirror", "runner", source_topic="t", remote_topic="A.t")
    h.final(values)
    h.final(copy(values), topic="A.t")
    report = check(h.events)
    assert {v.kind for v in report.violations} == kinds, report.violations
    assert report.final_records == 3 and report.unchecked == []  # the copy's records are not the source's


def test_a_mirrors_copy_never_read_is_unchecked_not_passed():
    h = H()
    values = [h.produce("p0", i, i) for i in range(2)]
    h.add("mirror", "runner", source_topic="t", remote_topic="A.t")
    h.final(values)
    report = check(h.events)
    assert report.unchecked == [("A.t", 0)]
