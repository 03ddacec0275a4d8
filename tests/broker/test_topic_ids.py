"""Topic ids on disk and between brokers (KIP-516): the `partition.metadata` file, the adopt/stray rule a
ReplicaManager applies to directories when it reconciles with an image, and UNKNOWN_TOPIC_ID on Fetch.
Real logs in temp dirs, a real ReplicaManager; no sockets (broker 0 leads everything, so no fetcher runs)."""

from __future__ import annotations

import pytest

from kanal.broker.config import BrokerConfig
from kanal.broker.metrics import BrokerMetrics
from kanal.broker.partition import Assignment, Partition
from kanal.broker.replica_manager import ReplicaManager
from kanal.broker.storage.log_config import LogConfig
from kanal.broker.storage.partition_metadata import (
    PARTITION_METADATA_FILE,
    DirectoryVerdict,
    judge_directory,
    read_topic_id,
    write_topic_id,
)
from kanal.metadata import MetadataImage
from kanal.metadata.image import BrokerRegistration, PartitionState, TopicImage
from kanal.v1 import broker_pb2
from kanal.v1.batch import NewRecord, build_batch
from kanal.v1.error import ErrorCode, KanalError

from .test_partition_waiters import FakeManager

OLD_ID = "11111111-1111-4111-8111-111111111111"
NEW_ID = "22222222-2222-4222-8222-222222222222"


def image_with(topics: dict[str, str], leader_epoch: int = 0) -> MetadataImage:
    """Topics (name -> id) of one partition each, replicas [0, 1], led by broker 0; brokers 0 and 1 live."""
    image = MetadataImage()
    for b in (0, 1):
        image.brokers[b] = BrokerRegistration(b, f"inc-{b}", 7, f"127.0.0.1:{b + 1}", "", False)
    for name, topic_id in topics.items():
        topic = TopicImage(name, topic_id, [PartitionState(0, (0, 1), (0,), 0, leader_epoch, 1)])
        image.topics[name] = topic
        image.topics_by_id[topic_id] = topic
    return image


def manager(data_dir) -> ReplicaManager:
    config = BrokerConfig(broker_id=0, listen="127.0.0.1:1", controllers=("127.0.0.1:2",), data_dir=data_dir)
    return ReplicaManager(config, controllers=None, metrics=BrokerMetrics(), broker_epoch=lambda: 1)


def produce(rm: ReplicaManager, topic: str, *values: bytes) -> None:
    request = broker_pb2.ProduceRequest(acks=1, timeout_ms=1_000)
    data = request.topics.add(topic=topic).partitions.add(partition=0)
    data.batches.extend(build_batch([NewRecord(v)]) for v in values)
    reply = rm.produce(request)
    assert reply.topics[0].partitions[0].error == ErrorCode.NONE, reply


def stray_count(rm: ReplicaManager) -> float:
    return rm.metrics.registry.get_sample_value("kanal_replica_manager_stray_replicas_removed_total") or 0.0


@pytest.fixture
def managers():
    made: list[ReplicaManager] = []
    yield made
    for rm in made:
        rm.close()


def started(managers, data_dir, image: MetadataImage) -> ReplicaManager:
    rm = manager(data_dir)
    managers.append(rm)
    rm.on_metadata(MetadataImage(), image)
    return rm


# ---- the rule and the file ----

def test_the_verdict_for_each_kind_of_directory():
    assert judge_directory(False, None, NEW_ID) == DirectoryVerdict.NEW
    assert judge_directory(True, NEW_ID, NEW_ID) == DirectoryVerdict.ADOPT
    assert judge_directory(True, OLD_ID, NEW_ID) == DirectoryVerdict.STRAY
    assert judge_directory(True, None, NEW_ID) == DirectoryVerdict.UPGRADE
    with pytest.raises(ValueError):
        judge_directory(True, OLD_ID, "")


def test_the_file_round_trips_and_a_damaged_one_is_a_storage_error(tmp_path):
    assert read_topic_id(tmp_path / "t-0") is None
    write_topic_id(tmp_path / "t-0", NEW_ID)
    assert (tmp_path / "t-0" / PARTITION_METADATA_FILE).read_text() == f"version: 0\ntopic_id: {NEW_ID}\n"
    assert read_topic_id(tmp_path / "t-0") == NEW_ID
    assert not list((tmp_path / "t-0").glob("*.tmp"))
    for damaged in ("version: 0\n", "version: 9\ntopic_id: x\n", "garbage", "\xff"):
        (tmp_path / "t-0" / PARTITION_METADATA_FILE).write_text(damaged)
        with pytest.raises(KanalError) as err:
            read_topic_id(tmp_path / "t-0")
        assert err.value.code == ErrorCode.STORAGE_ERROR


