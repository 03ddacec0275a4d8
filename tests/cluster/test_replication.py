"""Replication on a real cluster (3 controllers, 3 brokers as processes): failures while producing, and
the history afterwards. Every test leaves the module's cluster with all nodes running."""

from __future__ import annotations

import time
import urllib.request
from pathlib import Path

import grpc
import pytest

from kanal.clients.admin import Admin
from kanal.clients.cluster_metadata import ClusterMetadata
from kanal.clients.producer import Producer
from kanal.clients.producer_config import ProducerConfig
from kanal.v1 import broker_pb2, broker_pb2_grpc
from kanal.v1.batch import NewRecord as _NewRecord
from kanal.v1.batch import build_batch
from kanal.v1.error import ErrorCode, KanalError

from .conftest import (
    broker_node,
    check_history,
    create_topic,
    partition_info,
    resume_brokers,
    start_cluster,
    wait_until,
)
from .history import produce_history, read_topic

pytestmark = pytest.mark.cluster


def NewRecord(value: bytes) -> _NewRecord:
    """A record stamped now: retention (7 days by default) deletes records stamped in 1970 at once."""
    return _NewRecord(value, timestamp_ms=int(time.time() * 1000))


def test_leader_sigkill_while_producing_keeps_every_acknowledged_record(cluster):
    topic = "kill-leader"
    create_topic(cluster, topic, partitions=2, replication_factor=3, min_insync_replicas="2")
    victim = broker_node(cluster, partition_info(cluster, topic, 0).leader)
    acked: dict[tuple[int, int], bytes] = {}
    errors: list = []
    producer = Producer(
        ProducerConfig(
            bootstrap=cluster.bootstrap,
            acks="all",
            linger_ms=2,
            batch_size_bytes=8 * 1024,
            retry_backoff_ms=50,
            request_timeout_ms=5000,
            delivery_timeout_ms=60_000,
        )
    )
    try:
        for chunk in range(10):
            produce_history(producer, topic, 500, chunk * 500, acked, errors)
            if chunk == 4:
                victim.kill()  # batches of this chunk are in flight to it now
            else:
                producer.flush(60)
        producer.flush(60)
    finally:
        producer.close()
    new_leader = partition_info(cluster, topic, 0).leader
    assert new_leader != victim.node_id, "leadership moved off the killed broker"
    assert not errors, f"the producer gave up on records: {errors[:3]}"
    assert len(acked) == 5000
    cluster.start_node(victim)
    read = read_topic(cluster, topic, 2)
    check_history(acked, read)
    # Per-key order: records of one key live in one partition and come back in produce order.
    last_by_key: dict[bytes, int] = {}
    for _, _, value in read:
        i = int(value[2:])
        key = i % 20
        assert i > last_by_key.get(key, -1), f"key {key}: {i} read after {last_by_key[key]}"
        last_by_key[key] = i


def test_paused_follower_leaves_the_isr_and_rejoins_after_resume(cluster):
    topic = "pause-follower"
    create_topic(cluster, topic, partitions=1, replication_factor=3)
    info = partition_info(cluster, topic, 0)
    follower = broker_node(cluster, next(b for b in info.replicas if b != info.leader))
    producer = Producer(ProducerConfig(bootstrap=cluster.bootstrap, acks="1", enable_idempotence=False))
    follower.pause()
    try:
        # Records keep arriving, so the paused follower falls behind the leader's log end.
        def shrunk():
            producer.produce(topic, b"x" * 100)
            producer.flush(10)
            return follower.node_id not in partition_info(cluster, topic, 0).isr
        wait_until(shrunk, 30, "the paused follower to leave the ISR", interval_s=0.2)
        # Paused past its session timeout, it is fenced too; coming back must make it eligible again.
        with Admin(cluster.bootstrap) as admin:
            wait_until(
                lambda: any(
                    b.broker_id == follower.node_id and b.fenced for b in admin.describe_cluster().brokers
                ),
                30,
                "the paused follower to be fenced",
            )
    finally:
        resume_brokers(cluster, [follower])
    try:
        # Asked of the leader: the follower's own answer just after resuming is its image from before the
        # pause, where it is still in the ISR.
        wait_until(lambda: follower.node_id in partition_info(cluster, topic, 0, at=info.leader).isr, 30,
                   "the resumed follower to rejoin the ISR", interval_s=0.2)
    finally:
        producer.close()


