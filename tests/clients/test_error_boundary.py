"""The clients' error boundary (clients/error_boundary.py) against real gRPC servers: a Produce, a Fetch or
an admin call refused with a code that is not retriable (TOPIC_AUTHORIZATION_FAILED, INVALID_REQUEST)
surfaces to the caller at once with that code, after exactly one call; a retriable failure (a broker that
is starting, stopped, or not there at all) is retried within the client's timeout, succeeds when the broker
comes back, and otherwise surfaces with the last real code.

The brokers are tests/clients/scripted_broker.py: refusals leave through kanal.server.error_boundary, so
the status and trailer are what real brokers send; each call is counted on the server."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from kanal.clients.admin import Admin
from kanal.clients.consumer import Consumer, ConsumerConfig
from kanal.clients.error_boundary import retrying
from kanal.clients.producer import Producer, ProducerConfig
from kanal.clients.transactions import TransactionFatalError
from kanal.deploy.local_cluster import free_ports
from kanal.v1.error import ErrorCode, KanalError, is_retriable
from tests.harness.waiting import wait_until

from .scripted_broker import Layout, ScriptedBroker

REFUSALS = [
    KanalError(ErrorCode.TOPIC_AUTHORIZATION_FAILED, "User:bob may not WRITE orders"),
    KanalError(ErrorCode.INVALID_REQUEST, "a request this broker cannot take"),
]
STARTING = KanalError(ErrorCode.BROKER_NOT_AVAILABLE, "broker 1 is starting: catching up")
TOPIC = "orders"
WAIT_S = 30


@pytest.fixture
def layout():
    return Layout()


@pytest.fixture
def brokers(layout):
    """start(broker_id) -> a ScriptedBroker in `layout`; every one started is stopped in teardown."""
    started: list[ScriptedBroker] = []

    def start(broker_id: int) -> ScriptedBroker:
        broker = ScriptedBroker(broker_id, layout)
        started.append(broker)
        return broker

    yield start
    for broker in started:
        broker.stop()


def nowhere(layout: Layout, broker_id: int) -> str:
    """A broker in the layout at a port where nothing listens."""
    endpoint = f"127.0.0.1:{free_ports(1)[0]}"
    layout.brokers[broker_id] = endpoint
    return endpoint


def producer(bootstrap: str, **settings) -> Producer:
    return Producer(ProducerConfig(bootstrap=bootstrap, linger_ms=0, retry_backoff_ms=10, **settings))


def consumer(bootstrap: str, **settings) -> Consumer:
    return Consumer(ConsumerConfig(bootstrap=bootstrap, fetch_max_wait_ms=100, retry_backoff_ms=10,
                                   auto_offset_reset="earliest", **settings))


def poll_error(c: Consumer) -> KanalError:
    """The error the consumer's poll() raises next (the records before it are not expected here)."""

    def raised() -> KanalError | None:
        try:
            assert c.poll(0.2) == []
        except KanalError as exc:
            return exc
        return None

    return wait_until(raised, WAIT_S, "poll() to raise")


def poll_values(c: Consumer, count: int) -> list[bytes | None]:
    got: list[bytes | None] = []
    wait_until(lambda: got.extend(r.value for r in c.poll(0.2)) or len(got) >= count, WAIT_S,
               f"{count} records")
    return got


# ---- the producer (Produce) ----

@pytest.mark.parametrize("refusal", REFUSALS, ids=lambda e: e.name)
def test_a_refused_produce_fails_the_record_at_once_with_its_code(layout, brokers, refusal):
    leader = brokers(1)
    layout.topics[TOPIC] = [1]
    leader.refuse("Produce", refusal)
    with producer(leader.endpoint) as p:
        future = p.produce(TOPIC, b"v")
        with pytest.raises(KanalError) as err:
            future.result(WAIT_S)
        metrics = p.metrics()
    assert err.value.code == refusal.code and refusal.message in err.value.message
    assert leader.calls["Produce"] == 1
    assert (metrics["produce_batch_send_count"], metrics["produce_batch_retry_count"]) == (1, 0)


