"""AlterConfigs and DescribeConfigs decisions."""

from __future__ import annotations

import pytest

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


# ---- rules between keys: tiered storage (topic_config_rules.py) ----------------------------------------

ON = (SET, "remote.storage.enable", "true")


def refused_alone(h, change_, fragment: str) -> None:
    """`change_` fails with INVALID_CONFIG naming `fragment`, writes nothing, and leaves the image as it
    was (validate_only says the same)."""
    before = h.image.copy()
    for validate_only in (False, True):
        decision = alter(h, change_, validate_only=validate_only)
        result = decision.reply.results[0]
        assert result.error == ErrorCode.INVALID_CONFIG, result.error_message
        assert fragment in result.error_message, result.error_message
        assert decision.records == []
        h.commit(decision)
    assert h.image == before


def ok(h, *changes) -> None:
    decision = alter(h, *changes)
    assert [r.error for r in decision.reply.results] == [ErrorCode.NONE] * len(changes), [
        r.error_message for r in decision.reply.results
    ]
    h.commit(decision)


def test_remote_storage_cannot_be_turned_off_by_its_key_or_a_delete(cluster3) -> None:
    h = cluster3
    h.create_topic("t", 1, 1, {"remote.storage.enable": "true"})
    off = "topic 't': remote.storage.enable cannot be turned off"
    refused_alone(h, change(TOPIC, "t", (SET, "remote.storage.enable", "false")), off)
    refused_alone(h, change(TOPIC, "t", (DELETE, "remote.storage.enable", "")), off)
    # Other keys still change; setting it true again is no change.
    ok(h, change(TOPIC, "t", (SET, "segment.ms", "5"), ON))
    assert h.image.topics["t"].configs == {"remote.storage.enable": "true", "segment.ms": "5"}


def test_remote_storage_cannot_be_turned_off_by_a_changed_default(cluster3) -> None:
    h = cluster3
    ok(h, change(BROKER, "", ON))
    h.create_topic("t", 1, 1)  # tiered by the cluster default
    h.create_topic("own", 1, 1, {"remote.storage.enable": "true"})
    off = "changing the cluster default: topic 't': remote.storage.enable cannot be turned off"
    refused_alone(h, change(BROKER, "", (DELETE, "remote.storage.enable", "")), off)
    refused_alone(h, change(BROKER, "", (SET, "remote.storage.enable", "false")), off)
    refused_alone(
        h,
        change(BROKER, "2", (SET, "remote.storage.enable", "false")),
        "remote.storage.enable is set per topic or as the cluster default, not on broker 2",
    )
    # Its own DELETE is no change while the default is true; once it says true itself, the default may go.
    ok(h, change(TOPIC, "own", (DELETE, "remote.storage.enable", "")))
    ok(
        h,
        change(TOPIC, "t", ON),
        change(TOPIC, "own", ON),
        change(BROKER, "", (DELETE, "remote.storage.enable", "")),
    )
    assert h.image.broker_configs.get("", {}) == {}


def test_remote_storage_is_refused_on_compacted_topics_both_ways(cluster3) -> None:
    h = cluster3
    h.create_topic("c", 1, 1, {"cleanup.policy": "compact"})
    h.create_topic("cd", 1, 1, {"cleanup.policy": "compact,delete"})
    h.create_topic("r", 1, 1, {"remote.storage.enable": "true"})
    # Enabling tiering on a compacted topic ...
    refused_alone(
        h, change(TOPIC, "c", ON), "topic 'c': remote.storage.enable=true with cleanup.policy=compact"
    )
    refused_alone(
        h, change(TOPIC, "cd", ON), "cleanup.policy=compact,delete: a compacted topic cannot be tiered"
    )
    # ... and compacting a tiered one.
    for policy in ("compact", "delete,compact"):
        refused_alone(
            h, change(TOPIC, "r", (SET, "cleanup.policy", policy)), "a compacted topic cannot be tiered"
        )
    # Both in one change, and by defaults that reach compacted or tiered topics.
    h.create_topic("d", 1, 1)
    refused_alone(h, change(TOPIC, "d", ON, (SET, "cleanup.policy", "compact")), "topic 'd'")
    refused_alone(h, change(BROKER, "", ON), "changing the cluster default: topic 'c'")
    refused_alone(h, change(BROKER, "", (SET, "cleanup.policy", "compact")), "topic 'r'")
    # Turning compaction off and tiering on together is fine.
    ok(h, change(TOPIC, "c", (SET, "cleanup.policy", "delete"), ON))


