"""Remote-log metadata (tiered storage): AlterRemoteLog decided against the image, the records applied.

Each rule of metadata/remote_log.py: contiguity, well-formed segments, epochs that never go back, fencing
of a deposed leader, remote.storage.enable, an idempotent resend, start moves that drop segments, and
RemoveTopic taking the remote logs with it. A refused item writes nothing; apply refuses the same records
a decision would never write.
"""

from __future__ import annotations

import pytest

from kanal.metadata import (
    MetadataInvariantError,
    RemoteLog,
    apply,
    check_image,
    decide_alter_remote_log,
    decide_delete_topics,
)
from kanal.metadata.remote_log import REMOTE_STORAGE_ENABLE
from kanal.v1 import admin_pb2, controller_pb2, metadata_pb2
from kanal.v1.error import ErrorCode

from .conftest import Harness, segment

E = ErrorCode


@pytest.fixture
def h() -> Harness:
    """Brokers 0, 1, 2; topic "t" (2 partitions, 3 replicas) with remote storage on, "plain" without."""
    h = Harness()
    h.add_brokers([0, 1, 2])
    h.create_topic("t", 2, 3, {REMOTE_STORAGE_ENABLE: "true"})
    h.create_topic("plain", 1, 1)
    return h


def remote(h: Harness, name: str = "t", partition: int = 0) -> RemoteLog | None:
    return h.image.remote_log(h.image.topics[name].topic_id, partition)


def bounds(log: RemoteLog | None) -> tuple[int, int, list[tuple[int, int]]]:
    assert log is not None
    return log.log_start_offset, log.end_offset, [(s.base_offset, s.end_offset) for s in log.segments]


def only(reply: controller_pb2.AlterRemoteLogResponse) -> controller_pb2.AlterRemoteLogResponse.Item:
    assert reply.error == E.NONE and len(reply.items) == 1, reply
    return reply.items[0]


def refused(h: Harness, code: int, name: str = "t", **kwargs) -> controller_pb2.AlterRemoteLogResponse.Item:
    """An item for partition 0 of `name` is refused with `code`, and nothing is written."""
    before = h.image.copy()
    item = only(h.alter_remote_log(name, 0, **kwargs))
    assert item.error == code, item
    assert item.error_message
    assert h.image == before
    return item


# -- recording segments ----------------------------------------------------------------------------------


def test_segments_are_recorded_in_order(h: Harness) -> None:
    assert remote(h) is None
    item = only(h.alter_remote_log("t", 0, segments=[(0, 100), (100, 250)]))
    assert (item.error, item.log_start_offset, item.end_offset) == (E.NONE, 0, 250)
    item = only(h.alter_remote_log("t", 0, segments=[(250, 300)]))
    assert (item.log_start_offset, item.end_offset) == (0, 300)
    assert bounds(remote(h)) == (0, 300, [(0, 100), (100, 250), (250, 300)])
    first = remote(h).segments[0]
    leader = h.image.topics["t"].partitions[0].leader
    assert (first.size_bytes, first.broker_id, first.leader_epoch) == (10_000, leader, 0)
    assert remote(h, "t", 1) is None  # the other partition has none
    check_image(h.image)


def test_the_records_carry_what_the_leader_sent(h: Harness) -> None:
    before = h.image.next_offset
    h.alter_remote_log("t", 0, segments=[(0, 100)], epochs=[(0, 0)], aborted=[(7, 3, 40)],
                       open_at_end=[(9, 90)], max_timestamp_ms=-1)
    assert h.image.next_offset == before + 1
    s = remote(h).segments[0]
    assert [tuple(a) for a in s.aborted_transactions] == [(7, 3, 40)]
    assert [tuple(o) for o in s.open_transactions] == [(9, 90)]
    assert s.max_timestamp_ms == -1
    assert s.to_record(h.image.topics["t"].topic_id, 0) == segment(
        h.image.topics["t"].topic_id, 0, 0, 100, broker_id=s.broker_id, aborted=[(7, 3, 40)],
        open_at_end=[(9, 90)], max_timestamp_ms=-1,
    )


def test_the_first_segment_may_start_above_zero_and_sets_the_start(h: Harness) -> None:
    """Local retention deleted [0, 500) before tiering was turned on: the remote log starts at 500."""
    h.alter_remote_log("t", 0, segments=[(500, 600)])
    assert bounds(remote(h)) == (500, 600, [(500, 600)])