def test_every_batch_a_refused_call_carried_fails_and_none_is_sent_again(layout, brokers):
    """A call refused as a whole stored nothing: each of its batches fails with the refusal (none is sent
    again), and the producer goes on with the next record."""
    leader = brokers(1)
    layout.topics[TOPIC] = [1]
    leader.refuse("Produce", REFUSALS[0])
    with producer(leader.endpoint, batch_size_bytes=64, partition_batches_per_call_max=8) as p:
        refused = [p.produce(TOPIC, b"x" * 40, partition=0) for _ in range(4)]  # a batch each
        codes = set()
        for future in refused:
            with pytest.raises(KanalError) as err:
                future.result(WAIT_S)
            codes.add(err.value.code)
        assert p.metrics()["produce_batch_retry_count"] == 0
        leader.refuse("Produce", None)
        assert p.produce(TOPIC, b"after", partition=0).result(WAIT_S).offset == 0
    assert codes == {ErrorCode.TOPIC_AUTHORIZATION_FAILED}


def test_a_starting_broker_is_retried_until_the_delivery_timeout_then_its_code_surfaces(layout, brokers):
    leader = brokers(1)
    layout.topics[TOPIC] = [1]
    with producer(leader.endpoint, request_timeout_ms=200, delivery_timeout_ms=2_000) as p:
        # One record first, so the leader is known before the refusals start and the refused record's time
        # is spent on refused sends. A refusal drops the leader until metadata names it again; a record
        # whose time runs out while that lookup is slow (a loaded machine) fails with its last refusal's
        # code all the same, not REQUEST_TIMED_OUT ("no leader known"), which it used to.
        assert p.produce(TOPIC, b"first").result(WAIT_S).offset == 0
        leader.refuse("Produce", STARTING)
        with pytest.raises(KanalError) as err:
            p.produce(TOPIC, b"v").result(WAIT_S)
        metrics = p.metrics()
    assert err.value.code == ErrorCode.BROKER_NOT_AVAILABLE and err.value.retriable
    assert STARTING.message in err.value.message
    assert leader.calls["Produce"] >= 3 and metrics["produce_batch_retry_count"] >= 1  # the first, then 2+


def test_a_record_refused_then_left_without_a_leader_fails_with_the_refusal_not_a_bare_timeout(layout,
                                                                                             brokers):
    """A record whose leader refused it (starting) and then vanished from metadata waits unsent until its
    delivery timeout, then fails with the refusal's code and message: that says why it was never stored."""
    leader = brokers(1)
    layout.topics[TOPIC] = [1]
    with producer(leader.endpoint, request_timeout_ms=200, delivery_timeout_ms=600) as p:
        assert p.produce(TOPIC, b"first").result(WAIT_S).offset == 0
        leader.refuse("Produce", STARTING)
        layout.topics[TOPIC] = [-1]  # no leader from now on: the refusal is the record's only attempt's
        with pytest.raises(KanalError) as err:
            p.produce(TOPIC, b"v").result(WAIT_S)
    assert err.value.code == ErrorCode.BROKER_NOT_AVAILABLE and err.value.retriable
    assert "not sent within delivery_timeout_ms (600)" in err.value.message
    assert STARTING.message in err.value.message


def test_a_produce_to_a_stopped_leader_is_retried_and_lands_once_it_is_back(layout, brokers):
    bootstrap, leader = brokers(0), brokers(1)
    layout.topics[TOPIC] = [1]
    with producer(bootstrap.endpoint) as p:
        assert p.produce(TOPIC, b"first").result(WAIT_S).offset == 0
        leader.stop()
        future = p.produce(TOPIC, b"second")
        wait_until(lambda: p.metrics()["produce_batch_retry_count"] >= 1, WAIT_S, "a retry while it is down")
        leader.restart()
        assert future.result(WAIT_S).offset == 1


