"""Transactions on a real cluster (3 controllers, 3 brokers; issue 22): commit and abort visibility under
read_committed, a fenced zombie, a transaction aborted by its timeout, and out-of-order or bad calls that
get Kafka's errors and change nothing."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import grpc
import pytest

from kanal.clients.cluster_metadata import ClusterMetadata
from kanal.clients.consumer import Consumer, ConsumerConfig
from kanal.clients.producer import Producer
from kanal.clients.producer_config import ProducerConfig
from kanal.clients.transactions import TransactionFatalError
from kanal.v1 import broker_pb2
from kanal.v1.error import ErrorCode, KanalError

from .conftest import broker_node, create_topic, partition_info, wait_until

pytestmark = pytest.mark.cluster


def txn_producer(cluster, tid: str, **kw) -> Producer:
    producer = Producer(ProducerConfig(cluster.bootstrap, transactional_id=tid, linger_ms=0, **kw))
    producer.init_transactions()
    return producer


def read_all(cluster, topic: str, partitions: int, isolation: str, expected: int | None = None,
             timeout_s: float = 30) -> list[bytes]:
    """Every record of the topic from the start, at `isolation`, until `expected` arrived (or up to the
    visible end when None)."""
    consumer = Consumer(
        ConsumerConfig(
            cluster.bootstrap, auto_offset_reset="earliest", isolation_level=isolation, fetch_max_wait_ms=100
        )
    )
    try:
        consumer.assign([(topic, p) for p in range(partitions)])
        ends = visible_ends(cluster, topic, partitions, isolation)
        values: list[bytes] = []

        def done():
            values.extend(r.value for r in consumer.poll(0.2))
            if expected is not None:
                return len(values) >= expected
            return all(consumer.position((topic, p)) >= ends[p] for p in range(partitions))

        wait_until(done, timeout_s, f"{expected} records of {topic} at {isolation}")
        values.extend(r.value for r in consumer.poll(0.2))  # anything more would be a bug
        return values
    finally:
        consumer.close()


def visible_ends(cluster, topic: str, partitions: int, isolation: str) -> list[int]:
    md = ClusterMetadata(cluster.bootstrap)
    try:
        md.refresh([topic])
        ends = []
        for p in range(partitions):
            request = broker_pb2.ListOffsetsRequest(
                isolation_level=(broker_pb2.READ_COMMITTED if isolation == "read_committed"
                                 else broker_pb2.READ_UNCOMMITTED))
            request.topics.add(topic=topic).partitions.add(partition=p, timestamp_ms=-1)
            answer = (
                md.stub(md.leader_endpoint(topic, p)).ListOffsets(request, timeout=10).topics[0].partitions[0]
            )
            assert answer.error == ErrorCode.NONE
            ends.append(answer.offset)
        return ends
    finally:
        md.close()


def coordinator_call(cluster, tid: str, method: str, request):
    md = ClusterMetadata(cluster.bootstrap)
    try:
        def found():
            reply = md.any_stub().FindCoordinator(broker_pb2.FindCoordinatorRequest(
                key=tid, key_type=broker_pb2.COORDINATOR_TRANSACTION), timeout=10)
            return reply.endpoint if reply.error == ErrorCode.NONE else None

        endpoint = wait_until(found, 30, f"the coordinator of {tid}")
        return getattr(md.stub(endpoint), method)(request, timeout=10)
    finally:
        md.close()


def test_committed_records_are_visible_aborted_ones_never(cluster):
    create_topic(cluster, "txn-vis", partitions=2)
    producer = txn_producer(cluster, "vis")
    try:
        producer.begin_transaction()
        for i in range(10):
            producer.produce("txn-vis", f"c1-{i}".encode(), partition=i % 2)
        producer.commit_transaction()
        producer.begin_transaction()
        for i in range(10):
            producer.produce("txn-vis", f"ab-{i}".encode(), partition=i % 2)
        producer.flush()
        stable, high = visible_ends(cluster, "txn-vis", 2, "read_committed"), visible_ends(
            cluster, "txn-vis", 2, "read_uncommitted")
        assert all(s < h for s, h in zip(stable, high)), "the open transaction holds the LSO below the HW"
        producer.abort_transaction()
        producer.begin_transaction()
        for i in range(5):
            producer.produce("txn-vis", f"c2-{i}".encode(), partition=i % 2)
        producer.commit_transaction()
    finally:
        producer.close()
    committed = read_all(cluster, "txn-vis", 2, "read_committed", expected=15)
    assert sorted(committed) == sorted(
        [f"c1-{i}".encode() for i in range(10)] + [f"c2-{i}".encode() for i in range(5)]
    )
    uncommitted = read_all(cluster, "txn-vis", 2, "read_uncommitted", expected=25)
    assert len(uncommitted) == 25, "read_uncommitted shows aborted records too, never markers"
    assert visible_ends(cluster, "txn-vis", 2, "read_committed") == visible_ends(cluster, "txn-vis", 2,
                                                                                 "read_uncommitted")


def test_a_zombie_is_fenced_and_its_open_transaction_aborted(cluster):
    create_topic(cluster, "txn-zombie")
    zombie = txn_producer(cluster, "zombie")
    successor = None
    try:
        zombie.begin_transaction()
        zombie.produce("txn-zombie", b"from-the-zombie")
        zombie.flush()
        successor = txn_producer(cluster, "zombie")  # bumps the epoch, aborts the zombie's transaction
        with pytest.raises(TransactionFatalError) as info:
            zombie.commit_transaction()
        assert info.value.code in (ErrorCode.PRODUCER_FENCED, ErrorCode.INVALID_PRODUCER_EPOCH)
        successor.begin_transaction()
        successor.produce("txn-zombie", b"from-the-successor")
        successor.commit_transaction()
    finally:
        zombie.close()
        if successor is not None:
            successor.close()
    assert read_all(cluster, "txn-zombie", 1, "read_committed", expected=1) == [b"from-the-successor"]


def test_a_transaction_past_its_timeout_is_aborted_and_the_lso_moves_on(cluster):
    create_topic(cluster, "txn-timeout")
    producer = txn_producer(cluster, "slow", transaction_timeout_ms=1000)
    try:
        producer.begin_transaction()
        producer.produce("txn-timeout", b"never-committed")
        producer.flush()
        wait_until(lambda: visible_ends(cluster, "txn-timeout", 1, "read_committed") == visible_ends(
            cluster, "txn-timeout", 1, "read_uncommitted"), 30, "the LSO to pass the aborted transaction")
        with pytest.raises(TransactionFatalError):
            producer.commit_transaction()  # its epoch was bumped by the abort
    finally:
        producer.close()
    assert read_all(cluster, "txn-timeout", 1, "read_committed") == []


def test_out_of_order_and_bad_calls_get_kafkas_errors_and_change_nothing(cluster):
    create_topic(cluster, "txn-bad")
    producer = txn_producer(cluster, "bad-calls")
    try:
        pid, epoch = producer._txn.producer_id, producer._txn.producer_epoch
        who = broker_pb2.TxnProducer(transactional_id="bad-calls", producer_id=pid, producer_epoch=epoch)
        state = lambda: coordinator_call(cluster, "bad-calls", "DescribeTransactions",
                                         broker_pb2.DescribeTransactionsRequest(transactional_ids=["bad-calls"]))
        before = state().transactions[0].state
        end = coordinator_call(
            cluster, "bad-calls", "EndTxn", broker_pb2.EndTxnRequest(producer=who, commit=True)
        )
        assert end.error == ErrorCode.INVALID_TXN_STATE
        add = coordinator_call(
            cluster,
            "bad-calls",
            "AddPartitionsToTxn",
            broker_pb2.AddPartitionsToTxnRequest(
                producer=who,
                topics=[
                    broker_pb2.TopicPartitions(topic="no-such-topic", partitions=[0]),
                    broker_pb2.TopicPartitions(topic="txn-bad", partitions=[0]),
                ],
            ),
        )
        assert [r.error for r in add.results] == [
            ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
            ErrorCode.INVALID_REQUEST,
        ]
        stale = broker_pb2.TxnProducer(
            transactional_id="bad-calls", producer_id=pid, producer_epoch=epoch - 1
        )
        fenced = coordinator_call(
            cluster,
            "bad-calls",
            "AddPartitionsToTxn",
            broker_pb2.AddPartitionsToTxnRequest(
                producer=stale, topics=[broker_pb2.TopicPartitions(topic="txn-bad", partitions=[0])]
            ),
        )
        assert fenced.error in (ErrorCode.PRODUCER_FENCED, ErrorCode.INVALID_PRODUCER_ID_MAPPING)
        assert state().transactions[0].state == before, "refused calls change nothing"
        with pytest.raises(KanalError) as info:
            producer.commit_transaction()
        assert info.value.code == ErrorCode.INVALID_TXN_STATE
    finally:
        producer.close()
    md = ClusterMetadata(cluster.bootstrap)
    try:
        reply = md.any_stub().InitProducerId(broker_pb2.InitProducerIdRequest(
            transactional_id="x" * 256, transaction_timeout_ms=1000), timeout=10)
        assert reply.error == ErrorCode.INVALID_REQUEST
        reply = md.any_stub().InitProducerId(broker_pb2.InitProducerIdRequest(
            transactional_id="ok", transaction_timeout_ms=10**7), timeout=10)
        assert reply.error == ErrorCode.INVALID_TRANSACTION_TIMEOUT
    finally:
        md.close()


def test_write_txn_markers_from_an_older_coordinator_epoch_is_fenced_over_raw_grpc(cluster):
    """A deposed coordinator's late WriteTxnMarkers (an older coordinator epoch than a marker the partition
    already stored for the producer id) is TRANSACTION_COORDINATOR_FENCED and stores nothing; the same
    epoch or a newer one is written. Also on the followers: after a leader change the new leader refuses
    it too (it rebuilt the epoch from the markers it replicated)."""
    create_topic(cluster, "txn-fence-markers")
    md = ClusterMetadata(cluster.bootstrap)
    pid = 987_654_321

    def markers(coordinator_epoch: int) -> broker_pb2.TxnPartitionResult:
        md.refresh(["txn-fence-markers"])
        request = broker_pb2.WriteTxnMarkersRequest(producer_id=pid, producer_epoch=0, commit=False,
                                                    coordinator_epoch=coordinator_epoch,
                                                    topics=[broker_pb2.TopicPartitions(topic="txn-fence-markers",
                                                                                       partitions=[0])])
        reply = md.stub(md.leader_endpoint("txn-fence-markers", 0)).WriteTxnMarkers(request, timeout=10)
        (result,) = reply.results
        return result

    try:
        assert markers(7).error == ErrorCode.NONE
        end = visible_ends(cluster, "txn-fence-markers", 1, "read_uncommitted")
        stale = markers(6)
        assert stale.error == ErrorCode.TRANSACTION_COORDINATOR_FENCED, stale.error_message
        assert visible_ends(cluster, "txn-fence-markers", 1, "read_uncommitted") == end, "nothing was written"
        assert markers(7).error == ErrorCode.NONE and markers(8).error == ErrorCode.NONE
        old_leader = broker_node(cluster, partition_info(cluster, "txn-fence-markers", 0).leader)
        old_leader.kill()
        try:
            wait_until(
                lambda: (
                    partition_info(cluster, "txn-fence-markers", 0).leader not in (-1, old_leader.node_id)
                ),
                60,
                "a new leader of txn-fence-markers-0",
            )

            def new_leaders_answer():
                try:
                    result = markers(7)
                except grpc.RpcError:
                    return None  # metadata still naming the dead broker: ask again
                return result if result.error != ErrorCode.NOT_LEADER_OR_FOLLOWER else None

            answer = wait_until(new_leaders_answer, 60, "the new leader's answer")
            assert answer.error == ErrorCode.TRANSACTION_COORDINATOR_FENCED, answer.error_message
        finally:
            cluster.restart(old_leader)
    finally:
        md.close()


# ---- exactly once through failures ----

PROCESSOR_SCRIPT = Path(__file__).with_name("txn_processor.py")


class Processor:
    """txn_processor.py as a process, and the events it printed."""

    def __init__(self, cluster, log_dir: Path, *args: str) -> None:
        self.log = open(log_dir / f"processor-{time.monotonic_ns()}.err", "w")  # noqa: SIM115 - closed in stop()
        self.process = subprocess.Popen(
            [sys.executable, str(PROCESSOR_SCRIPT), cluster.bootstrap, *args],
            stdout=subprocess.PIPE,
            stderr=self.log,
            text=True,
            stdin=subprocess.DEVNULL,
        )
        self.events: list[dict] = []
        self._lock = threading.Lock()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self.process.stdout:
            with self._lock:
                self.events.append(json.loads(line))

    def committed(self) -> int:
        with self._lock:
            return sum(1 for e in self.events if e["event"] == "committed")

    def aborted(self) -> list[dict]:
        with self._lock:
            return [e for e in self.events if e["event"] == "aborted"]

    def dump_stacks(self) -> str:
        """Every thread's stack (faulthandler on SIGUSR1), the last events and stderr: why it stalled."""
        path = Path(self.log.name)
        if self.process.poll() is None and not self.log.closed:
            size = path.stat().st_size
            self.process.send_signal(signal.SIGUSR1)
            deadline = time.monotonic() + 10
            while path.stat().st_size == size and time.monotonic() < deadline:
                time.sleep(0.1)  # waiting (bounded) for the dump to appear in the file
        with self._lock:
            events = self.events[-8:]
        return (f"pid {self.process.pid} rc {self.process.poll()} last events {events}\n"
                f"{path.read_text()[-12000:]}")

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=30)
        self.log.close()