@pytest.mark.parametrize("base", [99, 101, 0, 50])
def test_a_gap_or_an_overlap_is_out_of_range(h: Harness, base: int) -> None:
    h.alter_remote_log("t", 0, segments=[(0, 100)])
    item = refused(h, E.OFFSET_OUT_OF_RANGE, segments=[(base, 300)])
    assert (item.log_start_offset, item.end_offset) == (0, 100)  # where the leader must go on from


def test_a_failed_segment_fails_its_whole_item(h: Harness) -> None:
    refused(h, E.OFFSET_OUT_OF_RANGE, segments=[(0, 100), (100, 200), (300, 400)])
    assert remote(h) is None


# Each: the segment fields that make [0, 100) malformed.
MALFORMED = {
    "end not above base": {"segments": [(100, 100)]},
    "negative base": {"segments": [(-10, 100)]},
    "empty object": {"segments": [(0, 100)], "size_bytes": 0},
    "negative meta size": {"segments": [(0, 100)], "meta_bytes": -1},
    "timestamp below -1": {"segments": [(0, 100)], "max_timestamp_ms": -2},
    "no epoch entry": {"segments": [(0, 100)], "epochs": []},
    "first entry not at base": {"segments": [(0, 100)], "epochs": [(0, 10)]},
    "entry at end": {"segments": [(0, 100)], "epochs": [(0, 0), (1, 100)]},
    "epochs repeat": {"segments": [(0, 100)], "epochs": [(0, 0), (0, 50)]},
    "epochs go back": {"segments": [(0, 100)], "epochs": [(3, 0), (2, 50)]},
    "offsets go back": {"segments": [(0, 100)], "epochs": [(0, 0), (1, 50), (2, 40)]},
    "negative epoch": {"segments": [(0, 100)], "epochs": [(-1, 0)]},
    "epoch above the uploader's": {"segments": [(0, 100)], "epochs": [(0, 0), (5, 50)]},
    "abort marker outside": {"segments": [(0, 100)], "aborted": [(1, 0, 100)]},
    "abort marker before first": {"segments": [(0, 100)], "aborted": [(1, 50, 40)]},
    "abort markers out of order": {"segments": [(0, 100)], "aborted": [(1, 0, 50), (2, 0, 50)]},
    "negative producer": {"segments": [(0, 100)], "aborted": [(-1, 0, 50)]},
    "open at end": {"segments": [(0, 100)], "open_at_end": [(1, 100)]},
    "two open of one producer": {"segments": [(0, 100)], "open_at_end": [(1, 10), (1, 20)]},
    "no segments": {"segments": []},
}


@pytest.mark.parametrize("fields", MALFORMED.values(), ids=MALFORMED.keys())
def test_a_malformed_segment_is_an_invalid_request(h: Harness, fields: dict) -> None:
    refused(h, E.INVALID_REQUEST, **fields)


@pytest.mark.parametrize("field", ["topic_id", "partition_id", "leader_epoch", "broker_id"])
def test_a_segment_that_names_another_partition_epoch_or_broker_is_refused(h: Harness, field: str) -> None:
    topic = h.image.topics["t"]
    leader = topic.partitions[0].leader
    other = segment(topic.topic_id, 0, 0, 100, broker_id=leader)
    wrong = h.image.topics["plain"].topic_id if field == "topic_id" else 1 + getattr(other, field)
    setattr(other, field, wrong)
    request = controller_pb2.AlterRemoteLogRequest(
        broker_id=leader, broker_epoch=h.image.brokers[leader].broker_epoch,
        items=[controller_pb2.AlterRemoteLogRequest.Item(
            topic_id=topic.topic_id, partition_id=0, leader_epoch=0,
            segments_uploaded=controller_pb2.AlterRemoteLogRequest.SegmentsUploaded(segments=[other]))],
    )
    decision = decide_alter_remote_log(h.image, request, **h.ctx())
    assert decision.records == [] and decision.reply.items[0].error == E.INVALID_REQUEST


def test_an_item_without_a_change_is_an_invalid_request(h: Harness) -> None:
    topic = h.image.topics["t"]
    leader = topic.partitions[0].leader
    request = controller_pb2.AlterRemoteLogRequest(
        broker_id=leader, broker_epoch=h.image.brokers[leader].broker_epoch,
        items=[controller_pb2.AlterRemoteLogRequest.Item(topic_id=topic.topic_id, partition_id=0)],
    )
    assert decide_alter_remote_log(h.image, request, **h.ctx()).reply.items[0].error == E.INVALID_REQUEST


