"""The transaction coordinator on its runtime (coordinator_runtime.py), over a real replica manager without
sockets (tests/broker/coordinator_broker.py): it fails as the group coordinator does (a bug in its timer
or in a marker job stops the process, exit 70 for real), reads the one injected clock, and its load
treats an undecodable record as a damaged log. Time is a fake clock the tests move; waits have deadlines
and wait for threads, never for time."""

from __future__ import annotations

import inspect
import logging

import pytest

from kanal.broker.group_coordinator import GroupCoordinator
from kanal.broker.transaction import TxnState
from kanal.broker.transaction_coordinator import TransactionCoordinator
from kanal.server.clock import PROCESS_CLOCK
from kanal.server.fatal import stop_process
from kanal.v1 import admin_pb2, broker_pb2
from kanal.v1.batch import NewRecord, build_batch
from kanal.v1.error import ErrorCode, KanalError
from kanal.v1.topic_name import CONSUMER_OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC
from tests.broker.coordinator_broker import (
    SESSION_TIMEOUT_MS,
    TXN_TIMEOUT_MS,
    WAIT_S,
    InjectedBug,
    check_a_timer_bug_exits_a_real_process_with_70,
    check_a_timer_bug_stops_the_process,
    check_the_ticker_thread_stops_the_process_and_ends,
)
from tests.harness.waiting import wait_until

RUNTIME = "kanal.broker.coordinator_runtime"


def test_an_unexpected_error_in_the_transaction_timer_stops_the_process(coordinators):
    """The drift the runtime removed: this ticker caught only KanalError, so a bug ended its thread in
    silence and the broker served on with no transaction timeouts. Now it fails as the group
    coordinator's does (test_group_coordinator.py runs the same checks)."""
    check_a_timer_bug_stops_the_process(coordinators, "transaction", "transaction timeouts")


def test_the_transaction_ticker_thread_stops_the_process_and_ends(coordinators):
    check_the_ticker_thread_stops_the_process_and_ends(coordinators, "transaction")


def test_an_unexpected_error_in_the_transaction_timer_exits_the_process_with_70(tmp_path):
    check_a_timer_bug_exits_a_real_process_with_70("transaction", tmp_path)


def test_both_coordinators_read_one_injected_clock(coordinators):
    """One fake clock, moved by the test: a group member's session expires and a transaction's timeout
    aborts it, with no sleeping and no wall clock."""
    coordinators.stable_member()
    coordinators.open_transaction()
    coordinators.clock.advance(min(SESSION_TIMEOUT_MS, TXN_TIMEOUT_MS) - 1)
    coordinators.groups.tick()
    coordinators.transactions.tick()
    assert coordinators.group_state() == ("Stable", 1)
    assert coordinators.transaction() == (TxnState.ONGOING, 0)

    coordinators.clock.advance(max(SESSION_TIMEOUT_MS, TXN_TIMEOUT_MS))
    coordinators.groups.tick()
    coordinators.transactions.tick()
    assert coordinators.group_state() == ("Empty", 0), "the member's session expired by the injected clock"
    state, epoch = coordinators.transaction()
    assert state in (TxnState.PREPARE_ABORT, TxnState.COMPLETE_ABORT) and epoch == 1, (
        "the transaction timed out by the same clock: aborted, its producer fenced")
    wait_until(lambda: coordinators.transaction()[0] == TxnState.COMPLETE_ABORT, WAIT_S,
               "the abort's markers")
    assert coordinators.stop.calls == []


def test_both_coordinators_default_to_the_process_clock_and_the_real_stop():
    for coordinator in (GroupCoordinator, TransactionCoordinator):
        parameters = inspect.signature(coordinator).parameters
        assert parameters["clock"].default is PROCESS_CLOCK, coordinator
        assert parameters["stop_process"].default is stop_process, coordinator


def test_a_bug_in_a_marker_job_stops_the_process(coordinators):
    """The marker write used to turn any exception into an INFO line and try again every round."""
    producer = coordinators.open_transaction()
    coordinators.replicas.markers_fault = InjectedBug("injected into WriteTxnMarkers")
    ended = coordinators.transactions.end_txn(broker_pb2.EndTxnRequest(producer=producer, commit=True))
    assert ended.error == ErrorCode.NONE, "answered once PREPARE_COMMIT is written, before the markers"
    assert coordinators.stop.called.wait(WAIT_S), "the marker job's bug did not stop the process"
    [(reason, exc)] = coordinators.stop.calls
    assert isinstance(exc, InjectedBug) and "marker job of 'tx'" in reason, reason


def test_a_refused_marker_write_is_a_warning_saying_why_and_the_job_tries_again(coordinators, caplog):
    producer = coordinators.open_transaction()
    coordinators.replicas.markers_fault = KanalError(ErrorCode.NOT_ENOUGH_REPLICAS, "injected: ISR too small")
    with caplog.at_level(logging.WARNING, logger="kanal.broker.transaction_coordinator"):
        ended = coordinators.transactions.end_txn(broker_pb2.EndTxnRequest(producer=producer, commit=True))
        assert ended.error == ErrorCode.NONE, ended
        wait_until(lambda: any("NOT_ENOUGH_REPLICAS" in r.getMessage() and r.levelno == logging.WARNING
                               for r in caplog.records), WAIT_S, "a WARNING saying why")
        assert coordinators.transaction()[0] == TxnState.PREPARE_COMMIT
    coordinators.replicas.markers_fault = None
    wait_until(lambda: coordinators.transaction()[0] == TxnState.COMPLETE_COMMIT, WAIT_S,
               "the markers, retried")
    assert coordinators.stop.calls == []


