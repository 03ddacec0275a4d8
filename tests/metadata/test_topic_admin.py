"""CreateTopics, DeleteTopics, CreatePartitions decisions."""

from __future__ import annotations

import pytest

from kanal.metadata import (
    TOPIC_PARTITIONS_MAX,
    decide_create_partitions,
    decide_create_topics,
    decide_delete_topics,
)
from kanal.v1 import admin_pb2
from kanal.v1.error import ErrorCode


def creatable(name="t", partitions=3, rf=2, configs=None) -> admin_pb2.CreatableTopic:
    return admin_pb2.CreatableTopic(
        name=name,
        partitions=partitions,
        replication_factor=rf,
        configs=[admin_pb2.ConfigEntry(key=k, value=v) for k, v in (configs or [])],
    )


def create(h, *topics, validate_only=False):
    before = h.image.copy()
    decision = decide_create_topics(
        h.image,
        admin_pb2.CreateTopicsRequest(topics=topics, validate_only=validate_only),
        rng=h.rng,
        **h.ctx(),
    )
    assert h.image == before  # deciding never changes the image
    return decision


def test_create_writes_topic_configs_and_partitions_stamped(cluster3) -> None:
    h = cluster3
    h.now_ms = 4242
    decision = create(
        h, creatable("orders", 4, 3, [("retention.ms", "60000"), ("cleanup.policy", "compact")])
    )
    kinds = [r.WhichOneof("record") for r in decision.records]
    assert kinds == ["topic", "config", "config"] + ["partition"] * 4
    assert {(r.time_ms, r.principal) for r in decision.records} == {(4242, "test-admin")}
    assert len({r.request_id for r in decision.records}) == 1
    result = decision.reply.results[0]
    assert (result.name, result.error) == ("orders", ErrorCode.NONE)
    assert result.topic_id == decision.records[0].topic.topic_id
    h.commit(decision)
    topic = h.image.topics["orders"]
    assert topic.topic_id == result.topic_id
    assert topic.configs == {"retention.ms": "60000", "cleanup.policy": "compact"}
    for p in topic.partitions:
        assert p.isr == p.replicas and p.leader == p.replicas[0]
        assert (p.leader_epoch, p.partition_epoch) == (0, 0)


def _only_error(decision, code, fragment: str) -> None:
    assert decision.records == []
    result = decision.reply.results[-1]
    assert result.error == code, result.error_message
    assert fragment in result.error_message


@pytest.mark.parametrize(
    ("topic", "code", "fragment"),
    [
        (creatable(partitions=0), ErrorCode.INVALID_PARTITIONS, "outside 1..10000"),
        (creatable(partitions=-3), ErrorCode.INVALID_PARTITIONS, "-3"),
        (creatable(partitions=TOPIC_PARTITIONS_MAX + 1), ErrorCode.INVALID_PARTITIONS, "10001"),
        (creatable(rf=0), ErrorCode.INVALID_REPLICATION_FACTOR, "outside 1..3"),
        (creatable(rf=4), ErrorCode.INVALID_REPLICATION_FACTOR, "live brokers"),
        (creatable(configs=[("retention.mss", "1")]), ErrorCode.INVALID_CONFIG, "unknown topic config key"),
        (
            creatable(configs=[("retention.ms", "forever")]),
            ErrorCode.INVALID_CONFIG,
            "bad value for retention.ms",
        ),
        (creatable(configs=[("min.insync.replicas", "0")]), ErrorCode.INVALID_CONFIG, "outside"),
        (
            creatable(configs=[("retention.ms", "-5")]),  # issue 17: was read as "keep forever"
            ErrorCode.INVALID_CONFIG,
            "bad value for retention.ms: -5 is outside -1 (no limit) or [0, ",
        ),
        (creatable(configs=[("retention.bytes", "-2")]), ErrorCode.INVALID_CONFIG, "retention.bytes: -2"),
        (creatable(configs=[("flush.messages", "0")]), ErrorCode.INVALID_CONFIG, "flush.messages: 0"),
        (
            creatable(configs=[("retention.ms", "1"), ("retention.ms", "2")]),
            ErrorCode.INVALID_CONFIG,
            "more than once",
        ),
        (creatable(name=""), ErrorCode.INVALID_TOPIC, "empty"),
        (creatable(name="."), ErrorCode.INVALID_TOPIC, "not allowed"),
        (creatable(name=".."), ErrorCode.INVALID_TOPIC, "not allowed"),
        (creatable(name="a/b"), ErrorCode.INVALID_TOPIC, "characters"),
        (creatable(name="ünïcode"), ErrorCode.INVALID_TOPIC, "characters"),
        (creatable(name="x" * 250), ErrorCode.INVALID_TOPIC, "249"),
        (creatable(name="__cluster_metadata"), ErrorCode.INVALID_TOPIC, "reserved"),
    ],
)
def test_bad_topics_get_a_clear_error_and_no_records(cluster3, topic, code, fragment) -> None:
    _only_error(create(cluster3, topic), code, fragment)