def coordinator_of(cluster, tid: str) -> int:
    md = ClusterMetadata(cluster.bootstrap)
    try:
        reply = md.any_stub().FindCoordinator(broker_pb2.FindCoordinatorRequest(
            key=tid, key_type=broker_pb2.COORDINATOR_TRANSACTION), timeout=10)
        assert reply.error == ErrorCode.NONE, reply.error_message
        return reply.node_id
    finally:
        md.close()


def test_consume_transform_produce_is_exactly_once_through_sigkills(cluster, tmp_path):
    """Inputs → processor (transactions, offsets in them) → outputs, while the processor, the transaction
    coordinator's broker and an output partition's leader are SIGKILLed and restarted: every input is in
    the output exactly once under read_committed, and no record of a transaction that aborted is seen."""
    create_topic(cluster, "ctp-in", partitions=2)
    create_topic(cluster, "ctp-out", partitions=2)
    inputs = [f"in-{i:04d}".encode() for i in range(400)]
    with Producer(ProducerConfig(cluster.bootstrap, linger_ms=0)) as feeder:
        for value in inputs:
            feeder.produce("ctp-in", value, key=value)
        assert feeder.flush(60)
    group, tid = "ctp-group", "ctp-processor"
    processors = [Processor(cluster, tmp_path, "ctp-in", "ctp-out", group, tid, "proc", "0")]
    total = lambda: sum(p.committed() for p in processors)
    killed = []

    def wait_commits(count: int, timeout_s: float, what: str) -> None:
        try:
            wait_until(lambda: total() >= count, timeout_s, what)
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n" + "\n".join(p.dump_stacks() for p in processors)) from None

    try:
        wait_until(lambda: total() >= 5, 90, "the processor to commit its first transactions")
        processors[-1].kill()  # 1. the processor, mid-stream
        processors.append(Processor(cluster, tmp_path, "ctp-in", "ctp-out", group, tid, "proc", "1"))
        wait_commits(12, 90, "the restarted processor to commit")

        coordinator = broker_node(cluster, coordinator_of(cluster, tid))  # 2. the transaction coordinator
        coordinator.kill()
        killed.append(coordinator)
        wait_commits(20, 240, "commits with a new transaction coordinator")
        cluster.restart(coordinator)
        killed.remove(coordinator)

        leader = broker_node(cluster, partition_info(cluster, "ctp-out", 0).leader)  # 3. an output leader
        leader.kill()
        killed.append(leader)
        wait_commits(28, 240, "commits after the output leader died")
        cluster.restart(leader)
        killed.remove(leader)

        outputs = read_all(cluster, "ctp-out", 2, "read_committed", expected=len(inputs), timeout_s=240)
    finally:
        for p in processors:
            p.kill()
        for node in killed:  # the module's cluster goes on to the next test whole
            cluster.restart(node)
    sources = Counter(v.split(b"|")[0] for v in outputs)
    duplicated = {v: n for v, n in sources.items() if n > 1}
    assert not duplicated, f"inputs written more than once: {sorted(duplicated.items())[:5]}"
    assert set(sources) == set(inputs), f"missing: {sorted(set(inputs) - set(sources))[:5]}"
    aborted = {
        (str(run).encode(), str(e["txn"]).encode()) for run, p in enumerate(processors) for e in p.aborted()
    }
    visible_aborted = [v for v in outputs if tuple(v.split(b"|")[1:]) in aborted]
    assert not visible_aborted, f"records of aborted transactions are visible: {visible_aborted[:5]}"