def test_a_transaction_state_that_does_not_decode_fails_the_load_as_a_damaged_log(coordinators, caplog):
    """Never skipped (a lost PREPARE state would leave its markers unwritten): the load fails at ERROR
    with CORRUPT_MESSAGE and its traceback, is retried after its backoff, and the process goes on."""
    request = broker_pb2.ProduceRequest(acks=-1, timeout_ms=5_000)
    request.topics.add(topic=TRANSACTION_STATE_TOPIC).partitions.add(
        partition=0,
        batches=[build_batch([NewRecord(b"\xff not a state", b"tx", coordinators.clock.now_ms())])])
    assert coordinators.rm.produce(request, internal=True).topics[0].partitions[0].error == ErrorCode.NONE
    coordinators.transactions.close()
    # A coordinator that loads what the last one left: the next leader of the partition.
    coordinators.transactions = TransactionCoordinator(
        broker_id=0, replicas=coordinators.replicas, image=lambda: coordinators.image,
        groups=coordinators.groups,
        new_producer_id=lambda: 1, partitions=1, replication_factor=1, write_timeout_ms=5_000,
        timeout_ms_max=900_000, clock=coordinators.clock, stop_process=coordinators.stop)

    def errors() -> list[logging.LogRecord]:
        return [r for r in caplog.records if r.levelno == logging.ERROR]

    with caplog.at_level(logging.WARNING, logger=RUNTIME):
        coordinators.transactions.reconcile(coordinators.image)
        wait_until(lambda: len(errors()) == 1, WAIT_S, "the failed load")
        with pytest.raises(KanalError) as err:
            coordinators.transactions.init_producer_id(
                broker_pb2.InitProducerIdRequest(transactional_id="tx", transaction_timeout_ms=1_000))
        assert err.value.code == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        assert "1 tries failed" in err.value.message
        coordinators.clock.advance(100)  # the first retry's backoff
        coordinators.transactions.tick()
        wait_until(lambda: len(errors()) == 2, WAIT_S, "the retried load")
    for error in errors():
        assert "CORRUPT_MESSAGE" in error.getMessage() and "does not decode" in error.getMessage()
        assert error.exc_info is not None
    assert coordinators.stop.calls == []


class RecordingControllers:
    """The controller client's one call the coordinators make: CreateTopics, recorded and accepted."""

    def __init__(self) -> None:
        self.created: list[admin_pb2.CreatableTopic] = []

    def call(self, method: str, request):
        assert method == "CreateTopics"
        self.created.extend(request.topics)
        return admin_pb2.CreateTopicsResponse(results=[admin_pb2.CreateTopicResult(name=t.name)
                                                       for t in request.topics])


def test_add_offsets_on_a_cluster_without_offsets_topic_creates_it_and_asks_for_a_retry(coordinators):
    """A producer may send a group's offsets before any consumer of that group looked its coordinator
    up (a fresh cluster, a mirror's positions group): AddOffsetsToTxn creates __consumer_offsets as
    FindCoordinator would, answers the retriable COORDINATOR_NOT_AVAILABLE, and works once the topic
    exists. Before, it answered that code for ever and nothing created the topic."""
    producer = coordinators.open_transaction()
    controllers = RecordingControllers()
    coordinators.groups._controllers = controllers
    offsets_topic = coordinators.image.topics.pop(CONSUMER_OFFSETS_TOPIC)
    request = broker_pb2.AddOffsetsToTxnRequest(producer=producer, group_id="fresh-group")
    with pytest.raises(KanalError) as err:
        coordinators.transactions.add_offsets(request)
    assert err.value.code == ErrorCode.COORDINATOR_NOT_AVAILABLE
    assert [(t.name, t.partitions, t.replication_factor) for t in controllers.created] == [
        (CONSUMER_OFFSETS_TOPIC, 1, 1)]
    assert {(c.key, c.value) for c in controllers.created[0].configs} == {("cleanup.policy", "compact")}
    assert coordinators.transaction()[0] == TxnState.ONGOING  # nothing about the transaction changed
    coordinators.image.topics[CONSUMER_OFFSETS_TOPIC] = offsets_topic  # the controller created it
    assert coordinators.transactions.add_offsets(request).error == ErrorCode.NONE


def test_add_partitions_with_group_ids_adds_each_groups_offsets_partition_in_the_same_write(coordinators):
    """AddPartitionsToTxn's `group_ids` does AddOffsetsToTxn's work in the same call: the group's
    __consumer_offsets partition joins with the partitions (so its markers will be written there), and the
    reply names the group; a call that fails names none."""
    producer = coordinators.open_transaction()
    request = broker_pb2.AddPartitionsToTxnRequest(producer=producer, group_ids=["positions"])
    request.topics.add(topic="t", partitions=[0])
    reply = coordinators.transactions.add_partitions(request)
    assert reply.error == ErrorCode.NONE and list(reply.group_ids) == ["positions"], reply
    offsets_partition = coordinators.groups.offsets_partition_creating("positions")
    described = coordinators.transactions.describe(
        broker_pb2.DescribeTransactionsRequest(transactional_ids=["tx"])).transactions[0].state
    assert {(p.topic, p.partition) for p in described.partitions} == {
        ("t", 0), (CONSUMER_OFFSETS_TOPIC, offsets_partition)}

    stale = broker_pb2.TxnProducer(transactional_id="tx", producer_id=producer.producer_id,
                                   producer_epoch=producer.producer_epoch + 1)
    refused = coordinators.transactions.add_partitions(
        broker_pb2.AddPartitionsToTxnRequest(producer=stale, group_ids=["other"]))
    assert refused.error != ErrorCode.NONE and not refused.group_ids