def test_longest_legal_name_is_accepted(cluster3) -> None:
    decision = create(cluster3, creatable(name="x" * 249))
    assert decision.reply.results[0].error == ErrorCode.NONE


def test_existing_duplicate_and_colliding_names(cluster3) -> None:
    h = cluster3
    h.create_topic("orders.v1", 1, 1)
    _only_error(create(h, creatable("orders.v1")), ErrorCode.TOPIC_ALREADY_EXISTS, "already exists")
    _only_error(create(h, creatable("orders_v1")), ErrorCode.INVALID_TOPIC, "collides with 'orders.v1'")
    decision = create(h, creatable("a"), creatable("a"), creatable("b.c"), creatable("b_c"))
    errors = [(r.name, r.error) for r in decision.reply.results]
    assert errors == [
        ("a", ErrorCode.NONE),
        ("a", ErrorCode.TOPIC_ALREADY_EXISTS),
        ("b.c", ErrorCode.NONE),
        ("b_c", ErrorCode.INVALID_TOPIC),
    ]
    assert "more than once" in decision.reply.results[1].error_message
    assert [r.topic.name for r in decision.records if r.WhichOneof("record") == "topic"] == ["a", "b.c"]


def test_fenced_brokers_do_not_count_for_the_replication_factor(cluster3) -> None:
    h = cluster3
    h.fence(2)
    _only_error(create(h, creatable(rf=3)), ErrorCode.INVALID_REPLICATION_FACTOR, "outside 1..2")
    decision = create(h, creatable(rf=2, partitions=6))
    assert all(
        2 not in r.partition.replicas for r in decision.records if r.WhichOneof("record") == "partition"
    )


def test_no_brokers_means_no_topics(harness) -> None:
    _only_error(create(harness, creatable(rf=1)), ErrorCode.INVALID_REPLICATION_FACTOR, "outside 1..0")


def test_each_topic_succeeds_or_fails_alone(cluster3) -> None:
    decision = create(cluster3, creatable("good", 2, 1), creatable("bad", 0, 1), creatable("good2", 1, 3))
    assert [r.error for r in decision.reply.results] == [
        ErrorCode.NONE,
        ErrorCode.INVALID_PARTITIONS,
        ErrorCode.NONE,
    ]
    cluster3.commit(decision)
    assert sorted(cluster3.image.topics) == ["good", "good2"]
    ids = {t.topic_id for t in cluster3.image.topics.values()}
    assert len(ids) == 2 and "" not in ids


def test_validate_only_checks_everything_and_writes_nothing(cluster3) -> None:
    decision = create(cluster3, creatable("ok"), creatable("bad", rf=9), validate_only=True)
    assert decision.records == []
    assert [r.error for r in decision.reply.results] == [ErrorCode.NONE, ErrorCode.INVALID_REPLICATION_FACTOR]
    assert decision.reply.results[0].topic_id == ""


