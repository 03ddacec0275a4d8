"""The per-call rules (pure, over an Access): what the handler gets and how refused items come back into
the reply, for the broker's own calls and the admin calls brokers and controllers share; the peer host
and the forwarded principal."""

from __future__ import annotations

import pytest

from kanal.broker.request_authorization import BROKER_RULES
from kanal.metadata.access import Access
from kanal.metadata.acl import (
    ALLOW,
    CLUSTER,
    CLUSTER_RESOURCE_NAME,
    GROUP,
    LITERAL,
    TOPIC,
    TRANSACTIONAL_ID,
    AclEntry,
    build_acl_map,
)
from kanal.metadata.admin_authorization import admit_admin
from kanal.metadata.authorizer import AuthorizerConfig, is_server_principal
from kanal.security.call_identity import PRINCIPAL_METADATA_KEY, effective_principal, peer_host
from kanal.v1 import admin_pb2, broker_pb2, metadata_pb2
from kanal.v1.error import ErrorCode, KanalError

M = metadata_pb2
ALICE = "User:alice"


def access(*grants: tuple[int, int, str], principal: str = ALICE, supers=frozenset()) -> Access:
    entries = [AclEntry(rtype, name, LITERAL, ALICE, "*", op, ALLOW) for op, rtype, name in grants]
    return Access(
        principal, "127.0.0.1", build_acl_map(entries), AuthorizerConfig(enabled=True, super_users=supers)
    )


def produce_request(*topics: str) -> broker_pb2.ProduceRequest:
    request = broker_pb2.ProduceRequest(acks=1)
    for topic in topics:
        t = request.topics.add(topic=topic)
        t.partitions.add(partition=0, batches=[b"x"])
        t.partitions.add(partition=1, batches=[b"y"])
    return request


def test_produce_keeps_the_allowed_topics_and_answers_the_others():
    admission = BROKER_RULES["Produce"](
        produce_request("a", "b"), access((M.ACL_OPERATION_WRITE, TOPIC, "b"))
    )
    assert [t.topic for t in admission.request.topics] == ["b"]
    handler_reply = broker_pb2.ProduceResponse()
    handler_reply.topics.add(topic="b").partitions.add(partition=0, base_offset=7)
    reply = admission.reply(handler_reply)
    by_topic = {t.topic: [(p.partition, p.error) for p in t.partitions] for t in reply.topics}
    assert by_topic == {
        "b": [(0, ErrorCode.NONE)],
        "a": [(0, ErrorCode.TOPIC_AUTHORIZATION_FAILED), (1, ErrorCode.TOPIC_AUTHORIZATION_FAILED)],
    }


def test_nothing_left_means_no_handler_call():
    admission = BROKER_RULES["Produce"](produce_request("a"), access())
    assert admission.request is None
    assert admission.reply(None).topics[0].partitions[1].error == ErrorCode.TOPIC_AUTHORIZATION_FAILED