def test_a_leader_nothing_listens_for_surfaces_as_broker_not_available_after_retries(layout, brokers):
    bootstrap = brokers(0)
    nowhere(layout, 1)
    layout.topics[TOPIC] = [0, 1]
    with producer(bootstrap.endpoint, request_timeout_ms=200, delivery_timeout_ms=600) as p:
        # Partition 0 first, so the topic's leaders are known before the record for partition 1 starts its
        # 600 ms (as in the starting-broker test above: a slow first metadata lookup would time it out
        # unsent, with REQUEST_TIMED_OUT).
        assert p.produce(TOPIC, b"first", partition=0).result(WAIT_S).offset == 0
        with pytest.raises(KanalError) as err:
            p.produce(TOPIC, b"v", partition=1).result(WAIT_S)
        metrics = p.metrics()
    assert err.value.code == ErrorCode.BROKER_NOT_AVAILABLE and err.value.retriable
    assert metrics["produce_batch_retry_count"] >= 1


def test_a_refused_init_producer_id_fails_the_producer_at_once(layout, brokers):
    broker = brokers(1)
    broker.refuse("InitProducerId", KanalError(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "no IDEMPOTENT_WRITE"))
    with pytest.raises(KanalError) as err:
        producer(broker.endpoint)
    assert err.value.code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    assert broker.calls["InitProducerId"] == 1


def test_a_transactional_id_refused_at_init_is_fatal_at_once(brokers):
    broker = brokers(1)
    broker.refuse("InitProducerId", KanalError(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, "no WRITE"))
    p = producer(broker.endpoint, transactional_id="billing")
    with p, pytest.raises(TransactionFatalError) as err:
        p.init_transactions()
    assert err.value.code == ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    assert broker.calls["InitProducerId"] == 1


# ---- the consumer (Fetch) ----

@pytest.mark.parametrize("refusal", REFUSALS, ids=lambda e: e.name)
def test_a_refused_fetch_is_raised_by_poll_at_once_with_its_code(layout, brokers, refusal):
    leader = brokers(1)
    layout.topics[TOPIC] = [1]
    leader.append(TOPIC, 0, b"a")
    leader.refuse("Fetch", refusal)
    with consumer(leader.endpoint) as c:
        c.assign([(TOPIC, 0)])
        error = poll_error(c)
        # The fetcher stopped at the refusal: one Fetch, until the application polls again.
        assert leader.calls["Fetch"] == 1 and c.metrics()["fetch_error_count"] == 1
        assert error.code == refusal.code and refusal.message in error.message
        assert poll_error(c).code == refusal.code  # the next poll() fetches once more, and is refused again
        assert leader.calls["Fetch"] == 2
        leader.refuse("Fetch", None)
        assert poll_values(c, 1) == [b"a"]


def test_a_starting_leader_is_fetched_again_until_the_request_timeout_then_poll_raises(layout, brokers):
    leader = brokers(1)
    layout.topics[TOPIC] = [1]
    leader.refuse("Fetch", STARTING)
    # 2 s, not less: the consumer's first Metadata call (a new channel) has the same timeout, and once took
    # more than 300 ms in a full suite run.
    with consumer(leader.endpoint, request_timeout_ms=2_000) as c:
        c.assign([(TOPIC, 0)])
        error = poll_error(c)
        assert error.code == ErrorCode.BROKER_NOT_AVAILABLE and error.retriable
        assert STARTING.message in error.message
        assert leader.calls["Fetch"] >= 2
        leader.refuse("Fetch", None)
        leader.append(TOPIC, 0, b"a")
        assert poll_values(c, 1) == [b"a"]  # it fetches on after raising


def test_a_fetch_from_a_stopped_leader_is_retried_and_reads_on_once_it_is_back(layout, brokers):
    bootstrap, leader = brokers(0), brokers(1)
    layout.topics[TOPIC] = [1]
    leader.append(TOPIC, 0, b"a")
    with consumer(bootstrap.endpoint) as c:  # request_timeout_ms 30 s: the outage is shorter
        c.assign([(TOPIC, 0)])
        assert poll_values(c, 1) == [b"a"]
        leader.stop()
        failed = c.metrics()["fetch_error_count"]
        wait_until(lambda: c.poll(0.05) == [] and c.metrics()["fetch_error_count"] > failed, WAIT_S,
                   "a failed fetch while it is down")
        leader.append(TOPIC, 0, b"b")
        leader.restart()
        assert poll_values(c, 1) == [b"b"]