def test_cli_lists_and_describes_transactions_and_consumes_read_committed(cluster):
    create_topic(cluster, "txn-cli")
    producer = txn_producer(cluster, "cli-txn")
    try:
        producer.begin_transaction()
        producer.produce("txn-cli", b"committed")
        producer.commit_transaction()
        producer.begin_transaction()
        producer.produce("txn-cli", b"open")
        producer.flush()
        kanal = [sys.executable, "-m", "kanal.deploy.cli"]
        listed = json.loads(subprocess.run([*kanal, "transactions", "list", "--bootstrap", cluster.bootstrap,
                                            "--output", "json"], capture_output=True, text=True, check=True,
                                           timeout=60).stdout)
        mine = next(t for t in listed if t["transactional_id"] == "cli-txn")
        assert mine["state"] == "TXN_ONGOING" and mine["producer_id"] == producer._txn.producer_id
        described = json.loads(subprocess.run([*kanal, "transactions", "describe", "cli-txn", "--bootstrap",
                                               cluster.bootstrap, "--output", "json"], capture_output=True,
                                              text=True, check=True, timeout=60).stdout)
        assert described["partitions"] == [["txn-cli", 0]]
        unknown = subprocess.run([*kanal, "transactions", "describe", "no-such-id", "--bootstrap",
                                  cluster.bootstrap], capture_output=True, text=True, timeout=60, check=False)
        assert unknown.returncode == 1 and "no-such-id" in unknown.stderr  # 1: failed (docs/cli.md)
        for level, expected in (
            ("read_committed", ["committed"]),
            ("read_uncommitted", ["committed", "open"]),
        ):
            out = subprocess.run(
                [
                    *kanal,
                    "consume",
                    "txn-cli",
                    "--bootstrap",
                    cluster.bootstrap,
                    "--from-beginning",
                    "--isolation-level",
                    level,
                    "--max-messages",
                    str(len(expected)),
                    "--timeout-s",
                    "20",
                ],
                capture_output=True,
                text=True,
                timeout=60,
                check=False,
            )
            assert out.stdout.split() == expected, (level, out.stdout, out.stderr)
        producer.abort_transaction()
    finally:
        producer.close()
