"""AlterConfigs and DescribeConfigs decisions."""

from __future__ import annotations

from kanal.metadata import (
    decide_alter_configs,
    describe_configs,
    effective_topic_config,
    topic_config_texts,
)
from kanal.metadata.topic_config import TOPIC_CONFIG_KEYS
from kanal.v1 import admin_pb2, metadata_pb2
from kanal.v1.error import ErrorCode

TOPIC = metadata_pb2.CONFIG_RESOURCE_TOPIC
BROKER = metadata_pb2.CONFIG_RESOURCE_BROKER
SET = admin_pb2.AlterConfigOp.SET
DELETE = admin_pb2.AlterConfigOp.DELETE


def change(kind, name, *ops) -> admin_pb2.AlterConfigsRequest.Change:
    return admin_pb2.AlterConfigsRequest.Change(
        resource=admin_pb2.ConfigResource(type=kind, name=name),
        ops=[admin_pb2.AlterConfigOp(key=k, op=op, value=v) for op, k, v in ops],
    )


def alter(h, *changes, validate_only=False):
    before = h.image.copy()
    decision = decide_alter_configs(
        h.image, admin_pb2.AlterConfigsRequest(changes=changes, validate_only=validate_only), **h.ctx()
    )
    assert h.image == before
    return decision


def test_set_and_delete_topic_configs(cluster3) -> None:
    h = cluster3
    h.create_topic("t", 1, 1, {"retention.ms": "100", "segment.ms": "5"})
    decision = alter(
        h,
        change(
            TOPIC,
            "t",
            (SET, "retention.ms", "200"),
            (DELETE, "segment.ms", ""),
            (SET, "cleanup.policy", "compact"),
            (SET, "flush.ms", "7"),
            (DELETE, "flush.ms", ""),
            (DELETE, "delete.retention.ms", ""),
        ),
    )
    assert decision.reply.results[0].error == ErrorCode.NONE
    written = [
        (r.config.key, r.config.value if r.config.HasField("value") else None) for r in decision.records
    ]
    assert written == [("cleanup.policy", "compact"), ("retention.ms", "200"), ("segment.ms", None)]
    h.commit(decision)
    assert h.image.topics["t"].configs == {"retention.ms": "200", "cleanup.policy": "compact"}


def test_one_bad_op_fails_its_resource_and_only_it(cluster3) -> None:
    h = cluster3
    h.create_topic("t", 1, 1)
    h.create_topic("u", 1, 1)
    decision = alter(
        h,
        change(
            TOPIC,
            "t",
            (SET, "retention.ms", "1"),
            (SET, "retention.ms", "-1"),
            (SET, "max.message.bytes", "1"),
        ),
        change(TOPIC, "u", (SET, "retention.ms", "1"), (SET, "no.such.key", "1")),
        change(TOPIC, "u", (SET, "retention.ms", "1")),
        change(TOPIC, "nope", (SET, "retention.ms", "1")),
        change(BROKER, "01", (SET, "retention.ms", "1")),
        change(BROKER, "x", (SET, "retention.ms", "1")),
        change(BROKER, "1", (DELETE, "bogus", "")),
        change(metadata_pb2.CONFIG_RESOURCE_UNSPECIFIED, "t", (SET, "retention.ms", "1")),
    )
    assert [r.error for r in decision.reply.results] == [
        ErrorCode.INVALID_CONFIG,  # max.message.bytes below 64 fails all of "t"
        ErrorCode.INVALID_CONFIG,
        ErrorCode.INVALID_REQUEST,  # "u" named twice
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode.INVALID_REQUEST,
        ErrorCode.INVALID_REQUEST,
        ErrorCode.INVALID_CONFIG,
        ErrorCode.INVALID_REQUEST,
    ]
    assert "max.message.bytes" in decision.reply.results[0].error_message
    assert "no.such.key" in decision.reply.results[1].error_message
    assert decision.records == []


def test_out_of_range_values_are_refused_for_topics_and_brokers_and_change_nothing(cluster3) -> None:
    h = cluster3
    h.create_topic("t", 1, 1, {"retention.ms": "100"})
    before = h.image.copy()
    decision = alter(
        h,
        change(TOPIC, "t", (SET, "retention.ms", "-5")),  # issue 17: was read as "keep forever"
        change(BROKER, "", (SET, "retention.bytes", "-2")),
        change(BROKER, "1", (SET, "flush.ms", "-100")),
    )
    assert [r.error for r in decision.reply.results] == [ErrorCode.INVALID_CONFIG] * 3
    assert "retention.ms: -5 is outside -1 (no limit) or [0, " in decision.reply.results[0].error_message
    assert "retention.bytes: -2" in decision.reply.results[1].error_message
    assert decision.records == []
    h.commit(decision)
    assert h.image == before


def test_minus_one_means_no_limit(cluster3) -> None:
    h = cluster3
    h.create_topic("t", 1, 1, {"retention.ms": "100"})
    decision = alter(
        h, change(TOPIC, "t", (SET, "retention.ms", "-1")), change(BROKER, "", (SET, "flush.ms", "-1"))
    )
    assert [r.error for r in decision.reply.results] == [ErrorCode.NONE] * 2
    h.commit(decision)
    config = effective_topic_config(h.image, "t", 1)
    assert (config["retention.ms"], config["flush.ms"]) == (None, None)