def test_epochs_never_go_back_from_one_segment_to_the_next(h: Harness) -> None:
    h.fence(h.image.topics["t"].partitions[0].leader)  # a new leader: leader epoch 1
    assert h.image.topics["t"].partitions[0].leader_epoch == 1
    h.alter_remote_log("t", 0, segments=[(0, 100)], epochs=[(0, 0), (1, 60)])
    refused(h, E.INVALID_REQUEST, segments=[(100, 200)], epochs=[(0, 100)])
    only(h.alter_remote_log("t", 0, segments=[(100, 200)], epochs=[(1, 100)]))  # the same epoch goes on
    assert [e.epoch for s in remote(h).segments for e in s.epochs] == [0, 1, 1]


# -- a resend after a lost reply -------------------------------------------------------------------------


def test_a_resent_request_answers_none_and_writes_nothing(h: Harness) -> None:
    h.alter_remote_log("t", 0, segments=[(0, 100), (100, 200)])
    before = h.image.copy()
    item = only(h.alter_remote_log("t", 0, segments=[(0, 100), (100, 200)]))
    assert (item.error, item.end_offset) == (E.NONE, 200)
    assert h.image == before  # no record: commit() applied nothing
    # The resend of an earlier request with a new segment behind it: only the new one is written.
    h.alter_remote_log("t", 0, segments=[(100, 200), (200, 300)])
    assert h.image.next_offset == before.next_offset + 1
    assert bounds(remote(h)) == (0, 300, [(0, 100), (100, 200), (200, 300)])


def test_a_different_segment_where_one_is_recorded_is_refused(h: Harness) -> None:
    """Another upload of the same offsets (another leader's segment boundaries, or other bytes) is not
    the recorded one: the leader is told where the remote log ends."""
    h.alter_remote_log("t", 0, segments=[(0, 100)])
    item = refused(h, E.OFFSET_OUT_OF_RANGE, segments=[(0, 100)], size_bytes=123)
    assert item.end_offset == 100
    refused(h, E.OFFSET_OUT_OF_RANGE, segments=[(0, 150)])


def test_a_resent_start_move_answers_none(h: Harness) -> None:
    h.alter_remote_log("t", 0, segments=[(0, 100), (100, 200)])
    h.alter_remote_log("t", 0, start=100)
    before = h.image.copy()
    item = only(h.alter_remote_log("t", 0, start=100))
    assert (item.error, item.log_start_offset) == (E.NONE, 100) and h.image == before


def test_a_segment_still_in_the_log_after_a_start_move_is_recognised_when_resent(h: Harness) -> None:
    h.alter_remote_log("t", 0, segments=[(0, 100), (100, 200)])
    h.alter_remote_log("t", 0, start=150)
    before = h.image.copy()
    assert only(h.alter_remote_log("t", 0, segments=[(100, 200)])).error == E.NONE
    assert h.image == before
    # One the start dropped is gone: below the start, it cannot be recorded again.
    refused(h, E.OFFSET_OUT_OF_RANGE, segments=[(0, 100)])


# -- the remote log start -------------------------------------------------------------------------------


def test_start_moves_drop_the_segments_below_them(h: Harness) -> None:
    h.alter_remote_log("t", 0, segments=[(0, 100), (100, 250), (250, 300)])
    item = only(h.alter_remote_log("t", 0, start=100))
    assert (item.log_start_offset, item.end_offset) == (100, 300)
    assert bounds(remote(h)) == (100, 300, [(100, 250), (250, 300)])
    h.alter_remote_log("t", 0, start=120)  # inside a segment: it stays, read from 120 on
    assert bounds(remote(h)) == (120, 300, [(100, 250), (250, 300)])
    record = h.image.next_offset
    h.alter_remote_log("t", 0, start=300)  # the end: no segment left, the start stays recorded
    assert bounds(remote(h)) == (300, 300, [])
    assert h.image.next_offset == record + 1
    check_image(h.image)
    # The next segment starts at or above it; epochs start over with no segment before.
    refused(h, E.OFFSET_OUT_OF_RANGE, segments=[(250, 400)])
    h.alter_remote_log("t", 0, segments=[(320, 400)])
    assert bounds(remote(h)) == (320, 400, [(320, 400)])


@pytest.mark.parametrize("start", [40, 301])
def test_a_start_outside_the_remote_log_is_out_of_range(h: Harness, start: int) -> None:
    h.alter_remote_log("t", 0, segments=[(0, 100), (100, 300)])
    h.alter_remote_log("t", 0, start=50)
    item = refused(h, E.OFFSET_OUT_OF_RANGE, start=start)
    assert (item.log_start_offset, item.end_offset) == (50, 300)


