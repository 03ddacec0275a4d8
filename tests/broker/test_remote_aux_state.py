"""A follower's start at a tiered leader's local log start (remote_aux_state.py, issue 44): it takes the
leader epochs, the idempotence state and the open transactions there from remote storage, copies nothing
below, and never restarts empty when the state is unavailable; the epochs below the local start come back
after the checkpoint is lost; a new leader behind the remote log's end never reuses its offsets.

Real Partitions over logs in temp dirs and real `file://` remote storage: the leader uploads with a
RemoteLogManager whose controller is a stub that records every segment (as the controller would), the
follower is fed the leader's own replica-fetch replies, as its fetcher would, and reads `.meta` objects with
a RemoteReader."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from kanal.broker.metrics import BrokerMetrics
from kanal.broker.partition import Assignment, Partition
from kanal.broker.remote_aux_state import (
    AuxStateSpec,
    RemoteAuxStateNeeded,
    RestartKind,
    plan_restart,
    read_aux_state,
    remote_epochs,
)
from kanal.broker.remote_fetch import RemoteReader
from kanal.broker.remote_log_manager import RemoteLogManager
from kanal.broker.storage.leader_epoch_cache import FILE_NAME as EPOCH_FILE
from kanal.broker.storage.leader_epoch_cache import LeaderEpochCache
from kanal.broker.storage.log_config import LogConfig
from kanal.broker.storage.remote_storage import RemoteStorageError, open_remote_storage
from kanal.metadata.ids import BrokerId, LeaderEpoch
from kanal.metadata.image import EpochStart, RemoteLog, RemoteSegment
from kanal.v1 import broker_pb2, controller_pb2
from kanal.v1.batch import ATTR_TRANSACTIONAL, CONTROL_COMMIT, NewRecord, build_batch, build_control_batch
from kanal.v1.error import ErrorCode, KanalError
from tests.harness.waiting import wait_until

from .test_partition_waiters import FakeManager

TOPIC_ID = "tid"
TIERED = LogConfig(segment_bytes_max=4096, batch_bytes_max=2048, index_interval_bytes=512,
                   remote_storage_enable=True,
                   retention_ms=None, local_retention_ms=None, local_retention_bytes=8192)
TXN_PRODUCER, IDEMPOTENT_PRODUCER = 7, 3


def assignment(leader: int, epoch: int, replicas=(0, 1, 2), isr=(0,)) -> Assignment:
    return Assignment(TOPIC_ID, replicas, isr, leader, epoch, epoch)


class Uploads:
    """The leader's uploads through a RemoteLogManager; the stub controller records each segment in the
    remote log this test's image holds."""

    def __init__(self, root: Path) -> None:
        self.storage = open_remote_storage((root / "remote").as_uri())
        self.segments: list[RemoteSegment] = []
        self.metrics = BrokerMetrics()
        self.manager = RemoteLogManager(self.storage, cluster_id=lambda: "cluster", broker_id=0,
                                        broker_epoch=lambda: 1, call_controller=self._call,
                                        metrics=self.metrics, retry_backoff_ms_max=1000)

    def _call(self, method: str, request: controller_pb2.AlterRemoteLogRequest):
        assert method == "AlterRemoteLog"
        for item in request.items:
            for record in item.segments_uploaded.segments:
                self.segments.append(RemoteSegment.from_record(record))
        return controller_pb2.AlterRemoteLogResponse(
            items=[controller_pb2.AlterRemoteLogResponse.Item(error=ErrorCode.NONE) for _ in request.items])

    @property
    def remote(self) -> RemoteLog:
        return RemoteLog(tuple(self.segments), self.segments[0].base_offset if self.segments else 0)

    def upload_all(self, leader: Partition) -> None:
        """Upload every closed segment the leader may upload, and give it the resulting remote log."""
        deadline = time.monotonic() + 30
        while True:
            before = len(self.segments)
            self.manager.tick([leader], 0)
            wait_until(lambda: not self.manager.in_flight(), max(0.0, deadline - time.monotonic()),
                       "the uploads in flight to finish")
            leader.set_remote(self.remote)
            if len(self.segments) == before:
                return

    def close(self) -> None:
        self.manager.close()


