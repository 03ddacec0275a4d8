"""Every controller loses power at once, mid-load: no acknowledged metadata write is lost, none exits 70.

Issue 18, finding 1. Each controller's data directory is its own power-loss filesystem
(deploy/lazyfs.py): when the power goes, every write that controller did not fsync is dropped
(SIGKILL alone would keep the page cache and prove nothing). Writers send AlterClientQuotas calls (one
new client-id each) to the active controller and record which were acknowledged; the power of all three
is cut while they run; the controllers restart on what survived. Then: no controller exits, a leader is
elected and takes new writes, and every acknowledged write is in every controller's metadata (its read
RPC and its metadata log, replayed). With pysyncobj's own journal (no fsync) this fails: the journals
come back empty or unreadable, and acknowledged writes are gone or the controllers exit 70.
"""

from __future__ import annotations

import threading

import grpc
import pytest

from kanal.v1 import admin_pb2

pytestmark = pytest.mark.cluster

WRITERS = 3
ACKED_BEFORE_CUT_MIN = 30


def _quota_write(name: str, value: int) -> admin_pb2.AlterClientQuotasRequest:
    return admin_pb2.AlterClientQuotasRequest(
        entries=[
            admin_pb2.AlterClientQuotasRequest.Entry(
                entity=admin_pb2.QuotaEntity(entity_type="client-id", entity_name=name),
                values=[admin_pb2.QuotaValue(key="producer_byte_rate", value=value)],
            )
        ]
    )


class Writers:
    """Threads that write one new quota after another and record what was acknowledged."""

    def __init__(self, q) -> None:
        self.q = q
        self.acked: set[str] = set()
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self._run, args=(w,), daemon=True) for w in range(WRITERS)]

    def _run(self, writer: int) -> None:
        n = 0
        while not self.stop.is_set():
            name = f"w{writer}-{n}"
            n += 1
            try:
                active = self.q.active_id()
                if active is None:
                    continue
                reply = self.q.stub(active).AlterClientQuotas(_quota_write(name, 1000 + n), timeout=5)
            except grpc.RpcError:
                continue  # not acknowledged: its fate is unknown, and it is not checked
            if all(r.error == 0 for r in reply.results):
                with self.lock:
                    self.acked.add(name)

    def count(self) -> int:
        with self.lock:
            return len(self.acked)


def _quota_names(q, i: int) -> set[str]:
    reply = q.stub(i).DescribeClientQuotas(admin_pb2.DescribeClientQuotasRequest(), timeout=10)
    return {e.entity.entity_name for e in reply.entries}


def test_a_power_cut_of_every_controller_mid_load_loses_no_acknowledged_write(
    power_loss_fs, quorum_factory, replay_log, wait
):
    q = quorum_factory(start=False)
    # Each controller's data directory is its own disk.
    disks = {i: power_loss_fs(f"controller-{i}-disk", mountpoint=q.data_dir(i)) for i in q.ids}
    q.start_all()
    q.wait_active(60)

    writers = Writers(q)
    for t in writers.threads:
        t.start()
    try:
        wait(
            lambda: writers.count() >= ACKED_BEFORE_CUT_MIN,
            120,
            f"{ACKED_BEFORE_CUT_MIN} acknowledged writes",
        )
        # The power goes: every controller dies at once, then each disk loses what was not fsynced.
        for i in q.ids:
            q.kill(i)
        dropped = {i: disks[i].cut_power()["dropped_ops"] for i in q.ids}
    finally:
        writers.stop.set()
        for t in writers.threads:
            t.join(30)
    acked = set(writers.acked)
    print(f"acknowledged before the cut: {len(acked)}; unsynced operations dropped per disk: {dropped}")

    for i in q.ids:
        disks[i].mount()
    q.start_all()
    active = q.wait_active(90)
    reply = q.stub(active).AlterClientQuotas(_quota_write("after-the-cut", 1), timeout=30)
    assert all(r.error == 0 for r in reply.results), reply
    end = q.end_offset(active)
    for i in q.ids:
        wait(lambda i=i: q.end_offset(i) >= end, 60, f"controller {i} caught up")
        assert q.alive(i), f"controller {i} exited: {q.tail(i)}"
        names = _quota_names(q, i)
        missing = acked - names
        assert not missing, f"controller {i} lost {len(missing)} acknowledged writes: {sorted(missing)[:10]}"
        assert "after-the-cut" in names
        image = replay_log(q.fetch_all(i))  # what brokers rebuild from the served metadata log
        assert acked <= {name for _, name in image.client_quotas}
    for i in q.ids:
        assert q.stop(i) == 0, f"controller {i} did not stop cleanly: {q.tail(i)}"