def test_a_leader_nothing_listens_for_is_raised_by_poll_as_broker_not_available(layout, brokers):
    bootstrap = brokers(0)
    nowhere(layout, 1)
    layout.topics[TOPIC] = [1]
    with consumer(bootstrap.endpoint, request_timeout_ms=2_000) as c:  # 2 s: as in the test above
        c.assign([(TOPIC, 0)])
        c.seek((TOPIC, 0), 0)
        error = poll_error(c)
        assert error.code == ErrorCode.BROKER_NOT_AVAILABLE and error.retriable
        assert c.metrics()["fetch_error_count"] >= 2


# ---- the admin client ----

@pytest.mark.parametrize("refusal", REFUSALS, ids=lambda e: e.name)
def test_a_refused_admin_call_is_raised_at_once_with_its_code(brokers, refusal):
    broker = brokers(1)
    broker.refuse("CreateTopics", refusal)
    with Admin(broker.endpoint) as admin, pytest.raises(KanalError) as err:
        admin.create_topic(TOPIC, 1, 1)
    assert err.value.code == refusal.code and refusal.message in err.value.message
    assert broker.calls["CreateTopics"] == 1


def test_a_create_refused_as_a_duplicate_request_took_effect_and_returns_the_topic(layout, brokers):
    """The broker's earlier attempt at the controllers was carried out but not answered in time, so its
    retry (same request id) is refused as DUPLICATE_REQUEST: for one topic that means it was created, and
    the caller gets the topic, not an error (a chaos run's setup failed on it: seed 361)."""
    broker = brokers(1)
    layout.topics[TOPIC] = [1]  # what the earlier attempt did
    broker.refuse("CreateTopics", KanalError(ErrorCode.DUPLICATE_REQUEST, "request call-1 was carried out"))
    with Admin(broker.endpoint) as admin:
        assert admin.create_topic(TOPIC, 1, 1) == f"id-{TOPIC}"
    assert broker.calls["CreateTopics"] == 1


def test_a_starting_broker_is_asked_again_until_the_request_timeout_then_its_code_surfaces(brokers):
    broker = brokers(1)
    broker.refuse("CreateTopics", STARTING)
    with Admin(broker.endpoint, request_timeout_ms=300) as admin, pytest.raises(KanalError) as err:
        admin.create_topic(TOPIC, 1, 1)
    assert err.value.code == ErrorCode.BROKER_NOT_AVAILABLE and STARTING.message in err.value.message
    assert broker.calls["CreateTopics"] >= 2


def test_an_admin_call_to_a_stopped_broker_is_retried_at_one_that_answers(layout, brokers):
    first, second = brokers(1), brokers(2)
    with Admin(f"{first.endpoint},{second.endpoint}") as admin:
        assert admin.list_topics() == []  # first answered: the admin's calls go there
        first.stop()
        admin.create_topic(TOPIC, 1, 1)
    assert second.calls["CreateTopics"] == 1 and layout.topics[TOPIC] == [2]


def test_an_admin_call_with_no_broker_listening_surfaces_as_broker_not_available(layout, brokers):
    broker = brokers(1)
    with Admin(broker.endpoint, request_timeout_ms=300) as admin:
        assert admin.list_topics() == []
        broker.stop()
        with pytest.raises(KanalError) as err:
            admin.create_topic(TOPIC, 1, 1)
    assert err.value.code == ErrorCode.BROKER_NOT_AVAILABLE and err.value.retriable


# ---- the retry loop itself (no sockets, no waiting) ----

class _Clock:
    def __init__(self) -> None:
        self.now_s = 0.0
        self.sleeps: list[float] = []

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now_s += seconds


def _attempts(*outcomes):
    calls: list[float] = []

    def attempt(remaining_s: float):
        calls.append(remaining_s)
        outcome = outcomes[min(len(calls), len(outcomes)) - 1]
        if isinstance(outcome, KanalError):
            raise outcome
        return outcome

    return attempt, calls