def test_two_changes_that_pass_alone_cannot_break_a_rule_together(cluster3) -> None:
    h = cluster3
    h.create_topic("d", 1, 1)
    decision = alter(
        h, change(TOPIC, "d", ON), change(BROKER, "", (SET, "cleanup.policy", "compact"))
    )
    assert [r.error for r in decision.reply.results] == [ErrorCode.NONE, ErrorCode.INVALID_CONFIG]
    assert "changing the cluster default: topic 'd'" in decision.reply.results[1].error_message
    assert [r.config.resource_name for r in decision.records] == ["d"]  # only the accepted change
    # The other order: the default goes first, and the topic then meets it.
    h.create_topic("e", 1, 1)
    decision = alter(
        h,
        change(BROKER, "1", (SET, "retention.ms", "1000")),
        change(TOPIC, "e", ON, (SET, "local.retention.ms", "5000")),
    )
    assert [r.error for r in decision.reply.results] == [ErrorCode.NONE, ErrorCode.INVALID_CONFIG]
    assert "on broker 1, with its defaults" in decision.reply.results[1].error_message


def test_remote_storage_is_refused_on_internal_topics(cluster3) -> None:
    h = cluster3
    h.create_topic("__consumer_offsets", 1, 1, {"cleanup.policy": "compact"})
    h.create_topic("__transaction_state", 1, 1)
    refused_alone(h, change(TOPIC, "__transaction_state", ON), "topic '__transaction_state' is internal")
    refused_alone(
        h,
        change(TOPIC, "__consumer_offsets", ON, (SET, "cleanup.policy", "delete")),
        "topic '__consumer_offsets' is internal",
    )
    # A default of true would reach them: refused until they say false themselves.
    refused_alone(h, change(BROKER, "", ON), "is internal")
    ok(
        h,
        change(TOPIC, "__consumer_offsets", (SET, "remote.storage.enable", "false")),
        change(TOPIC, "__transaction_state", (SET, "remote.storage.enable", "false")),
        change(BROKER, "", ON),
    )


@pytest.mark.parametrize(("local", "total"), [("local.retention.ms", "retention.ms"),
                                              ("local.retention.bytes", "retention.bytes")])
def test_local_retention_above_the_total_is_refused(cluster3, local, total) -> None:
    h = cluster3
    h.create_topic("t", 1, 1, {"remote.storage.enable": "true", total: "1000", local: "1000"})
    refused_alone(
        h, change(TOPIC, "t", (SET, local, "1001")), f"topic 't': {local}=1001 is above {total}=1000"
    )
    refused_alone(h, change(TOPIC, "t", (SET, local, "-1")), f"{local}=-1 (no limit) with {total}=1000")
    refused_alone(h, change(TOPIC, "t", (SET, total, "999")), f"{local}=1000 is above {total}=999")
    # Deleting the total goes to the default: 7 days for retention.ms, no limit for retention.bytes.
    ok(h, change(TOPIC, "t", (DELETE, total, "")))
    ok(h, change(TOPIC, "t", (SET, total, "500"), (SET, local, "-2")))  # -2: as the total
    # By a default: a topic without its own local value meets the broker's.
    h.create_topic("u", 1, 1, {"remote.storage.enable": "true", total: "1000"})
    refused_alone(
        h, change(BROKER, "", (SET, local, "2000")), f"topic 'u': {local}=2000 is above {total}=1000"
    )
    h.create_topic("v", 1, 1, {"remote.storage.enable": "true", local: "100"})
    refused_alone(
        h, change(BROKER, "0", (SET, total, "10")), f"topic 'v': {local}=100 is above {total}=10: "
    )
    # Untiered topics are not held to it (Kafka checks it only with remote storage on).
    h.create_topic("plain", 1, 1, {total: "1000"})
    ok(h, change(TOPIC, "plain", (SET, local, "5000")))