# ---- reconcile ----

def test_a_new_replica_records_its_topic_id_and_a_restart_adopts_it(tmp_path, managers):
    rm = started(managers, tmp_path, image_with({"t": OLD_ID}))
    produce(rm, "t", b"a", b"b")
    assert read_topic_id(tmp_path / "t-0") == OLD_ID
    rm.close()
    managers.remove(rm)
    again = started(managers, tmp_path, image_with({"t": OLD_ID}, leader_epoch=1))
    assert again.partition("t", 0).log.log_end_offset == 2
    assert stray_count(again) == 0


def test_a_directory_of_an_earlier_topic_of_the_same_name_is_never_adopted(tmp_path, managers):
    """The broker was away while `t` was deleted and recreated: its directory records the old id."""
    rm = started(managers, tmp_path, image_with({"t": OLD_ID}))
    produce(rm, "t", b"old-0", b"old-1", b"old-2")
    rm.close()
    managers.remove(rm)
    again = started(managers, tmp_path, image_with({"t": NEW_ID}))
    part = again.partition("t", 0)
    assert part.topic_id == NEW_ID
    assert part.log.log_end_offset == 0, "the old topic's records must not become the new topic's"
    assert read_topic_id(tmp_path / "t-0") == NEW_ID
    assert stray_count(again) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t-0"], "the stray is gone, not parked"
    produce(again, "t", b"new-0")
    assert part.log.log_end_offset == 1


def test_a_topic_recreated_between_two_images_gets_a_fresh_replica(tmp_path, managers):
    """Deletion and recreation can arrive in one metadata fetch: the name never leaves the image."""
    rm = started(managers, tmp_path, image_with({"t": OLD_ID}))
    produce(rm, "t", b"old-0", b"old-1")
    old = rm.partition("t", 0)
    rm.on_metadata(image_with({"t": OLD_ID}), image_with({"t": NEW_ID}))
    new = rm.partition("t", 0)
    assert new is not old and old.deleted
    assert new.log.log_end_offset == 0
    assert read_topic_id(tmp_path / "t-0") == NEW_ID


def test_a_directory_from_before_topic_ids_is_adopted_once(tmp_path, managers):
    rm = started(managers, tmp_path, image_with({"t": OLD_ID}))
    produce(rm, "t", b"a")
    rm.close()
    managers.remove(rm)
    (tmp_path / "t-0" / PARTITION_METADATA_FILE).unlink()  # as an older kanal left it
    again = started(managers, tmp_path, image_with({"t": NEW_ID}))
    assert again.partition("t", 0).log.log_end_offset == 1
    assert read_topic_id(tmp_path / "t-0") == NEW_ID  # recorded: from now on the id guards it


def test_the_first_image_removes_replica_directories_it_does_not_name(tmp_path, managers):
    rm = started(managers, tmp_path, image_with({"t": OLD_ID, "gone": NEW_ID}))
    produce(rm, "gone", b"x")
    rm.close()
    managers.remove(rm)
    (tmp_path / "unrelated-0").mkdir()  # no partition.metadata: nothing proves it is a replica
    (tmp_path / "t-0.abc-stray").mkdir()  # a removal a crash interrupted
    again = started(managers, tmp_path, image_with({"t": OLD_ID}))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t-0", "unrelated-0"]
    assert stray_count(again) == 1


def test_a_damaged_metadata_file_keeps_that_replica_offline_and_its_data_in_place(tmp_path, managers):
    rm = started(managers, tmp_path, image_with({"t": OLD_ID}))
    produce(rm, "t", b"a")
    rm.close()
    managers.remove(rm)
    (tmp_path / "t-0" / PARTITION_METADATA_FILE).write_text("garbage")
    again = started(managers, tmp_path, image_with({"t": OLD_ID, "u": NEW_ID}))
    with pytest.raises(KanalError) as err:
        again.partition("t", 0)
    assert err.value.code == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert again.partition("u", 0).topic_id == NEW_ID  # the others are reconciled
    assert (tmp_path / "t-0" / "00000000000000000000.log").exists()


# ---- Fetch ----

def follower_fetch(topic_id: str) -> broker_pb2.FetchRequest:
    request = broker_pb2.FetchRequest(
        replica_id=1, replica_epoch=7, max_wait_ms=0, min_bytes=1, max_bytes=1 << 20
    )
    topic = request.topics.add(topic="t", topic_id=topic_id)
    topic.partitions.add(partition=0, fetch_offset=0, current_leader_epoch=0, last_fetched_epoch=-1,
                         max_bytes=1 << 20)
    return request