def raw_produce(cluster, topic: str, partition: int, batch: bytes, acks: int, leader: int | None = None):
    """One Produce call with hand-built bytes, to the partition's leader (or to broker `leader`, straight
    to its endpoint: no metadata call that could wait on a paused broker)."""
    if leader is None:
        leader = partition_info(cluster, topic, partition).leader
    request = broker_pb2.ProduceRequest(acks=acks, timeout_ms=5000)
    request.topics.add(topic=topic).partitions.add(partition=partition, batches=[batch])
    with grpc.insecure_channel(broker_node(cluster, leader).endpoint) as channel:
        reply = broker_pb2_grpc.BrokerStub(channel).Produce(request, timeout=30)
    return reply.topics[0].partitions[0]


def log_end(cluster, topic: str, partition: int) -> int:
    """The leader's log end offset (from a consumer fetch reply)."""
    md = ClusterMetadata(cluster.bootstrap)
    try:
        view = md.refresh([topic])
        request = broker_pb2.FetchRequest(replica_id=-1, max_wait_ms=0, max_bytes=1)
        request.topics.add(topic=topic).partitions.add(partition=partition, fetch_offset=0, max_bytes=1,
                                                       current_leader_epoch=-1)
        reply = md.stub(view.brokers[view.topics[topic][partition].leader]).Fetch(request, timeout=10)
        return reply.topics[0].partitions[0].log_end_offset
    finally:
        md.close()


def test_acks_all_fails_cleanly_with_two_replicas_down(cluster):
    topic = "two-down"
    create_topic(cluster, topic, partitions=1, replication_factor=3, min_insync_replicas="2")
    info = partition_info(cluster, topic, 0)
    assert (
        raw_produce(cluster, topic, 0, build_batch([NewRecord(b"before")]), acks=-1).error == ErrorCode.NONE
    )
    followers = [broker_node(cluster, b) for b in info.replicas if b != info.leader]
    for node in followers:
        node.kill()
    try:
        wait_until(lambda: partition_info(cluster, topic, 0).isr == (info.leader,), 30,
                   "the dead followers to leave the ISR")
        before = log_end(cluster, topic, 0)
        result = raw_produce(cluster, topic, 0, build_batch([NewRecord(b"refused")]), acks=-1)
        assert result.error == ErrorCode.NOT_ENOUGH_REPLICAS
        assert log_end(cluster, topic, 0) == before, "nothing was appended"
    finally:
        for node in followers:
            cluster.start_node(node)
    wait_until(lambda: len(partition_info(cluster, topic, 0).isr) == 3, 30, "the ISR to recover")