@pytest.fixture
def uploads(tmp_path) -> Iterator[Uploads]:
    u = Uploads(tmp_path)
    yield u
    u.close()


@pytest.fixture
def reader(uploads) -> Iterator[RemoteReader]:
    r = RemoteReader(uploads.storage, cluster_id=lambda: "cluster", cache_bytes=1 << 20, chunk_bytes=1 << 16,
                     metrics=uploads.metrics, threads=1)
    yield r
    r.close()


def produce(leader: Partition, raw: bytes) -> None:
    out = broker_pb2.ProduceResponse.PartitionResult()
    leader.append_as_leader([raw], 1, 0, out, allow_control=True, validate_producer=False)


def fill_tiered_leader(leader: Partition, uploads: Uploads) -> int:
    """Three leader epochs of plain, idempotent and transactional batches, with a transaction still open at
    the end; uploads and local retention run until the leader's local start is above 0. Returns it."""
    sequence = 0
    for epoch in (1, 2, 3):
        if epoch > 1:
            leader.become_leader(assignment(0, epoch), set(), 10_000)
        for i in range(12):
            produce(leader, build_batch([NewRecord(b"p" * 300)]))
            produce(leader, build_batch([NewRecord(b"i" * 200)] * 2, producer_id=IDEMPOTENT_PRODUCER,
                                        base_sequence=sequence))
            sequence += 2
            if i == 5 and epoch < 3:
                produce(leader, build_batch([NewRecord(b"t" * 100)], producer_id=TXN_PRODUCER,
                                            attributes=ATTR_TRANSACTIONAL, base_sequence=epoch - 1))
                produce(leader, build_control_batch(CONTROL_COMMIT, producer_id=TXN_PRODUCER,
                                                    producer_epoch=0, coordinator_epoch=0, timestamp_ms=0))
    # A transaction left open in a segment that is uploaded: it is open at the local start too.
    produce(leader, build_batch([NewRecord(b"t" * 100)], producer_id=TXN_PRODUCER + 1,
                                attributes=ATTR_TRANSACTIONAL))
    for _ in range(20):
        produce(leader, build_batch([NewRecord(b"p" * 300)]))
    uploads.upload_all(leader)
    leader.maintenance(int(time.time() * 1000), False, 1 << 62)
    start = leader.log.log_start_offset
    assert start > 0 and start in {s.end_offset for s in uploads.segments}, (start, uploads.segments)
    return start


@pytest.fixture
def tiered_leader(tmp_path, uploads) -> Iterator[Partition]:
    leader = Partition("t", 0, tmp_path / "leader" / "t-0", TIERED, 0, 1, FakeManager(), topic_id=TOPIC_ID)
    leader.become_leader(assignment(0, 1), set(), 10_000)
    fill_tiered_leader(leader, uploads)
    yield leader
    leader.close()


def new_follower(tmp_path: Path, remote: RemoteLog | None, name: str = "follower") -> Partition:
    follower = Partition("t", 0, tmp_path / name / "t-0", TIERED, 2, 1, FakeManager(), topic_id=TOPIC_ID)
    follower.become_follower(assignment(0, 3))
    follower.set_remote(remote)
    return follower


def leader_reply(leader: Partition, follower: Partition) -> broker_pb2.FetchResponse.PartitionData:
    """The leader's answer to the follower's next fetch, as the Fetch service fills it."""
    offset, epoch, last_epoch = follower.fetch_position()
    preq = broker_pb2.FetchRequest.PartitionRequest(partition=0, fetch_offset=offset,
                                                    current_leader_epoch=epoch, last_fetched_epoch=last_epoch)
    reply = broker_pb2.FetchResponse.PartitionData(partition=0, diverging_epoch=-1)
    try:
        leader.read_for_follower(2, preq, 1 << 20, reply)
    except KanalError as exc:  # the service turns it into the partition's error
        reply.error = exc.code
    return reply