def test_a_start_move_without_a_remote_log_is_out_of_range(h: Harness) -> None:
    refused(h, E.OFFSET_OUT_OF_RANGE, start=10)
    assert only(h.alter_remote_log("t", 0, start=0)).error == E.NONE  # where it is: nothing to do
    assert remote(h) is None


def test_items_are_decided_one_after_another(h: Harness) -> None:
    topic = h.image.topics["t"]
    leader = topic.partitions[0].leader
    Item = controller_pb2.AlterRemoteLogRequest.Item

    def upload(base, end):
        return Item(topic_id=topic.topic_id, partition_id=0, leader_epoch=0,
                    segments_uploaded=controller_pb2.AlterRemoteLogRequest.SegmentsUploaded(
                        segments=[segment(topic.topic_id, 0, base, end, broker_id=leader)]))

    items = [upload(0, 100), upload(100, 200),
             Item(topic_id=topic.topic_id, partition_id=0, leader_epoch=0,
                  new_log_start=controller_pb2.AlterRemoteLogRequest.NewLogStart(log_start_offset=150)),
             upload(300, 400),  # refused: not contiguous; the next item goes on from the same state
             upload(200, 300)]
    reply = h.commit(decide_alter_remote_log(
        h.image,
        controller_pb2.AlterRemoteLogRequest(
            broker_id=leader, broker_epoch=h.image.brokers[leader].broker_epoch, items=items),
        **h.ctx()))
    assert [(i.error, i.log_start_offset, i.end_offset) for i in reply.items] == [
        (E.NONE, 0, 100), (E.NONE, 0, 200), (E.NONE, 150, 200), (E.OFFSET_OUT_OF_RANGE, 150, 200),
        (E.NONE, 150, 300)]
    assert bounds(remote(h)) == (150, 300, [(100, 200), (200, 300)])


# -- who may record --------------------------------------------------------------------------------------


def test_a_deposed_leader_is_fenced(h: Harness) -> None:
    """The leader uploads a segment, loses leadership (its session ends) and, a zombie, asks to record it
    at its old epoch: refused, whoever asks with that epoch. The new leader records at the new one."""
    old = h.image.topics["t"].partitions[0].leader
    h.fence(old)
    new = h.image.topics["t"].partitions[0].leader
    assert new != old and h.image.topics["t"].partitions[0].leader_epoch == 1
    # commit() would apply nothing either way; the old broker's registration is still current (fenced).
    refused(h, E.FENCED_LEADER_EPOCH, segments=[(0, 100)], broker_id=old, leader_epoch=0)
    refused(h, E.FENCED_LEADER_EPOCH, segments=[(0, 100)], broker_id=new, leader_epoch=0)
    refused(h, E.NOT_LEADER_OR_FOLLOWER, segments=[(0, 100)], broker_id=old, leader_epoch=1)
    assert only(h.alter_remote_log("t", 0, segments=[(0, 100)])).error == E.NONE
    assert remote(h).segments[0].broker_id == new


def test_a_follower_is_not_the_leader(h: Harness) -> None:
    state = h.image.topics["t"].partitions[0]
    follower = next(b for b in state.replicas if b != state.leader)
    refused(h, E.NOT_LEADER_OR_FOLLOWER, segments=[(0, 100)], broker_id=follower)


def test_a_stale_broker_epoch_refuses_the_whole_request(h: Harness) -> None:
    topic = h.image.topics["t"]
    leader = topic.partitions[0].leader
    request = controller_pb2.AlterRemoteLogRequest(
        broker_id=leader, broker_epoch=h.image.brokers[leader].broker_epoch + 1,
        items=[controller_pb2.AlterRemoteLogRequest.Item(
            topic_id=topic.topic_id, partition_id=0,
            new_log_start=controller_pb2.AlterRemoteLogRequest.NewLogStart(log_start_offset=0))],
    )
    decision = decide_alter_remote_log(h.image, request, **h.ctx())
    assert decision.records == [] and decision.reply.error == E.STALE_BROKER_EPOCH
    assert decision.reply.error_message and not decision.reply.items
    request.broker_id = 17  # never registered
    assert decide_alter_remote_log(h.image, request, **h.ctx()).reply.error == E.STALE_BROKER_EPOCH


def test_an_unknown_partition(h: Harness) -> None:
    topic = h.image.topics["t"]
    leader = topic.partitions[0].leader
    Item = controller_pb2.AlterRemoteLogRequest.Item
    request = controller_pb2.AlterRemoteLogRequest(
        broker_id=leader, broker_epoch=h.image.brokers[leader].broker_epoch,
        items=[Item(topic_id=topic.topic_id, partition_id=2), Item(topic_id="no-such-id", partition_id=0),
               Item(topic_id=topic.topic_id, partition_id=-1)],
    )
    reply = decide_alter_remote_log(h.image, request, **h.ctx()).reply
    assert [i.error for i in reply.items] == [E.UNKNOWN_TOPIC_OR_PARTITION] * 3