def test_idempotent_producer_goes_on_after_a_batch_fails_for_good(cluster):
    """A batch that took sequence numbers and then failed for good (refused with NOT_ENOUGH_REPLICAS until
    its delivery timeout passed, so never stored) leaves a hole before the next batch's sequence. The
    producer does not know it was not stored, so the next batch goes out as it is and is refused as out of
    order; the producer then moves the partition to a new epoch and it is stored. Every later record lands
    once, in order, instead of each being refused in turn."""
    topic = "epoch-bump"
    create_topic(cluster, topic, partitions=1, replication_factor=3, min_insync_replicas="2")
    info = partition_info(cluster, topic, 0)
    producer = Producer(
        ProducerConfig(
            bootstrap=cluster.bootstrap,
            acks="all",
            linger_ms=0,
            request_timeout_ms=1000,
            delivery_timeout_ms=2000,
            retry_backoff_ms=50,
        )
    )
    followers = [broker_node(cluster, b) for b in info.replicas if b != info.leader]
    try:
        assert producer.produce(topic, b"first", partition=0).result(30).offset == 0
        for node in followers:
            node.kill()
        try:
            wait_until(lambda: partition_info(cluster, topic, 0).isr == (info.leader,), 30,
                       "the dead followers to leave the ISR")
            with pytest.raises(KanalError) as err:
                producer.produce(topic, b"lost", partition=0).result(30)
            # Refused before any append while the ISR is below 2 (a slow attempt may end as a timeout
            # instead): either way it is not stored, which the offsets below check.
            assert err.value.code in (ErrorCode.NOT_ENOUGH_REPLICAS, ErrorCode.REQUEST_TIMED_OUT)
        finally:
            for node in followers:
                cluster.start_node(node)
        wait_until(lambda: len(partition_info(cluster, topic, 0).isr) == 3, 30, "the ISR to recover")
        futures = [producer.produce(topic, b"after-%d" % i, partition=0) for i in range(20)]
        assert [f.result(30).offset for f in futures] == list(range(1, 21))
    finally:
        producer.close()
    assert [(o, v) for _, o, v in read_topic(cluster, topic, 1)] == (
        [(0, b"first")] + [(i + 1, b"after-%d" % i) for i in range(20)])


def broker_gauge(node, series: str) -> float:
    """One series of a broker's Prometheus endpoint (name plus labels, as printed); 0 when absent."""
    text = urllib.request.urlopen(f"http://{node.extra['metrics']}/metrics", timeout=5).read().decode()
    for line in text.splitlines():
        if line.startswith(series + " "):
            return float(line.split()[-1])
    return 0.0


def purgatory_size(node, kind: str) -> float:
    return broker_gauge(node, f'kanal_fetch_purgatory_size{{kind="{kind}"}}')


def test_an_idle_producer_is_forgotten_and_its_next_batch_still_lands(tmp_path_factory):
    """A broker forgets a producer with no batch for --producer-id-expiration-ms (the
    kanal_broker_producer_ids gauge falls back to 0): that is what bounds its producer state. The
    producer's next batch is refused as UNKNOWN_PRODUCER_ID; the producer moves the partition to a new
    epoch and the batch lands, once, after the earlier ones."""
    cluster = start_cluster(tmp_path_factory, "expiry", brokers=1,
                            extra_broker_flags=["--producer-id-expiration-ms", "3000"])
    try:
        create_topic(cluster, "idle", partitions=1, replication_factor=1)
        node = cluster.brokers[0]
        producer = Producer(ProducerConfig(bootstrap=cluster.bootstrap, acks="all", linger_ms=0))
        try:
            assert producer.produce("idle", b"before", partition=0).result(30).offset == 0
            wait_until(
                lambda: broker_gauge(node, "kanal_broker_producer_ids") == 1, 30, "the producer to be kept"
            )
            wait_until(
                lambda: broker_gauge(node, "kanal_broker_producer_ids") == 0,
                30,
                "the producer to be forgotten",
            )
            assert producer.produce("idle", b"after", partition=0).result(30).offset == 1
            assert producer.produce("idle", b"again", partition=0).result(30).offset == 2
        finally:
            producer.close()
        assert [(o, v) for _, o, v in read_topic(cluster, "idle", 1)] == [(0, b"before"), (1, b"after"),
                                                                           (2, b"again")]
    finally:
        cluster.stop()


def replica_log_bytes(cluster, broker_id: int, topic: str, partition: int) -> bytes:
    directory = Path(cluster.data_dir) / f"broker-{broker_id}" / f"{topic}-{partition}"
    return b"".join(p.read_bytes() for p in sorted(directory.glob("*.log")))