def test_validate_only_writes_nothing(cluster3) -> None:
    cluster3.create_topic("t", 1, 1)
    decision = alter(cluster3, change(TOPIC, "t", (SET, "retention.ms", "1")), validate_only=True)
    assert decision.records == [] and decision.reply.results[0].error == ErrorCode.NONE


def test_broker_and_cluster_default_configs_layer_under_topic_configs(cluster3) -> None:
    h = cluster3
    h.create_topic("t", 1, 1, {"retention.ms": "111"})
    h.commit(
        alter(
            h,
            change(BROKER, "", (SET, "retention.ms", "222"), (SET, "segment.ms", "333")),
            change(BROKER, "1", (SET, "segment.ms", "444"), (SET, "flush.ms", "555")),
        )
    )
    assert h.image.broker_configs == {
        "": {"retention.ms": "222", "segment.ms": "333"},
        "1": {"segment.ms": "444", "flush.ms": "555"},
    }
    assert topic_config_texts(h.image, "t") == {"retention.ms": "111", "segment.ms": "333"}
    on_1 = effective_topic_config(h.image, "t", broker_id=1)
    assert (on_1["retention.ms"], on_1["segment.ms"], on_1["flush.ms"]) == (111, 444, 555)
    on_2 = effective_topic_config(h.image, "t", broker_id=2)
    assert (on_2["segment.ms"], on_2["flush.ms"]) == (333, None)


def test_describe_configs_lists_every_key_with_effective_values(cluster3) -> None:
    h = cluster3
    h.create_topic("t", 1, 1, {"retention.ms": "111"})
    h.commit(alter(h, change(BROKER, "", (SET, "segment.ms", "333"))))
    reply = describe_configs(
        h.image,
        admin_pb2.DescribeConfigsRequest(
            resources=[
                admin_pb2.ConfigResource(type=TOPIC, name="t"),
                admin_pb2.ConfigResource(type=TOPIC, name="nope"),
                admin_pb2.ConfigResource(type=BROKER, name="2"),
                admin_pb2.ConfigResource(type=BROKER, name="-1"),
            ]
        ),
    )
    topic, missing, broker, bad = reply.results
    entries = {e.key: (e.value, e.is_default) for e in topic.entries}
    assert set(entries) == set(TOPIC_CONFIG_KEYS)
    assert entries["retention.ms"] == ("111", False)
    assert entries["segment.ms"] == ("333", True)
    assert entries["cleanup.policy"] == ("delete", True)
    assert entries["retention.bytes"] == ("", True)  # no limit
    assert missing.error == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION and not missing.entries
    assert {e.key: e.value for e in broker.entries}["segment.ms"] == "333"
    assert bad.error == ErrorCode.INVALID_REQUEST


def test_switching_unclean_election_on_elects_offline_partitions(cluster3) -> None:
    h = cluster3
    h.create_topic("t", 3, 2)
    h.create_topic("u", 3, 2)
    # Shrink every ISR to its leader, then fence broker 0: the partitions it led go offline.
    from kanal.metadata import decide_alter_partition
    from kanal.v1 import controller_pb2

    for topic in (h.image.topics["t"], h.image.topics["u"]):
        for p in topic.partitions:
            leader = h.image.brokers[p.leader]
            h.commit(
                decide_alter_partition(
                    h.image,
                    controller_pb2.AlterPartitionRequest(
                        broker_id=p.leader,
                        broker_epoch=leader.broker_epoch,
                        items=[
                            controller_pb2.AlterPartitionRequest.Item(
                                topic_id=topic.topic_id,
                                partition_id=p.partition_id,
                                leader_epoch=p.leader_epoch,
                                partition_epoch=p.partition_epoch,
                                new_isr=[p.leader],
                            )
                        ],
                    ),
                    **h.ctx(),
                )
            )
    h.fence(0)
    offline = [(t.name, p.partition_id) for t, p in h.image.iter_partitions() if p.offline]
    assert offline and all(p.isr == (0,) for _, p in h.image.iter_partitions() if p.offline)
    decision = alter(h, change(TOPIC, "t", (SET, "unclean.leader.election.enable", "true")))
    changes = [r.partition_change for r in decision.records if r.WhichOneof("record") == "partition_change"]
    t_offline = {pid for name, pid in offline if name == "t"}
    assert {c.partition_id for c in changes} == t_offline
    assert all(c.cause == metadata_pb2.CAUSE_UNCLEAN_ELECTION for c in changes)
    h.commit(decision)
    for pid in t_offline:
        p = h.image.topics["t"].partitions[pid]
        assert p.leader in (1, 2) and p.isr == (p.leader,) and p.leader_epoch == 2
    assert any(p.offline for p in h.image.topics["u"].partitions)
    # The cluster default reaches "u", which has no value of its own.
    decision = alter(h, change(BROKER, "", (SET, "unclean.leader.election.enable", "true")))
    h.commit(decision)
    assert not any(p.offline for _, p in h.image.iter_partitions())