def test_write_implies_describe_in_metadata_and_named_topics_are_refused():
    reply = broker_pb2.MetadataResponse()
    for name in ("a", "b"):
        reply.topics.add(name=name, topic_id=f"id-{name}")
    grants = access((M.ACL_OPERATION_WRITE, TOPIC, "b"))
    listed = BROKER_RULES["Metadata"](broker_pb2.MetadataRequest(), grants).reply(reply)
    assert [t.name for t in listed.topics] == ["b"]
    named = broker_pb2.MetadataResponse()
    named.topics.add(name="a", error=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
    answered = BROKER_RULES["Metadata"](broker_pb2.MetadataRequest(topics=["a"]), grants).reply(named)
    assert [(t.name, t.error, t.topic_id) for t in answered.topics] == [
        ("a", ErrorCode.TOPIC_AUTHORIZATION_FAILED, "")
    ]


def test_replica_fetches_need_the_broker_itself():
    request = broker_pb2.FetchRequest(replica_id=2, replica_epoch=5)
    for who in (
        access(supers=frozenset({ALICE})),
        access(principal="User:broker-1", supers=frozenset({"User:broker-1"})),
    ):
        with pytest.raises(KanalError) as err:
            BROKER_RULES["Fetch"](request, who)
        assert err.value.code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    with pytest.raises(KanalError):  # the right principal still needs CLUSTER_ACTION
        BROKER_RULES["Fetch"](request, access(principal="User:broker-2"))
    broker = access(principal="User:broker-2", supers=frozenset({"User:broker-2"}))
    assert BROKER_RULES["Fetch"](request, broker).request is request


def test_offset_fetch_of_named_topics_never_widens_to_all():
    request = broker_pb2.OffsetFetchRequest(group_id="g")
    request.topics.add(topic="secret", partitions=[0, 1])
    admission = BROKER_RULES["OffsetFetch"](request, access((M.ACL_OPERATION_DESCRIBE, GROUP, "g")))
    assert admission.request is None  # not a request with no topics, which would mean "every topic"
    assert [(o.topic, o.partition, o.error) for o in admission.reply(None).offsets] == [
        ("secret", 0, ErrorCode.TOPIC_AUTHORIZATION_FAILED),
        ("secret", 1, ErrorCode.TOPIC_AUTHORIZATION_FAILED),
    ]
    denied = BROKER_RULES["OffsetFetch"](request, access())
    assert denied.reply(None).error == ErrorCode.GROUP_AUTHORIZATION_FAILED


def test_idempotent_producers_need_idempotent_write_or_some_topic_write():
    with pytest.raises(KanalError) as err:
        BROKER_RULES["InitProducerId"](
            broker_pb2.InitProducerIdRequest(), access((M.ACL_OPERATION_READ, TOPIC, "t"))
        )
    assert err.value.code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    for grant in (
        (M.ACL_OPERATION_WRITE, TOPIC, "t"),
        (M.ACL_OPERATION_IDEMPOTENT_WRITE, CLUSTER, CLUSTER_RESOURCE_NAME),
    ):
        BROKER_RULES["InitProducerId"](broker_pb2.InitProducerIdRequest(), access(grant))
    with pytest.raises(KanalError) as err:
        BROKER_RULES["InitProducerId"](broker_pb2.InitProducerIdRequest(transactional_id="tx"), access())
    assert err.value.code == ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED


def test_admin_results_keep_the_request_order():
    request = admin_pb2.CreateTopicsRequest(
        topics=[admin_pb2.CreatableTopic(name=n) for n in ("a", "b", "c")]
    )
    admission = admit_admin("CreateTopics", request, access((M.ACL_OPERATION_CREATE, TOPIC, "b")))
    assert [t.name for t in admission.request.topics] == ["b"]
    reply = admission.reply(
        admin_pb2.CreateTopicsResponse(results=[admin_pb2.CreateTopicResult(name="b", topic_id="x")])
    )
    assert [(r.name, r.error) for r in reply.results] == [
        ("a", ErrorCode.TOPIC_AUTHORIZATION_FAILED),
        ("b", ErrorCode.NONE),
        ("c", ErrorCode.TOPIC_AUTHORIZATION_FAILED),
    ]
    cluster_wide = access((M.ACL_OPERATION_CREATE, CLUSTER, CLUSTER_RESOURCE_NAME))
    assert admit_admin("CreateTopics", request, cluster_wide).request is request
    with pytest.raises(KanalError) as err:
        admit_admin("DeleteAcls", admin_pb2.DeleteAclsRequest(), access((M.ACL_OPERATION_DESCRIBE, CLUSTER,
                                                                          CLUSTER_RESOURCE_NAME)))
    assert err.value.code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    with pytest.raises(ValueError):
        admit_admin("NoSuchCall", request, cluster_wide)


def test_broker_configs_are_checked_on_the_cluster():
    request = admin_pb2.DescribeConfigsRequest(resources=[
        admin_pb2.ConfigResource(type=M.CONFIG_RESOURCE_BROKER, name="1"),
        admin_pb2.ConfigResource(type=M.CONFIG_RESOURCE_TOPIC, name="t")])
    admission = admit_admin("DescribeConfigs", request, access((M.ACL_OPERATION_ALTER_CONFIGS, TOPIC, "t")))
    reply = admission.reply(admin_pb2.DescribeConfigsResponse(results=[admin_pb2.ResourceConfigs(
        resource=request.resources[1])]))
    assert [r.error for r in reply.results] == [ErrorCode.CLUSTER_AUTHORIZATION_FAILED, ErrorCode.NONE]


def test_peer_host_and_the_forwarded_principal():
    assert peer_host("ipv4:127.0.0.1:5000") == "127.0.0.1"
    assert peer_host("ipv6:[::1]:5000") == "::1"
    assert peer_host("unix:/tmp/s") == ""
    header = ((PRINCIPAL_METADATA_KEY, ALICE),)
    assert effective_principal("User:broker-1", header, is_server_principal) == ALICE
    assert effective_principal("User:controller-2", header, is_server_principal) == ALICE
    assert effective_principal("User:mallory", header, is_server_principal) == "User:mallory"
    assert effective_principal("User:ANONYMOUS", header, is_server_principal) == "User:ANONYMOUS"
    assert effective_principal("User:broker-1", (), is_server_principal) == "User:broker-1"


def test_the_authorizer_flags_on_both_servers(tmp_path):
    from kanal.broker.broker_main import parse_args
    from kanal.raft.controller_config import ControllerConfigError, parse_controller_args

    broker = [
        "--id",
        "1",
        "--listen",
        "127.0.0.1:9092",
        "--controllers",
        "127.0.0.1:9091",
        "--data-dir",
        str(tmp_path),
    ]
    assert not parse_args(broker, environ={}).authorizer.enabled  # off by default: nothing changes
    config = parse_args(
        [*broker, "--authorizer", "on", "--super-users", "User:admin;User:broker-1"], environ={}
    )
    assert config.authorizer == AuthorizerConfig(True, frozenset({"User:admin", "User:broker-1"}), False)
    from_env = parse_args(
        broker, environ={"KANAL_AUTHORIZER": "on", "KANAL_ALLOW_EVERYONE_IF_NO_ACL_FOUND": "true"}
    )
    assert from_env.authorizer.enabled and from_env.authorizer.allow_everyone_if_no_acl_found
    with pytest.raises(KanalError) as err:
        parse_args([*broker, "--super-users", "admin"], environ={})
    assert err.value.code == ErrorCode.INVALID_CONFIG
    controller = ["--id", "1", "--listen", "127.0.0.1:6001", "--peers", "1=127.0.0.1:7001=127.0.0.1:6001",
                  "--data-dir", str(tmp_path)]
    assert parse_controller_args([*controller, "--authorizer", "on"], environ={}).authorizer.enabled
    with pytest.raises(ControllerConfigError, match="super-users"):
        parse_controller_args([*controller, "--super-users", "Group:x"], environ={})


def test_add_partitions_to_txn_leaves_out_the_groups_the_caller_may_not_read():
    """AddPartitionsToTxn's `group_ids` need READ on each group, as AddOffsetsToTxn does; a group without it
    is left out of the call (the reply does not name it, so the producer's AddOffsetsToTxn for it gets the
    refusal) and the partitions still join."""
    request = broker_pb2.AddPartitionsToTxnRequest(
        producer=broker_pb2.TxnProducer(transactional_id="tx"), group_ids=["mine", "theirs"])
    request.topics.add(topic="out", partitions=[0])
    admission = BROKER_RULES["AddPartitionsToTxn"](request, access(
        (M.ACL_OPERATION_WRITE, TRANSACTIONAL_ID, "tx"), (M.ACL_OPERATION_WRITE, TOPIC, "out"),
        (M.ACL_OPERATION_READ, GROUP, "mine")))
    assert list(admission.request.group_ids) == ["mine"]
    assert [(t.topic, list(t.partitions)) for t in admission.request.topics] == [("out", [0])]