def test_delete_topics(cluster3) -> None:
    h = cluster3
    h.create_topic("a", 2, 2)
    h.create_topic("__consumer_offsets", 3, 3)
    topic_id = h.image.topics["a"].topic_id
    decision = decide_delete_topics(
        h.image, admin_pb2.DeleteTopicsRequest(names=["a", "nope", "__consumer_offsets", "a"]), **h.ctx()
    )
    assert [(r.name, r.error) for r in decision.reply.results] == [
        ("a", ErrorCode.NONE),
        ("nope", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
        ("__consumer_offsets", ErrorCode.POLICY_VIOLATION),
        ("a", ErrorCode.INVALID_REQUEST),
    ]
    assert [r.remove_topic.topic_id for r in decision.records] == [topic_id]
    h.commit(decision)
    assert "a" not in h.image.topics and topic_id not in h.image.topics_by_id
    # A recreated topic of the same name gets a new id.
    assert h.create_topic("a", 1, 1).topic_id != topic_id


def test_create_partitions_grows_only(cluster3) -> None:
    h = cluster3
    h.create_topic("t", 4, 3)
    h.create_topic("u", 2, 1)
    h.fence(2)
    targets = [("t", 4), ("nope", 9), ("t", 8), ("u", 1), ("u", TOPIC_PARTITIONS_MAX + 1), ("u", 5)]
    decision = decide_create_partitions(
        h.image,
        admin_pb2.CreatePartitionsRequest(
            targets=[admin_pb2.CreatePartitionsRequest.Target(name=n, count=c) for n, c in targets]
        ),
        rng=h.rng,
        **h.ctx(),
    )
    assert [r.error for r in decision.reply.results] == [
        ErrorCode.INVALID_PARTITIONS,  # 4 is not larger than 4
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode.INVALID_REQUEST,  # "t" named twice
        ErrorCode.INVALID_PARTITIONS,  # shrink
        ErrorCode.INVALID_REQUEST,  # "u" named twice
        ErrorCode.INVALID_REQUEST,
    ]
    assert decision.records == []
    decision = decide_create_partitions(
        h.image,
        admin_pb2.CreatePartitionsRequest(
            targets=[
                admin_pb2.CreatePartitionsRequest.Target(name="t", count=8),
                admin_pb2.CreatePartitionsRequest.Target(name="u", count=5),
            ]
        ),
        rng=h.rng,
        **h.ctx(),
    )
    assert [r.error for r in decision.reply.results] == [ErrorCode.INVALID_REPLICATION_FACTOR, ErrorCode.NONE]
    assert "outside 1..2" in decision.reply.results[0].error_message
    h.commit(decision)
    assert len(h.image.topics["t"].partitions) == 4
    u = h.image.topics["u"].partitions
    assert [p.partition_id for p in u] == [0, 1, 2, 3, 4]
    assert all(len(p.replicas) == 1 and p.replicas[0] in (0, 1) for p in u[2:])


def test_create_partitions_validate_only(cluster3) -> None:
    h = cluster3
    h.create_topic("t", 1, 1)
    decision = decide_create_partitions(
        h.image,
        admin_pb2.CreatePartitionsRequest(
            targets=[admin_pb2.CreatePartitionsRequest.Target(name="t", count=3)], validate_only=True
        ),
        rng=h.rng,
        **h.ctx(),
    )
    assert decision.records == [] and decision.reply.results[0].error == ErrorCode.NONE


def test_a_decision_needs_a_request_id_and_a_sane_clock(cluster3) -> None:
    with pytest.raises(ValueError, match="request id"):
        decide_delete_topics(
            cluster3.image, admin_pb2.DeleteTopicsRequest(), now_ms=1, principal="a", request_id=""
        )
    with pytest.raises(ValueError, match="now_ms"):
        decide_delete_topics(
            cluster3.image, admin_pb2.DeleteTopicsRequest(), now_ms=-1, principal="a", request_id="r"
        )


def test_minus_one_is_no_limit_and_is_accepted(cluster3) -> None:
    h = cluster3
    decision = create(h, creatable(configs=[("retention.ms", "-1"), ("retention.bytes", "-1")]))
    assert decision.reply.results[0].error == ErrorCode.NONE
    h.commit(decision)
    assert h.image.topics["t"].configs == {"retention.ms": "-1", "retention.bytes": "-1"}


# ---- tiered storage configs and their rules (topic_config_rules.py) ------------------------------------

ON = ("remote.storage.enable", "true")


def test_a_tiered_topic_is_created_with_all_three_keys(cluster3) -> None:
    h = cluster3
    configs = [ON, ("retention.ms", "86400000"), ("local.retention.ms", "3600000"),
               ("retention.bytes", "-1"), ("local.retention.bytes", "1048576")]
    decision = create(h, creatable(configs=configs))
    assert decision.reply.results[0].error == ErrorCode.NONE, decision.reply.results[0].error_message
    h.commit(decision)
    assert h.image.topics["t"].configs == dict(configs)


@pytest.mark.parametrize(
    ("configs", "fragment"),
    [
        ([ON, ("cleanup.policy", "compact")],
         "topic 't': remote.storage.enable=true with cleanup.policy=compact"),
        ([("cleanup.policy", "delete,compact"), ON],
         "cleanup.policy=compact,delete: a compacted topic cannot"),
        ([ON, ("retention.ms", "1000"), ("local.retention.ms", "1001")],
         "topic 't': local.retention.ms=1001 is above retention.ms=1000"),
        ([ON, ("retention.ms", "1000"), ("local.retention.ms", "-1")],
         "local.retention.ms=-1 (no limit) with retention.ms=1000"),
        ([ON, ("retention.bytes", "1000"), ("local.retention.bytes", "2000")],
         "topic 't': local.retention.bytes=2000 is above retention.bytes=1000"),
        ([ON, ("retention.bytes", "1000"), ("local.retention.bytes", "-1")],
         "local.retention.bytes=-1 (no limit) with retention.bytes=1000"),
        ([ON, ("local.retention.ms", "604800001")], "above retention.ms=604800000"),  # the default, 7 days
        ([("local.retention.ms", "-3")], "bad value for local.retention.ms: -3 is outside -2"),
    ],
)
def test_tiered_configs_that_break_a_rule_create_nothing(cluster3, configs, fragment) -> None:
    _only_error(create(cluster3, creatable(configs=configs)), ErrorCode.INVALID_CONFIG, fragment)
    _only_error(create(cluster3, creatable(configs=configs), validate_only=True), ErrorCode.INVALID_CONFIG,
                fragment)


@pytest.mark.parametrize("name", ["__consumer_offsets", "__transaction_state"])
def test_an_internal_topic_is_never_created_tiered(cluster3, name) -> None:
    _only_error(create(cluster3, creatable(name=name, configs=[ON])), ErrorCode.INVALID_CONFIG,
                f"topic {name!r} is internal: remote.storage.enable=true is not allowed")


def test_rules_see_the_cluster_and_broker_defaults(cluster3) -> None:
    h = cluster3
    h.image.broker_configs[""] = {"remote.storage.enable": "true"}
    h.image.broker_configs["1"] = {"retention.ms": "1000"}
    _only_error(create(h, creatable(configs=[("cleanup.policy", "compact")])), ErrorCode.INVALID_CONFIG,
                "topic 't': remote.storage.enable=true with cleanup.policy=compact")
    _only_error(create(h, creatable(configs=[("local.retention.ms", "5000")])), ErrorCode.INVALID_CONFIG,
                "local.retention.ms=5000 is above retention.ms=1000: the local part of a tiered log cannot "
                "outlast the whole log (on broker 1, with its defaults)")
    # A compacted topic that says false itself is fine under a default of true.
    pinned_off = [("cleanup.policy", "compact"), ("remote.storage.enable", "false")]
    decision = create(h, creatable(configs=pinned_off))
    assert decision.reply.results[0].error == ErrorCode.NONE


def test_an_internal_topic_created_under_a_tiering_default_is_pinned_off(cluster3) -> None:
    """The coordinators create their topics with cleanup.policy=compact only; a default of
    remote.storage.enable=true must not keep them from it."""
    h = cluster3
    decision = create(h, creatable(name="__consumer_offsets", configs=[("cleanup.policy", "compact")]))
    h.commit(decision)
    assert h.image.topics["__consumer_offsets"].configs == {"cleanup.policy": "compact"}  # nothing to pin
    h.image.broker_configs["2"] = {"remote.storage.enable": "true"}
    decision = create(h, creatable(name="__transaction_state", configs=[("cleanup.policy", "compact")]))
    assert decision.reply.results[0].error == ErrorCode.NONE, decision.reply.results[0].error_message
    h.commit(decision)
    assert h.image.topics["__transaction_state"].configs == {
        "cleanup.policy": "compact", "remote.storage.enable": "false"
    }