def catch_up(leader: Partition, follower: Partition, reader: RemoteReader) -> int:
    """Fetch until the follower's log ends where the leader's does; returns how many restarts from remote
    storage it took."""
    restarts = 0
    for _ in range(200):
        if follower.log.log_end_offset == leader.log.log_end_offset:
            return restarts
        try:
            follower.apply_fetched(0, leader_reply(leader, follower))
        except RemoteAuxStateNeeded as needed:
            assert follower.restart_from_remote(0, read_aux_state(reader, needed.spec))
            restarts += 1
    raise AssertionError(f"{follower!r} did not catch up with {leader!r}")


@pytest.mark.parametrize("keep_segments", [True, False], ids=["some-remote-left", "all-remote-dropped"])
def test_the_local_start_follows_a_remote_start_that_retention_moved_past_it(tmp_path, uploads,
                                                                              keep_segments) -> None:
    """Remote retention drops remote segments still on the leader's disk (local retention keeps them all
    here): the log start is the remote one at once, and maintenance drops what is below it locally too,
    so no replica keeps offsets that retention deleted readable."""
    config = dataclasses.replace(TIERED, local_retention_bytes=None)
    leader = Partition("t", 0, tmp_path / "keep" / "t-0", config, 0, 1, FakeManager(), topic_id=TOPIC_ID)
    try:
        leader.become_leader(assignment(0, 1), set(), 10_000)
        for _ in range(60):
            produce(leader, build_batch([NewRecord(b"p" * 300)]))
        uploads.upload_all(leader)
        remote = uploads.remote
        assert leader.log.log_start_offset == 0 and len(remote.segments) >= 3
        new_start = remote.segments[1].end_offset  # retention dropped the first two
        kept = remote.segments[2:] if keep_segments else ()
        leader.set_remote(RemoteLog(kept, new_start))
        assert leader.log_start_offset == new_start and leader.list_offset(-2) == (new_start, -1)
        assert leader.log.log_start_offset == 0  # still on disk until maintenance
        leader.maintenance(int(time.time() * 1000), False, 1 << 62)
        assert leader.log.log_start_offset == new_start and leader.list_offset(-4) == (new_start, -1)
        assert leader.log.segments[0].base_offset == new_start
        preq = broker_pb2.FetchRequest.PartitionRequest(partition=0, fetch_offset=0, current_leader_epoch=-1)
        with pytest.raises(KanalError) as refused:
            leader.read_for_consumer(preq, 1 << 20, broker_pb2.FetchResponse.PartitionData(partition=0))
        assert refused.value.code == ErrorCode.OFFSET_OUT_OF_RANGE
    finally:
        leader.close()


def test_a_new_follower_starts_at_the_local_start_with_the_remote_state(tmp_path, tiered_leader, uploads,
                                                                        reader) -> None:
    leader = tiered_leader
    follower = new_follower(tmp_path, uploads.remote)
    try:
        assert catch_up(leader, follower, reader) == 1
        start = leader.log.log_start_offset
        # Nothing below the leader's local start was copied.
        assert follower.log.log_start_offset == start
        assert follower.log.segments[0].base_offset == start
        # The epochs below it are the remote segments', and the whole cache is the leader's.
        assert follower.log.epoch_cache.entries() == leader.log.epoch_cache.entries()
        assert [e for e, _ in follower.log.epoch_cache.entries()] == [1, 2, 3]
        assert LeaderEpochCache(follower.directory).load()
        assert [e for e, _ in remote_epochs(uploads.remote, start)] == [1, 2, 3]
        # Idempotence and transaction state equal the leader's, which replayed the whole log.
        assert follower.producers == leader.producers
        assert IDEMPOTENT_PRODUCER in follower.producers.producer_ids()
        assert follower.transactions.ongoing == leader.transactions.ongoing
        assert TXN_PRODUCER + 1 in follower.transactions.ongoing
        assert (follower.directory / f"{start:020d}.snapshot").exists()
        assert follower.high_watermark >= start
    finally:
        follower.close()


