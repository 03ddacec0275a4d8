"""A topic deleted and recreated under the same name while one of its replicas is down (issue 18, finding 3).

Real processes. The controllers' session timeout is long here (15 s), so the killed broker is still
registered as live when the topic is recreated a moment later and gets a replica of the new topic too:
the case the issue describes ("a replica offline while its topic is deleted and recreated"). It is
restarted once its session has expired (a new incarnation may register only then). Leader epochs of the new
topic restart where the old one's were, so only the topic id can tell the old log from the new topic's.
"""

from __future__ import annotations

import pytest

from kanal.broker.storage.partition_metadata import read_topic_id
from kanal.clients.admin import Admin
from kanal.clients.cluster_metadata import ClusterMetadata
from kanal.deploy.local_cluster import LocalCluster
from kanal.v1.error import ErrorCode

from .conftest import BROKER_FLAGS, broker_node, create_topic, partition_info, wait_until
from .history import read_topic
from .test_replication import NewRecord, build_batch, raw_produce, replica_log_bytes

TOPIC = "reborn"
OLD_RECORDS = 4
SESSION_TIMEOUT_MS = 15_000
NEW_RECORDS = 10  # more than the old log held: the old log's end is then inside the new leader's epoch


@pytest.fixture
def slow_sessions_cluster(tmp_path_factory):
    cluster = LocalCluster(
        tmp_path_factory.mktemp("reborn"),
        controllers=3,
        brokers=3,
        controller_flags=["--session-timeout-ms", str(SESSION_TIMEOUT_MS), "--election-timeout-ms", "300"],
        broker_flags=BROKER_FLAGS,
    )
    cluster.start(timeout_s=90)
    yield cluster
    cluster.stop()


def produce_one(cluster, value: bytes) -> None:
    """acks=all, one record, retried only on NOT_LEADER_OR_FOLLOWER (refused before any append, e.g. while
    leadership moves)."""
    def stored() -> bool:
        result = raw_produce(cluster, TOPIC, 0, build_batch([NewRecord(value)]), acks=-1)
        if result.error == ErrorCode.NOT_LEADER_OR_FOLLOWER:
            return False
        assert result.error == ErrorCode.NONE, result
        return True

    wait_until(stored, 30, f"{value!r} to be stored")


def live_brokers(cluster) -> set[int]:
    md = ClusterMetadata(cluster.bootstrap)
    try:
        return set(md.refresh([TOPIC]).brokers)
    finally:
        md.close()


def all_replicas_equal(cluster, replicas) -> bool:
    return len({replica_log_bytes(cluster, b, TOPIC, 0) for b in replicas}) == 1


def test_a_replica_down_while_its_topic_is_recreated_removes_its_stray_log(slow_sessions_cluster):
    cluster = slow_sessions_cluster
    create_topic(cluster, TOPIC, partitions=1, replication_factor=3, min_insync_replicas="1")
    # The old records span leader epochs 0 and 1, so that whichever epoch the new topic's leader has
    # (0, or 1 when the restarted broker led it and is fenced by its own new incarnation), the restart
    # lands where divergence detection cannot tell the logs apart.
    first_leader = broker_node(cluster, partition_info(cluster, TOPIC, 0).leader)
    for i in range(OLD_RECORDS // 2):
        produce_one(cluster, b"old-%d" % i)
    first_leader.stop()
    try:
        wait_until(lambda: partition_info(cluster, TOPIC, 0).leader not in (-1, first_leader.node_id), 30,
                   "a second leader epoch")
        for i in range(OLD_RECORDS // 2, OLD_RECORDS):
            produce_one(cluster, b"old-%d" % i)
    finally:
        cluster.start_node(first_leader)
    old = partition_info(cluster, TOPIC, 0)
    wait_until(
        lambda: first_leader.node_id in partition_info(cluster, TOPIC, 0).isr, 30, "the old ISR to be whole"
    )
    wait_until(lambda: all_replicas_equal(cluster, old.replicas), 30, "every replica to hold the old records")
    stale = broker_node(cluster, next(b for b in old.replicas if b != old.leader))
    stale_dir = cluster.data_dir / f"broker-{stale.node_id}" / f"{TOPIC}-0"
    old_id = read_topic_id(stale_dir)
    assert old_id

    stale.kill()
    admin = Admin(cluster.bootstrap)
    try:
        admin.delete_topic(TOPIC)
        wait_until(lambda: TOPIC not in admin.list_topics(), 30, "the deletion")
        # Still registered live (its session has not expired), so the new topic is placed on it too.
        new_id = admin.create_topic(TOPIC, partitions=1, replication_factor=3,
                                    configs={"min.insync.replicas": "1"})
    finally:
        admin.close()
    assert new_id != old_id
    assert stale_dir.exists(), "the offline broker could not remove its directory"
    wait_until(lambda: stale.node_id not in live_brokers(cluster), SESSION_TIMEOUT_MS / 1000 + 30,
               "the killed broker's session to expire (its leaderships move)")
    cluster.start_node(stale)
    new = wait_until(
        lambda: (p := partition_info(cluster, TOPIC, 0)).leader not in (-1, stale.node_id) and p,
        30,
        "a live leader for the new topic",
    )
    assert set(new.replicas) == set(old.replicas)
    values = [b"new-%d" % i for i in range(NEW_RECORDS)]
    for value in values:
        produce_one(cluster, value)

    # The restarted broker removed the stray directory and replicates the new topic from offset 0.
    assert read_topic_id(stale_dir) == new_id
    wait_until(
        lambda: stale.node_id in partition_info(cluster, TOPIC, 0).isr, 30, "the restarted replica in the ISR"
    )
    log_text = (cluster.data_dir / "logs" / f"broker-{stale.node_id}.log").read_text(errors="replace")
    assert f"records topic id {old_id}" in log_text and "never adopted" in log_text

    # Every replica that leads serves exactly the new topic's records: move leadership to each in turn.
    leaders_seen = []
    stopped = []
    try:
        while True:
            leader = wait_until(lambda: (p := partition_info(cluster, TOPIC, 0)).leader >= 0 and p, 30,
                                "a leader").leader
            leaders_seen.append(leader)
            assert [v for _, _, v in read_topic(cluster, TOPIC, 1)] == values, f"read from leader {leader}"
            if leader == stale.node_id:
                break
            node = broker_node(cluster, leader)
            node.stop()  # controlled shutdown: leadership moves to another ISR member
            stopped.append(node)
            wait_until(lambda gone=leader: partition_info(cluster, TOPIC, 0).leader not in (-1, gone), 30,
                       "leadership to move away")
    finally:
        for node in stopped:
            cluster.start_node(node)
    assert leaders_seen[-1] == stale.node_id
    wait_until(lambda: all_replicas_equal(cluster, new.replicas), 30, "every replica to hold the same bytes")
