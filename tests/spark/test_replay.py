"""The pure replay core: events say what each record changed, intervals measure fencing and trouble,
a deposed controller's batch is skipped as apply_batch skips it, and damage stops the replay visibly."""

from __future__ import annotations

from kanal.metadata import MetadataImage, apply_batch
from kanal.spark.image_diff import diff_images
from kanal.spark.replay import ReplayRow, replay
from kanal.v1 import metadata_pb2 as m

T0 = 1_700_000_000_000


def rec(t: int, principal: str = "controller", **body) -> m.MetadataRecord:
    return m.MetadataRecord(time_ms=T0 + t, principal=principal, request_id=f"r{t}", **body)


def rows_of(batches: list[tuple[int, list[m.MetadataRecord]]]) -> list[ReplayRow]:
    out, offset = [], 0
    for epoch, records in batches:
        base = offset
        for r in records:
            out.append(ReplayRow(offset, base, epoch, r.time_ms, r.SerializeToString()))
            offset += 1
    return out


def history_batches():
    reg = lambda b, t: rec(t, f"broker-{b}", register_broker=m.RegisterBrokerRecord(
        broker_id=b, incarnation_id=f"i{b}", broker_epoch=t, endpoint=f"h:{b}", fenced=True))
    unfence = lambda b, t, epoch: rec(
        t,
        f"broker-{b}",
        broker_registration_change=m.BrokerRegistrationChangeRecord(
            broker_id=b, broker_epoch=epoch, fenced=False, reason="caught up"
        ),
    )
    return [
        (1, [reg(0, 0)]),
        (1, [reg(1, 1)]),
        (1, [unfence(0, 2, 0)]),
        (1, [unfence(1, 3, 1)]),
        (
            1,
            [
                rec(4, "alice", topic=m.TopicRecord(name="t", topic_id="tid")),
                rec(
                    4,
                    "alice",
                    partition=m.PartitionRecord(
                        topic_id="tid", partition_id=0, replicas=[0, 1], isr=[0, 1], leader=0, leader_epoch=0
                    ),
                ),
            ],
        ),
        (
            2,
            [
                rec(
                    1000,
                    broker_registration_change=m.BrokerRegistrationChangeRecord(
                        broker_id=0, broker_epoch=0, fenced=True, reason="session timeout"
                    ),
                ),
                rec(
                    1000,
                    partition_change=m.PartitionChangeRecord(
                        topic_id="tid",
                        partition_id=0,
                        leader=1,
                        isr=m.ReplicaList(broker_ids=[1]),
                        cause=m.CAUSE_LEADER_FENCED,
                        reason="broker 0 fenced",
                    ),
                ),
            ],
        ),
        (1, [rec(1500, "bob", no_op=m.NoOpRecord())]),  # a deposed controller's batch
        (
            2,
            [
                rec(
                    4000,
                    "broker-0",
                    broker_registration_change=m.BrokerRegistrationChangeRecord(
                        broker_id=0, broker_epoch=0, fenced=False, reason="caught up"
                    ),
                )
            ],
        ),
        (
            2,
            [
                rec(
                    5000,
                    "broker-1",
                    partition_change=m.PartitionChangeRecord(
                        topic_id="tid",
                        partition_id=0,
                        isr=m.ReplicaList(broker_ids=[1, 0]),
                        cause=m.CAUSE_ISR_EXPAND,
                        reason="caught up",
                    ),
                )
            ],
        ),
        (2, [rec(6000, "alice", remove_topic=m.RemoveTopicRecord(topic_id="tid"))]),
    ]