def test_a_follower_restarted_from_remote_reopens_with_the_same_state(tmp_path, tiered_leader, uploads,
                                                                      reader) -> None:
    follower = new_follower(tmp_path, uploads.remote)
    catch_up(tiered_leader, follower, reader)
    entries, producers = follower.log.epoch_cache.entries(), follower.producers
    follower.log.close_unclean()  # a crash: no clean-close snapshot, no transaction checkpoint
    again = new_follower(tmp_path, uploads.remote)
    try:
        assert again.log.epoch_cache.entries() == entries
        assert again.producers == producers
    finally:
        again.close()


def test_remote_storage_down_is_retried_and_never_an_empty_restart(tmp_path, tiered_leader, uploads) -> None:
    class Down:
        url = "file:///down"

        def get_range(self, key, start, end):
            raise RemoteStorageError("connection refused", retriable=True)

    down = RemoteReader(Down(), cluster_id=lambda: "cluster", cache_bytes=1 << 20,  # type: ignore[arg-type]
                        chunk_bytes=1 << 16, metrics=uploads.metrics, threads=1)
    follower = new_follower(tmp_path, uploads.remote)
    try:
        for _ in range(2):
            with pytest.raises(RemoteAuxStateNeeded) as needed:
                follower.apply_fetched(0, leader_reply(tiered_leader, follower))
            with pytest.raises(RemoteStorageError) as failed:
                read_aux_state(down, needed.value.spec)
            assert failed.value.retriable
            assert follower.log.log_end_offset == 0 and follower.log.log_start_offset == 0
    finally:
        down.close()
        follower.close()


def test_a_follower_whose_metadata_lags_waits_for_it(tmp_path, tiered_leader, uploads, reader) -> None:
    stale = RemoteLog(tuple(uploads.segments[:1]), 0)
    follower = new_follower(tmp_path, stale)
    try:
        reply = leader_reply(tiered_leader, follower)
        assert reply.error == ErrorCode.OFFSET_OUT_OF_RANGE
        assert follower.apply_fetched(0, reply) == 0
        assert follower.log.log_end_offset == 0, "restarted without the state below the leader's start"
        follower.set_remote(uploads.remote)  # the records arrive
        assert catch_up(tiered_leader, follower, reader) == 1
    finally:
        follower.close()


def test_restart_from_remote_changes_nothing_once_the_leadership_moved(tmp_path, tiered_leader, uploads,
                                                                      reader) -> None:
    follower = new_follower(tmp_path, uploads.remote)
    try:
        with pytest.raises(RemoteAuxStateNeeded) as needed:
            follower.apply_fetched(0, leader_reply(tiered_leader, follower))
        aux = read_aux_state(reader, needed.value.spec)
        follower.become_follower(assignment(1, 4))
        assert not follower.restart_from_remote(0, aux)
        assert follower.log.log_end_offset == 0
    finally:
        follower.close()


def test_epochs_below_the_local_start_come_back_after_the_checkpoint_is_lost(tmp_path, uploads) -> None:
    directory = tmp_path / "leader" / "t-0"
    leader = Partition("t", 0, directory, TIERED, 0, 1, FakeManager(), topic_id=TOPIC_ID)
    leader.become_leader(assignment(0, 1), set(), 10_000)
    fill_tiered_leader(leader, uploads)
    entries = leader.log.epoch_cache.entries()
    assert entries[0][1] < leader.log.log_start_offset
    leader.close()
    (directory / EPOCH_FILE).unlink()
    again = Partition("t", 0, directory, TIERED, 0, 1, FakeManager(), topic_id=TOPIC_ID)
    try:
        rebuilt = again.log.epoch_cache.entries()
        assert rebuilt[0][1] >= again.log.log_start_offset  # only the local segments' epochs
        again.set_remote(uploads.remote)
        assert again.log.epoch_cache.entries() == entries
        assert LeaderEpochCache(directory).load()
        again.set_remote(uploads.remote)  # a later image changes nothing
        assert again.log.epoch_cache.entries() == entries
    finally:
        again.close()


