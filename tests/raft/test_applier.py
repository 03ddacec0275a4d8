"""Applier: committed entries applied in order, made durable in groups, reported after the fsync."""

from __future__ import annotations

import threading

from kanal.raft.applier import Applier
from kanal.raft.command import Verdict
from kanal.raft.metadata_store import MetadataStore
from kanal.v1 import metadata_pb2


def test_entries_are_applied_in_order_and_reported_only_when_durable(tmp_path, log_factory, chain):
    store = MetadataStore(log_factory(tmp_path / "m"))
    reported = []

    def on_applied(entries):
        # Reported after the group's fsync: the durable end already covers every reported entry.
        assert store.durable_end_offset >= entries[-1].end_offset
        reported.extend(entries)

    applier = Applier(store, on_applied, lambda reason, exc: None, queue_entries_max=4, group_entries_max=3)
    applier.start()
    commands = [chain.noop(1)] + [chain.register(b, 1) for b in range(1, 10)]
    for c in commands:
        applier.submit(c)
    assert applier.drain(30)
    applier.stop()
    assert [e.end_offset for e in reported] == list(range(1, 11))
    assert all(e.verdict is Verdict.APPLY for e in reported)
    assert store.copy_image() == (chain.image, chain.last)


class StopRecorder:
    """Stands in for stop_process: records each reason, and is set once called."""

    def __init__(self) -> None:
        self.reasons: list[str] = []
        self.called = threading.Event()

    def __call__(self, reason: str, exc: BaseException) -> None:
        self.reasons.append(reason)
        self.called.set()


def test_a_failure_while_applying_is_fatal(tmp_path, log_factory, chain):
    store = MetadataStore(log_factory(tmp_path / "m"))
    stop_process = StopRecorder()
    applier = Applier(store, lambda entries: None, stop_process)
    applier.start()
    applier.submit(chain.noop(1))
    applier.submit(chain.command(
        [chain.stamp(remove_topic=metadata_pb2.RemoveTopicRecord(topic_id="nope"))], 1, mirror=False
    ))
    assert stop_process.called.wait(30)
    assert "applying a committed metadata entry failed" in stop_process.reasons[0]


def test_a_failure_while_completing_writes_is_fatal(tmp_path, log_factory, chain):
    """The store is intact, but the active controller's proposals may be half settled: stalled for good."""
    store = MetadataStore(log_factory(tmp_path / "m"))
    stop_process = StopRecorder()

    def on_applied(entries):
        raise RuntimeError("a bug in settling proposals")

    applier = Applier(store, on_applied, stop_process)
    applier.start()
    applier.submit(chain.noop(1))
    assert stop_process.called.wait(30)
    assert "completing writes after 1 applied entries failed" in stop_process.reasons[0]
    assert store.copy_image() == (chain.image, chain.last)
