"""Where the transactional producer sends its coordinator calls (kanal.clients.transactions): the
transaction coordinator and a group's coordinator are looked up once and kept, and looked up again only
after a failure that says the coordinator moved."""

from __future__ import annotations

from collections import Counter

from kanal.clients.transactions import TransactionManager
from kanal.v1 import broker_pb2
from kanal.v1.error import ErrorCode


class FakeCoordinators:
    """ClusterMetadata's two methods TransactionManager uses: FindCoordinator answers from `where`
    (key -> endpoint), and each endpoint's stub answers the transaction calls, refusing the next call
    with a scripted code once."""

    def __init__(self, where: dict[str, str]) -> None:
        self.where = where
        self.found: Counter[str] = Counter()
        self.calls: list[tuple[str, str]] = []  # (endpoint, method)
        self.refuse_next: dict[str, ErrorCode] = {}  # method -> code of its next reply
        self.requests: list[broker_pb2.AddPartitionsToTxnRequest] = []
        self.knows_group_ids = True  # False: a broker from before AddPartitionsToTxn's group_ids

    def find_coordinator(self, key: str, key_type: int,
                         timeout_s: float) -> broker_pb2.FindCoordinatorResponse:
        self.found[key] += 1
        return broker_pb2.FindCoordinatorResponse(endpoint=self.where[key])

    def stub(self, endpoint: str) -> _Stub:
        return _Stub(self, endpoint)


class _Stub:
    def __init__(self, fake: FakeCoordinators, endpoint: str) -> None:
        self.fake, self.endpoint = fake, endpoint

    def _answer(self, method: str, reply):
        self.fake.calls.append((self.endpoint, method))
        code = self.fake.refuse_next.pop(method, None)
        if code is not None:
            reply.error, reply.error_message = code, "scripted"
        return reply

    def InitProducerId(self, request, timeout):
        reply = broker_pb2.InitProducerIdResponse(producer_id=7, producer_epoch=0)
        return self._answer("InitProducerId", reply)

    def AddPartitionsToTxn(self, request, timeout):
        self.fake.requests.append(request)
        reply = broker_pb2.AddPartitionsToTxnResponse()
        for topic in request.topics:
            for p in topic.partitions:
                reply.results.add(topic=topic.topic, partition=p)
        if self.fake.knows_group_ids:
            reply.group_ids.extend(request.group_ids)
        return self._answer("AddPartitionsToTxn", reply)

    def AddOffsetsToTxn(self, request, timeout):
        return self._answer("AddOffsetsToTxn", broker_pb2.AddOffsetsToTxnResponse())

    def TxnOffsetCommit(self, request, timeout):
        reply = broker_pb2.TxnOffsetCommitResponse()
        for topic in request.topics:
            for pc in topic.partitions:
                reply.results.add(topic=topic.topic, partition=pc.partition)
        return self._answer("TxnOffsetCommit", reply)

    def EndTxn(self, request, timeout):
        return self._answer("EndTxn", broker_pb2.EndTxnResponse())


def manager(fake: FakeCoordinators) -> TransactionManager:
    txn = TransactionManager(fake, "tid", 60_000, request_timeout_ms=1_000,  # type: ignore[arg-type]
                             max_block_ms=5_000, retry_backoff_ms=10)
    txn.init()
    return txn


def test_a_groups_coordinator_is_looked_up_once_for_every_transaction():
    fake = FakeCoordinators({"tid": "txn:1", "positions": "group:2"})
    txn = manager(fake)
    for offset in (10, 20, 30):
        txn.begin()
        txn.send_offsets({("t", 0): offset}, "positions")
        txn.end(commit=True)
    assert fake.found == {"tid": 1, "positions": 1}
    assert [c for c in fake.calls if c[1] == "TxnOffsetCommit"] == [("group:2", "TxnOffsetCommit")] * 3


def test_a_group_coordinator_that_moved_is_looked_up_again():
    fake = FakeCoordinators({"tid": "txn:1", "positions": "group:2"})
    txn = manager(fake)
    txn.begin()
    txn.send_offsets({("t", 0): 10}, "positions")
    txn.end(commit=True)
    fake.where["positions"] = "group:3"
    fake.refuse_next["TxnOffsetCommit"] = ErrorCode.NOT_COORDINATOR
    txn.begin()
    txn.send_offsets({("t", 0): 20}, "positions")  # refused at group:2, retried at group:3
    txn.end(commit=True)
    assert fake.found == {"tid": 1, "positions": 2}
    assert [c for c in fake.calls if c[1] == "TxnOffsetCommit"] == [
        ("group:2", "TxnOffsetCommit"), ("group:2", "TxnOffsetCommit"), ("group:3", "TxnOffsetCommit")]
    # The transaction coordinator did not move: it is kept.
    assert {c[0] for c in fake.calls if c[1] in ("AddPartitionsToTxn", "EndTxn")} == {"txn:1"}


def added(request: broker_pb2.AddPartitionsToTxnRequest) -> tuple[list[tuple[str, int]], list[str]]:
    return [(t.topic, p) for t in request.topics for p in t.partitions], list(request.group_ids)


def test_a_group_joins_with_the_buffered_partitions_in_one_add_and_then_with_the_next_first_add():
    """The offsets partition of a group joins in AddPartitionsToTxn with the partitions still buffered (no
    AddOffsetsToTxn); the next transaction's first add names that group unasked, so its send_offsets is
    only the TxnOffsetCommit; a transaction after one without offsets names no group."""
    fake = FakeCoordinators({"tid": "txn:1", "positions": "group:2"})
    txn = manager(fake)
    txn.begin()
    txn.join_group("positions", [("out", 0), ("out", 1)])
    txn.add_partitions([("out", 0)])  # the sender: already added, no call
    txn.send_offsets({("in", 0): 10}, "positions")
    txn.end(commit=True)
    assert [added(r) for r in fake.requests] == [([("out", 0), ("out", 1)], ["positions"])]
    assert "AddOffsetsToTxn" not in {c[1] for c in fake.calls}

    txn.begin()
    txn.add_partitions([("out", 2)])
    txn.send_offsets({("in", 0): 20}, "positions")
    txn.end(commit=True)
    assert added(fake.requests[-1]) == ([("out", 2)], ["positions"])
    assert len(fake.requests) == 2

    txn.begin()
    txn.add_partitions([("out", 0)])  # no offsets in this one
    txn.end(commit=True)
    txn.begin()
    txn.add_partitions([("out", 0)])
    txn.end(commit=True)
    assert added(fake.requests[-1]) == ([("out", 0)], [])


def test_a_broker_that_does_not_name_the_group_gets_add_offsets_to_txn():
    fake = FakeCoordinators({"tid": "txn:1", "positions": "group:2"})
    fake.knows_group_ids = False
    txn = manager(fake)
    txn.begin()
    txn.send_offsets({("t", 0): 10}, "positions")
    txn.end(commit=True)
    assert [c[1] for c in fake.calls] == ["InitProducerId", "AddPartitionsToTxn", "AddOffsetsToTxn",
                                          "TxnOffsetCommit", "EndTxn"]