def test_an_unclean_leader_behind_the_remote_end_starts_past_it(tmp_path, tiered_leader, uploads) -> None:
    remote = uploads.remote
    behind = new_follower(tmp_path, remote, name="behind")  # never fetched: its log ends at 0
    try:
        behind.become_leader(assignment(2, 5, isr=(2,)), set(), 10_000)
        end = remote.end_offset
        assert behind.log.log_start_offset == behind.log.log_end_offset == end
        assert behind.log.epoch_cache.entries() == [tuple(e) for e in remote_epochs(remote, end)]
        assert behind.high_watermark >= end
        produce(behind, build_batch([NewRecord(b"after")]))
        assert behind.log.log_end_offset == end + 1  # no offset below the remote end handed out again
        assert behind.log.epoch_cache.entries()[-1] == (5, end)
        assert behind.transactions.ongoing == {o.producer_id: o.first_offset
                                               for o in remote.segments[-1].open_transactions}
    finally:
        behind.close()


def seg(base: int, end: int, *epochs: tuple[int, int]) -> RemoteSegment:
    return RemoteSegment(base, end, 1, 1, 0, LeaderEpoch(epochs[-1][0]), BrokerId(0),
                         tuple(EpochStart(LeaderEpoch(e), o) for e, o in epochs))


@pytest.mark.parametrize(("remote", "start", "kind"), [
    (None, 10, RestartKind.WAIT),  # no remote log known here yet
    (RemoteLog((seg(0, 10, (1, 0)),), 0), 20, RestartKind.WAIT),  # the image lags the leader's
    (RemoteLog((seg(0, 10, (1, 0)), seg(10, 20, (1, 10))), 0), 15, RestartKind.WAIT),  # not a boundary
    (RemoteLog((seg(0, 10, (1, 0)),), 0), 10, RestartKind.REMOTE),
    (RemoteLog((seg(0, 10, (1, 0)), seg(10, 20, (2, 12))), 0), 10, RestartKind.REMOTE),
    (RemoteLog((seg(5, 10, (1, 5)),), 5), 5, RestartKind.EMPTY),  # the whole log starts there
    (RemoteLog((seg(5, 10, (1, 5)),), 5), 3, RestartKind.EMPTY),  # the leader keeps more than remote
    (RemoteLog((), 8), 8, RestartKind.EMPTY),
])
def test_plan_restart(remote, start, kind) -> None:
    plan = plan_restart(remote, start)
    assert plan.kind is kind, plan.reason
    assert (plan.segment is not None) == (kind is RestartKind.REMOTE)


def test_remote_epochs_keep_each_epoch_once_at_its_first_offset() -> None:
    remote = RemoteLog((seg(0, 10, (1, 0), (2, 4)), seg(10, 20, (2, 10), (4, 15)), seg(20, 30, (5, 20))), 0)
    assert remote_epochs(remote, 20) == [(1, 0), (2, 4), (4, 15)]
    assert remote_epochs(remote, 30)[-1] == (5, 20)
    assert remote_epochs(remote, 19) == [(1, 0), (2, 4)]


def test_an_aux_state_of_another_offset_is_refused(tmp_path, tiered_leader, uploads, reader) -> None:
    first, second = uploads.segments[0], uploads.segments[1]
    spec = AuxStateSpec(TOPIC_ID, 0, 0, second.end_offset, first, uploads.remote)  # the wrong segment's meta
    with pytest.raises(Exception, match="ends at"):
        read_aux_state(reader, spec)


@pytest.mark.parametrize(("cache", "entries", "expected"), [
    ([(3, 50)], [(1, 0), (2, 20)], [(1, 0), (2, 20), (3, 50)]),
    ([(2, 50)], [(1, 0), (2, 20)], [(1, 0), (2, 20)]),  # the same epoch began lower
    ([(2, 50)], [(1, 0), (2, 20), (3, 40)], [(1, 0), (2, 20)]),  # a newer epoch below is ignored
    ([(1, 0), (3, 50)], [(1, 0), (2, 20)], [(1, 0), (3, 50)]),  # nothing below the first known start
    ([], [(1, 0), (2, 20)], [(1, 0), (2, 20)]),
])
def test_epoch_cache_prepend(tmp_path, cache, entries, expected) -> None:
    c = LeaderEpochCache(tmp_path)
    for epoch, start in cache:
        c.assign(epoch, start)
    assert c.prepend(entries) == (cache != expected)
    assert c.entries() == expected