def test_a_fetch_for_another_topic_id_gets_unknown_topic_id_and_no_records(tmp_path, managers):
    rm = started(managers, tmp_path, image_with({"t": NEW_ID}))
    produce(rm, "t", b"new-0")
    stale = rm.fetch(follower_fetch(OLD_ID)).topics[0].partitions[0]
    assert stale.error == ErrorCode.UNKNOWN_TOPIC_ID and stale.records == b""
    assert OLD_ID in stale.error_message
    same = rm.fetch(follower_fetch(NEW_ID)).topics[0].partitions[0]
    assert same.error == ErrorCode.NONE and same.records
    consumer = broker_pb2.FetchRequest(max_wait_ms=0, min_bytes=1, max_bytes=1 << 20)
    consumer.topics.add(topic="t").partitions.add(partition=0, fetch_offset=0, current_leader_epoch=-1)
    assert rm.fetch(consumer).topics[0].partitions[0].error == ErrorCode.NONE  # consumers may leave it out


def test_a_follower_appends_nothing_from_an_unknown_topic_id_answer(tmp_path):
    follower = Partition("t", 0, tmp_path / "t-0", LogConfig(), 1, 1, FakeManager(), topic_id=OLD_ID)
    try:
        follower.become_follower(Assignment(OLD_ID, (0, 1), (0, 1), 0, 0, 1))
        leader_log = Partition(
            "t", 0, tmp_path / "leader" / "t-0", LogConfig(), 0, 1, FakeManager(), topic_id=NEW_ID
        )
        leader_log.become_leader(Assignment(NEW_ID, (0,), (0,), 0, 0, 1), set(), 10_000)
        leader_log.append_as_leader([build_batch([NewRecord(b"new")])], 1, 0,
                                    broker_pb2.ProduceResponse.PartitionResult())
        answer = broker_pb2.FetchResponse.PartitionData(
            partition=0, error=ErrorCode.UNKNOWN_TOPIC_ID, error_message="other id", high_watermark=1,
            records=leader_log.log.read(0, 1 << 20).data)  # even if a leader sent records with the error
        leader_log.close()
        assert follower.apply_fetched(0, answer) == 0
        assert follower.log.log_end_offset == 0
    finally:
        follower.close()


# ---- cluster identity: no image of another cluster is reconciled (issue 40) ----

def _of_cluster(image: MetadataImage, cluster_id: str) -> MetadataImage:
    image.cluster_id = cluster_id
    return image


def test_an_image_of_another_cluster_deletes_nothing_and_stops_the_broker(tmp_path, managers):
    rm = manager(tmp_path)
    managers.append(rm)
    stopped: list[str] = []
    rm.set_cluster("cluster-a", adopted=False, fatal=stopped.append)
    rm.on_metadata(MetadataImage(), _of_cluster(image_with({"orders": OLD_ID}), "cluster-a"))
    produce(rm, "orders", b"kept")
    before = sorted(p.name for p in (tmp_path / "orders-0").iterdir())
    # A controller quorum made afresh: its image names another cluster and no topic at all.
    fresh = _of_cluster(image_with({}), "cluster-b")
    rm2 = manager(tmp_path)
    managers.append(rm2)
    rm2.set_cluster("cluster-a", adopted=False, fatal=stopped.append)
    rm2.on_metadata(MetadataImage(), fresh)
    assert len(stopped) == 1 and "cluster-a" in stopped[0] and "cluster-b" in stopped[0]
    assert sorted(p.name for p in (tmp_path / "orders-0").iterdir()) == before
    assert rm2.reconciled_image is None


def test_an_adopting_broker_refuses_an_image_that_knows_none_of_its_replicas(tmp_path, managers):
    rm = started(managers, tmp_path, image_with({"orders": OLD_ID}))
    produce(rm, "orders", b"kept")
    rm.close()
    managers.remove(rm)
    stopped: list[str] = []
    upgraded = manager(tmp_path)
    managers.append(upgraded)
    upgraded.set_cluster("new", adopted=True, fatal=stopped.append)
    upgraded.on_metadata(MetadataImage(), _of_cluster(image_with({"other": NEW_ID}), "new"))
    assert stopped and "none of whose topic ids" in stopped[0]
    assert (tmp_path / "orders-0").is_dir()
    # The same upgrade against the quorum that placed them adopts and goes on.
    ok = manager(tmp_path)
    managers.append(ok)
    ok.set_cluster("new", adopted=True, fatal=stopped.append)
    ok.on_metadata(MetadataImage(), _of_cluster(image_with({"orders": OLD_ID}), "new"))
    assert len(stopped) == 1 and ok.reconciled_image is not None
