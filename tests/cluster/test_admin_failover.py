"""The admin client moves on from a broker it cannot reach: with the broker it was talking to SIGKILLed,
admin calls go to a live broker instead of failing with "failed to connect" (a defect `kanal chaos`
found: every create and delete failed for as long as that one broker was down), and partition calls follow
the cluster's metadata when this Admin's is older (a topic created since, a leader that moved)."""

from __future__ import annotations

import pytest

from kanal.clients.admin import Admin

from .conftest import start_cluster, wait_until


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = start_cluster(tmp_path_factory, "admin-failover")
    yield c
    c.stop()


def test_admin_calls_go_to_a_live_broker_when_theirs_dies(cluster):
    with Admin(cluster.bootstrap, request_timeout_ms=30_000) as admin:
        admin.create_topic("before-kill", 1, 1)
        talking_to = admin._metadata._good  # the broker this Admin's calls went to
        victim = next(n for n in cluster.brokers if n.endpoint == talking_to)
        victim.kill()
        try:
            admin.create_topic(
                "after-kill", 1, 3
            )  # RF 3: a leader placed on the dead broker moves once it is fenced
            assert "after-kill" in admin.list_topics()
            admin.delete_topic("before-kill")
            wait_until(
                lambda: "before-kill" not in admin.list_topics(), 30, "the deletion reaches the brokers"
            )
        finally:
            cluster.start_node(victim, 60)


def test_log_bounds_follow_topics_created_since_and_leaders_that_moved(cluster):
    """Admin.log_bounds (behind `kanal consume --offset`) used the metadata this Admin had cached: a topic
    created since was LEADER_NOT_AVAILABLE, and a leader that had moved sent the call to a broker that no
    longer led. It now asks for the metadata again and follows the leader it names."""
    from kanal.clients.producer import Producer
    from kanal.clients.producer_config import ProducerConfig
    from kanal.v1.error import ErrorCode, KanalError

    with Admin(cluster.bootstrap) as admin, Admin(cluster.bootstrap) as other:
        admin.list_topics()  # metadata cached before the topic exists
        other.create_topic("bounds-later", 2, 3)
        producer = Producer(ProducerConfig(bootstrap=cluster.bootstrap, acks="all"))
        try:
            for i in range(5):
                producer.produce("bounds-later", f"r{i}".encode(), partition=1)
            producer.flush(30)
        finally:
            producer.close()
        assert admin.log_bounds("bounds-later", [0, 1]) == {0: (0, 0), 1: (0, 5)}
        leader = admin._metadata.view.topics["bounds-later"][1].leader
        victim = next(n for n in cluster.brokers if n.node_id == leader)
        victim.kill()
        try:
            # The cached leader is dead: the bounds come from the partition's next leader, once elected.
            assert admin.log_bounds("bounds-later", [1]) == {1: (0, 5)}
            assert admin._metadata.view.topics["bounds-later"][1].leader != leader
        finally:
            cluster.start_node(victim, 60)
        for topic, partition in (("no-such-topic", 0), ("bounds-later", 7)):
            with pytest.raises(KanalError) as raised:
                admin.log_bounds(topic, [partition])
            assert raised.value.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, raised.value