def test_events_intervals_and_image():
    batches = history_batches()
    h = replay(rows_of(batches))
    assert h.stopped is None and h.batches_fenced == 1
    kinds = [(e.event, e.principal) for e in h.events]
    assert kinds == [("broker_registered", "broker-0"), ("broker_registered", "broker-1"),
                     ("broker_unfenced", "broker-0"), ("broker_unfenced", "broker-1"),
                     ("topic_created", "alice"), ("partition_created", "alice"),
                     ("broker_fenced", "controller"), ("leader_change", "controller"),
                     ("fenced_batch_skipped", "bob"), ("broker_unfenced", "broker-0"),
                     ("isr_expand", "broker-1"), ("topic_deleted", "alice")]
    move = h.events[7]
    assert (move.leader_before, move.leader_after, move.leader_epoch, move.isr_change, move.cause) == (
        0, 1, 1, "shrink", "CAUSE_LEADER_FENCED")
    assert h.events[9].duration_ms == 3000  # fenced at +1000, unfenced at +4000
    trouble = [(i.kind, i.duration_ms, i.end_reason, i.open) for i in h.intervals if i.kind != "fenced"]
    assert trouble == [("under_replicated", 4000, "caught up", False)]
    # The same batches through apply_batch directly: the replay's image is exactly that image.
    image, offset = MetadataImage(), 0
    for epoch, records in batches:
        apply_batch(image, m.MetadataBatch(controller_epoch=epoch, records=records), offset)
        offset += len(records)
    assert diff_images(h.image, image, "replay", "direct") == []


def test_damage_stops_the_replay_and_says_where():
    rows = rows_of(history_batches())
    damaged = [
        *rows[:4],
        ReplayRow(4, None, None, None, None, "seg.log: byte 400, offset 4: entry CRC does not match"),
    ]
    h = replay(damaged)
    assert h.stopped is not None and "offset 4" in h.stopped
    assert h.events[-1].event == "log_damage" and h.image.next_offset == 4


def test_images_that_differ_are_listed():
    a, b = MetadataImage(), MetadataImage()
    apply_batch(a, m.MetadataBatch(controller_epoch=1, records=history_batches()[0][1]), 0)
    lines = diff_images(a, b, "replay", "controller")
    assert any(line.startswith("only in replay:") and "register_broker" in line for line in lines)


def test_acl_changes_are_events_with_who_made_them():
    entry = m.AccessControlEntry(resource_type=m.ACL_RESOURCE_TOPIC, resource_name="orders",
                                 pattern_type=m.ACL_PATTERN_PREFIXED, principal="User:etl", host="*",
                                 operation=m.ACL_OPERATION_WRITE, permission=m.ACL_PERMISSION_ALLOW)
    h = replay(
        rows_of(
            [
                (1, [rec(1, "User:admin", access_control_entry=m.AccessControlEntryRecord(entry=entry))]),
                (
                    1,
                    [
                        rec(
                            2,
                            "User:auditor",
                            remove_access_control_entry=m.RemoveAccessControlEntryRecord(entry=entry),
                        )
                    ],
                ),
            ]
        )
    )
    assert h.stopped is None and h.image.acls == {}
    assert [(e.event, e.principal, e.resource_type, e.resource, e.key, e.value_before, e.value_after)
            for e in h.events] == [
        ("acl_added", "User:admin", "topic", "orders", "User:etl@*", None, "ALLOW WRITE (PREFIXED)"),
        ("acl_removed", "User:auditor", "topic", "orders", "User:etl@*", "ALLOW WRITE (PREFIXED)", None)]


def test_a_cause_this_build_does_not_know_is_named_by_its_number():
    """proto3 enums are open: a newer controller's cause must not stop the replay."""
    batches = history_batches()
    change = batches[5][1][1].partition_change
    change.cause = 99  # not a PartitionChangeCause this build knows
    change.reason = ""
    h = replay(rows_of(batches))
    assert h.stopped is None
    move = next(e for e in h.events if e.event == "leader_change")
    assert move.cause == "99"
    # With no reason given, the cause names why the partition's trouble began.
    [trouble] = [i for i in h.intervals if i.kind == "under_replicated"]
    assert trouble.start_reason == "99"