def test_restarted_former_leader_truncates_its_unacknowledged_tail(cluster):
    topic = "diverge"
    create_topic(cluster, topic, partitions=1, replication_factor=3, min_insync_replicas="1")
    info = partition_info(cluster, topic, 0)
    old_leader = broker_node(cluster, info.leader)
    followers = [broker_node(cluster, b) for b in info.replicas if b != info.leader]
    for i in range(5):
        assert (
            raw_produce(cluster, topic, 0, build_batch([NewRecord(b"committed-%d" % i)] * 10), acks=-1).error
            == 0
        )
    for node in followers:
        node.pause()
    try:
        # Paused followers cannot send new fetches; once no fetch of theirs waits at the leader, nothing
        # can carry the tail to them.
        wait_until(lambda: purgatory_size(old_leader, "follower") == 0, 10, "follower long polls to end")
        # acks=1: stored on the old leader only — never acknowledged as replicated.
        tail = raw_produce(
            cluster, topic, 0, build_batch([NewRecord(b"tail")] * 7), acks=1, leader=info.leader
        )
        assert tail.error == ErrorCode.NONE and tail.base_offset == 50
        old_leader.kill()
    finally:
        resume_brokers(cluster, followers)
    try:
        new = wait_until(
            lambda: (p := partition_info(cluster, topic, 0)).leader not in (-1, info.leader) and p,
            30,
            "a new leader from the ISR",
        )
        new_leader = new.leader
        for i in range(3):
            assert (
                raw_produce(cluster, topic, 0, build_batch([NewRecord(b"new-%d" % i)] * 5), acks=-1).error
                == 0
            )
    finally:
        cluster.start_node(old_leader)
    wait_until(
        lambda: old_leader.node_id in partition_info(cluster, topic, 0).isr, 30, "the old leader to rejoin"
    )
    wait_until(lambda: len({replica_log_bytes(cluster, b, topic, 0) for b in info.replicas}) == 1, 30,
               "all three replicas to hold the same bytes")
    values = [v for _, _, v in read_topic(cluster, topic, 1)]
    assert values == [b"committed-%d" % i for i in range(5) for _ in range(10)] + \
        [b"new-%d" % i for i in range(3) for _ in range(5)], "the unreplicated tail is gone everywhere"
    assert new_leader in info.replicas


def power_cut_log(cluster, broker_id: int, topic: str, partition: int) -> None:
    """What a power loss does to a stopped broker's replica that was never fsynced (brokers fsync on
    segment roll only): the segments are empty again. The broker was SIGKILLed, so no log carries a
    clean-shutdown marker."""
    directory = Path(cluster.data_dir) / f"broker-{broker_id}" / f"{topic}-{partition}"
    assert not (directory / "clean-shutdown").exists()
    for segment in directory.glob("*.log"):
        segment.write_bytes(b"")


def test_last_in_sync_replica_back_from_a_power_cut_does_not_erase_the_others(cluster):
    """Chaos seed 15: the last in-sync replica lost its unsynced log to a power cut, was elected from the
    ISR with an empty log, and the other replica, which held every acknowledged record, truncated to it.
    Now the partition recovers from the longest log."""
    topic = "power-cut"
    create_topic(cluster, topic, partitions=1, replication_factor=2, min_insync_replicas="1")
    info = partition_info(cluster, topic, 0)
    first = broker_node(cluster, info.leader)
    last = broker_node(cluster, next(b for b in info.replicas if b != info.leader))
    acked: dict[tuple[int, int], bytes] = {}
    for i in range(8):
        value = b"acked-%d" % i
        reply = raw_produce(cluster, topic, 0, build_batch([NewRecord(value)]), acks=-1)
        assert reply.error == ErrorCode.NONE
        acked[(0, reply.base_offset)] = value
    try:
        first.kill()
        wait_until(lambda: ((p := partition_info(cluster, topic, 0)).leader, list(p.isr))
                   == (last.node_id, [last.node_id]), 30, "the other replica to lead alone")
        last.kill()
        wait_until(lambda: partition_info(cluster, topic, 0).leader == -1, 30, "the partition to go offline")
        cluster.start_node(first)  # holds every acknowledged record, but is not in the ISR
        power_cut_log(cluster, last.node_id, topic, 0)
    finally:
        for node in (first, last):
            if not node.running:
                cluster.start_node(node)
    recovered = wait_until(lambda: (p := partition_info(cluster, topic, 0)).leader >= 0 and p, 60,
                           "a recovery election")
    assert recovered.leader == first.node_id, "the longest log leads, not the last in-sync replica"
    check_history(acked, read_topic(cluster, topic, 1))
    wait_until(lambda: len({replica_log_bytes(cluster, b, topic, 0) for b in info.replicas}) == 1, 30,
               "the emptied replica to copy the log back")


