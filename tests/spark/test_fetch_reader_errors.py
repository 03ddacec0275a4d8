"""The Fetch reader's side of the client error boundary (spark/fetch_reader.py reads a live cluster without
kanal.clients): a refusal that is not retriable is raised at once with its code, a retriable one is
retried until the reader's deadline and then raised with its own code. Against the scripted brokers of
tests/clients (real gRPC servers whose refusals leave through the servers' error boundary); no Spark."""

from __future__ import annotations

import pytest

from kanal.spark import fetch_reader
from kanal.spark.fetch_reader import FetchPartition, cluster_metadata, fetch_partition
from kanal.v1.error import ErrorCode, KanalError
from tests.clients.scripted_broker import Layout, ScriptedBroker

PART = FetchPartition("orders", 0)


@pytest.fixture
def brokers():
    layout = Layout()
    started = [ScriptedBroker(1, layout), ScriptedBroker(2, layout)]
    layout.topics[PART.topic] = [1]
    started[0].append(PART.topic, PART.partition, b"a", b"b")
    yield started
    for broker in started:
        broker.stop()


def test_a_refused_fetch_is_raised_at_once_with_its_code(brokers):
    leader, _ = brokers
    leader.refuse("Fetch", KanalError(ErrorCode.TOPIC_AUTHORIZATION_FAILED, "User:spark may not READ orders"))
    with pytest.raises(KanalError) as err:
        list(fetch_partition(leader.endpoint, PART))
    assert err.value.code == ErrorCode.TOPIC_AUTHORIZATION_FAILED and "may not READ" in err.value.message
    assert leader.calls["Fetch"] == 1


def test_a_starting_leader_is_fetched_again_until_the_deadline_then_its_code_surfaces(brokers, monkeypatch):
    leader, _ = brokers
    monkeypatch.setattr(fetch_reader, "RETRY_DEADLINE_S", 0.5)
    leader.refuse("Fetch", KanalError(ErrorCode.BROKER_NOT_AVAILABLE, "broker 1 is starting"))
    with pytest.raises(KanalError) as err:
        list(fetch_partition(leader.endpoint, PART))
    assert err.value.code == ErrorCode.BROKER_NOT_AVAILABLE and "is starting" in err.value.message
    assert leader.calls["Fetch"] >= 2
    leader.refuse("Fetch", None)
    assert sum(e.last_offset - e.base_offset + 1 for e in fetch_partition(leader.endpoint, PART)) == 2


def test_a_bootstrap_broker_that_refuses_ends_the_search_and_one_that_is_down_does_not(brokers):
    first, second = brokers
    first.refuse("Metadata", KanalError(ErrorCode.AUTHENTICATION_FAILED, "unknown user"))
    with pytest.raises(KanalError) as err:
        cluster_metadata(f"{first.endpoint},{second.endpoint}")
    assert err.value.code == ErrorCode.AUTHENTICATION_FAILED and first.endpoint in err.value.message
    assert second.calls["Metadata"] == 0  # another broker would refuse the same
    first.refuse("Metadata", None)
    first.stop()
    assert [b.broker_id for b in cluster_metadata(f"{first.endpoint},{second.endpoint}").brokers] == [1, 2]
    assert second.calls["Metadata"] == 1