def test_retrying_raises_a_non_retriable_error_at_once():
    clock = _Clock()
    attempt, calls = _attempts(REFUSALS[0])
    with pytest.raises(KanalError) as err:
        retrying(attempt, timeout_s=10, backoff_s=1, clock=lambda: clock.now_s, sleep=clock.sleep)
    assert err.value is REFUSALS[0] and calls == [10] and clock.sleeps == []


def test_retrying_tries_a_retriable_error_again_until_the_time_is_up_then_raises_the_last():
    clock = _Clock()
    timed_out = KanalError(ErrorCode.REQUEST_TIMED_OUT, "no answer")
    attempt, calls = _attempts(STARTING, STARTING, timed_out)
    seen: list[int] = []
    with pytest.raises(KanalError) as err:
        retrying(attempt, timeout_s=3.5, backoff_s=1, on_retry=lambda e: seen.append(e.code),
                 clock=lambda: clock.now_s, sleep=clock.sleep)
    assert err.value is timed_out
    assert calls == [3.5, 2.5, 1.5, 0.5] and clock.sleeps == [1, 1, 1]
    starting, timeout = ErrorCode.BROKER_NOT_AVAILABLE, ErrorCode.REQUEST_TIMED_OUT
    assert seen == [starting, starting, timeout]


def test_retrying_returns_what_an_attempt_after_retriable_failures_returns():
    clock = _Clock()
    attempt, calls = _attempts(STARTING, "reply")
    reply = retrying(attempt, timeout_s=5, backoff_s=0.5, clock=lambda: clock.now_s, sleep=clock.sleep)
    assert reply == "reply"
    assert len(calls) == 2


def test_an_error_on_retry_raises_ends_the_loop():
    clock = _Clock()
    attempt, _ = _attempts(STARTING)
    unknown = KanalError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "no such topic")

    def refresh(_error: KanalError) -> None:
        raise unknown

    with pytest.raises(KanalError) as err:
        retrying(attempt, timeout_s=5, backoff_s=1, on_retry=refresh, clock=lambda: clock.now_s,
                 sleep=clock.sleep)
    assert err.value is unknown


def test_the_readme_lists_exactly_the_codes_that_are_retried():
    readme = (Path(__file__).parents[2] / "clients" / "README.md").read_text()
    listed = re.search(r"- \*\*Retriable\*\*: (.*?)\.\n", readme, re.DOTALL)
    assert listed is not None
    names = {name.strip() for name in listed.group(1).split(",")}
    assert names == {v.name for v in ErrorCode.DESCRIPTOR.values if v.number and is_retriable(v.number)}


def test_a_topic_first_seen_in_an_answer_about_every_topic_keeps_its_leader_when_another_is_added(
        layout, brokers):
    """Found by `kanal mirror`: the producer learned topic `a` from a Metadata answer that named every topic
    (its first refresh named none); a new topic `b` made it ask for `b` by name, the answer held only `b`,
    and `a` lost its leader in the producer's view for good: `a`'s next batch was never sent and flush()
    waited for ever."""
    bootstrap = brokers(0)
    layout.topics["a"] = [0]
    with producer(bootstrap.endpoint, request_timeout_ms=2_000, delivery_timeout_ms=5_000) as p:
        p._metadata.refresh()  # as at start: no topic named, every topic answered
        assert p.produce("a", b"1").result(WAIT_S).offset == 0
        layout.topics["b"] = [0]  # created later
        assert p.produce("b", b"1").result(WAIT_S).offset == 0
        assert p.produce("a", b"2").result(WAIT_S).offset == 1
        assert p.flush(WAIT_S)


def test_a_batch_whose_partition_has_no_leader_fails_at_the_delivery_timeout_and_flush_returns(
        layout, brokers):
    bootstrap = brokers(0)
    layout.topics[TOPIC] = [7]  # broker 7 is in no Metadata answer: no leader the producer can reach
    with producer(bootstrap.endpoint, request_timeout_ms=200, delivery_timeout_ms=600) as p:
        future = p.produce(TOPIC, b"v")
        assert p.flush(WAIT_S)  # returns once the batch failed, not at its own timeout
        with pytest.raises(KanalError) as err:
            future.result(0)
    assert err.value.code == ErrorCode.REQUEST_TIMED_OUT and "no leader" in str(err.value)