def test_retried_idempotent_batch_is_stored_once(cluster):
    topic = "idempotent"
    create_topic(cluster, topic, partitions=1, replication_factor=3)
    md = ClusterMetadata(cluster.bootstrap)
    try:
        reply = md.any_stub().InitProducerId(broker_pb2.InitProducerIdRequest(), timeout=10)
    finally:
        md.close()
    assert reply.error == ErrorCode.NONE and reply.producer_id > 0
    batch = build_batch([NewRecord(b"once-%d" % i) for i in range(4)], producer_id=reply.producer_id,
                        producer_epoch=reply.producer_epoch, base_sequence=0)
    first = raw_produce(cluster, topic, 0, batch, acks=-1)
    again = raw_produce(cluster, topic, 0, batch, acks=-1)
    assert first.error == again.error == ErrorCode.NONE
    assert again.base_offset == first.base_offset == 0
    assert log_end(cluster, topic, 0) == 4
    gap = build_batch([NewRecord(b"gap")], producer_id=reply.producer_id, producer_epoch=reply.producer_epoch,
                      base_sequence=10)
    assert raw_produce(cluster, topic, 0, gap, acks=-1).error == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert log_end(cluster, topic, 0) == 4
    assert [v for _, _, v in read_topic(cluster, topic, 1)] == [b"once-%d" % i for i in range(4)]


def test_idempotence_state_survives_a_broker_restart(cluster):
    topic = "idempotent-restart"
    create_topic(cluster, topic, partitions=1, replication_factor=3)
    md = ClusterMetadata(cluster.bootstrap)
    try:
        ids = md.any_stub().InitProducerId(broker_pb2.InitProducerIdRequest(), timeout=10)
    finally:
        md.close()
    batches = [build_batch([NewRecord(b"r-%d-%d" % (n, i)) for i in range(3)], producer_id=ids.producer_id,
                           producer_epoch=ids.producer_epoch, base_sequence=3 * n) for n in range(3)]
    first = [raw_produce(cluster, topic, 0, b, acks=-1) for b in batches]
    assert [r.base_offset for r in first] == [0, 3, 6]
    leader = broker_node(cluster, partition_info(cluster, topic, 0).leader)
    leader.stop()  # a clean shutdown writes the producer-state snapshot
    snapshots = list((Path(cluster.data_dir) / f"broker-{leader.node_id}" / f"{topic}-0").glob("*.snapshot"))
    assert [p.name for p in snapshots] == [f"{9:020d}.snapshot"]
    cluster.start_node(leader)
    # Whoever leads now (the restarted broker or a follower that took over), a retry of a stored batch is
    # answered with its original offsets and not stored again.
    wait_until(lambda: partition_info(cluster, topic, 0).leader >= 0, 30, "a leader")
    again = raw_produce(cluster, topic, 0, batches[1], acks=-1)
    assert again.error == ErrorCode.NONE and again.base_offset == 3
    assert log_end(cluster, topic, 0) == 9