def test_remote_storage_must_be_enabled(h: Harness) -> None:
    refused(h, E.INVALID_CONFIG, name="plain", segments=[(0, 100)])
    # The cluster-wide default counts too (the controller reads the topic and cluster-default levels).
    cluster = metadata_pb2.CONFIG_RESOURCE_BROKER
    reply = h.commit(_alter_configs(h, cluster, "", REMOTE_STORAGE_ENABLE, "true"))
    assert [r.error for r in reply.results] == [E.NONE], reply
    assert only(h.alter_remote_log("plain", 0, segments=[(0, 100)])).error == E.NONE
    # A topic's own false wins over the default. Set at creation: once true, the key never turns off
    # (topic_config_rules.py, rule 1), so "t" cannot be the example.
    h.create_topic("own-false", 1, 1, {REMOTE_STORAGE_ENABLE: "false"})
    refused(h, E.INVALID_CONFIG, name="own-false", segments=[(0, 100)])


def _alter_configs(h: Harness, kind: int, name: str, key: str, value: str):
    from kanal.metadata import decide_alter_configs

    return decide_alter_configs(
        h.image,
        admin_pb2.AlterConfigsRequest(changes=[admin_pb2.AlterConfigsRequest.Change(
            resource=admin_pb2.ConfigResource(type=kind, name=name),
            ops=[admin_pb2.AlterConfigOp(key=key, value=value)])]),
        **h.ctx(),
    )


# -- apply -----------------------------------------------------------------------------------------------


def test_remove_topic_drops_its_remote_logs(h: Harness) -> None:
    h.alter_remote_log("t", 0, segments=[(0, 100)])
    h.alter_remote_log("t", 1, segments=[(0, 50)])
    topic_id = h.image.topics["t"].topic_id
    assert len(h.image.remote_logs) == 2
    reply = h.commit(decide_delete_topics(h.image, admin_pb2.DeleteTopicsRequest(names=["t"]), **h.ctx()))
    assert reply.results[0].error == E.NONE
    assert h.image.remote_logs == {}
    check_image(h.image)
    # A topic recreated under the name starts with no remote log (a new topic id).
    h.create_topic("t", 1, 1, {REMOTE_STORAGE_ENABLE: "true"})
    assert h.image.topics["t"].topic_id != topic_id and remote(h) is None


def _apply(h: Harness, **body) -> None:
    apply(h.image, metadata_pb2.MetadataRecord(time_ms=1, principal="t", request_id="r", **body))


def test_apply_refuses_records_that_break_the_rules(h: Harness) -> None:
    """What a decision never writes, apply refuses (a damaged log or a bug), leaving the image as it was."""
    topic_id = h.image.topics["t"].topic_id
    h.alter_remote_log("t", 0, segments=[(0, 100)])
    before = h.image.copy()
    broken = {
        "gap": {"remote_log_segment": segment(topic_id, 0, 120, 200)},
        "overlap": {"remote_log_segment": segment(topic_id, 0, 50, 200)},
        "malformed": {"remote_log_segment": segment(topic_id, 0, 100, 200, epochs=[])},
        "unknown partition": {"remote_log_segment": segment(topic_id, 5, 0, 100)},
        "start back": {"remote_log_start": metadata_pb2.RemoteLogStartRecord(
            topic_id=topic_id, partition_id=0, log_start_offset=0)},
        "start past the end": {"remote_log_start": metadata_pb2.RemoteLogStartRecord(
            topic_id=topic_id, partition_id=0, log_start_offset=101)},
        "start of an unknown partition": {"remote_log_start": metadata_pb2.RemoteLogStartRecord(
            topic_id="nope", partition_id=0, log_start_offset=5)},
    }
    for what, body in broken.items():
        with pytest.raises(MetadataInvariantError):
            _apply(h, **body)
        assert h.image == before, what


def test_a_start_record_may_set_the_start_of_an_empty_remote_log(h: Harness) -> None:
    """How a snapshot restores a remote log whose segments are all gone: its start alone."""
    topic_id = h.image.topics["t"].topic_id
    _apply(h, remote_log_start=metadata_pb2.RemoteLogStartRecord(
        topic_id=topic_id, partition_id=1, log_start_offset=700, reason="snapshot"))
    assert bounds(remote(h, "t", 1)) == (700, 700, [])
