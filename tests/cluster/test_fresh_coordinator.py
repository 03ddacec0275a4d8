"""A fresh cluster's group coordinator never says "ask me", then "not me" (issue 42, item 3).

On 5 of 6 fresh clusters FindCoordinator named a broker that answered the first JoinGroup with
NOT_COORDINATOR for 0.5-1 s: FindCoordinator answers from the published metadata image, and the
coordinator takes that image only after the replica manager has applied it. Now a broker that leads the
group's partition in its published image answers COORDINATOR_LOAD_IN_PROGRESS until it serves it.

Each round starts a fresh cluster (1 controller, 3 brokers), asks FindCoordinator until it names a broker
(the first call creates __consumer_offsets), and sends JoinGroup to the named broker at once, again while
it answers COORDINATOR_LOAD_IN_PROGRESS (or MEMBER_ID_REQUIRED, a new member's first answer), within a
bounded time. No answer may be NOT_COORDINATOR."""

from __future__ import annotations

import grpc
import pytest

from kanal.deploy.local_cluster import LocalCluster
from kanal.v1 import broker_pb2, broker_pb2_grpc
from kanal.v1.error import ErrorCode

from .conftest import BROKER_FLAGS, CONTROLLER_FLAGS, wait_until

pytestmark = pytest.mark.cluster
FRESH_CLUSTERS = 4
JOINED_S_MAX = 30.0  # FindCoordinator until it names a broker, and JoinGroup until it is answered
RETRY_AFTER_S = 0.02  # between retriable answers, as a client backs off


def first_join(bootstrap: str, group: str) -> list[tuple[str, str]]:
    """(call, error name) of every answer up to the first joined JoinGroup, or the first answer that is
    neither COORDINATOR_LOAD_IN_PROGRESS nor MEMBER_ID_REQUIRED."""
    answers: list[tuple[str, str]] = []
    with grpc.insecure_channel(bootstrap) as channel:
        broker = broker_pb2_grpc.BrokerStub(channel)

        def find() -> broker_pb2.FindCoordinatorResponse | None:
            found = broker.FindCoordinator(broker_pb2.FindCoordinatorRequest(key=group), timeout=10)
            answers.append(("FindCoordinator", ErrorCode.Name(found.error)))
            return found if found.error == ErrorCode.NONE else None

        found = wait_until(find, JOINED_S_MAX, "FindCoordinator to name a broker", RETRY_AFTER_S)
    member = [""]
    with grpc.insecure_channel(found.endpoint) as channel:
        coordinator = broker_pb2_grpc.BrokerStub(channel)

        def join() -> bool:
            joined = coordinator.JoinGroup(broker_pb2.JoinGroupRequest(
                group_id=group, session_timeout_ms=10_000, rebalance_timeout_ms=10_000, member_id=member[0],
                protocol_type="consumer", protocols=[broker_pb2.GroupProtocol(name="range")],
                client_id="fresh"), timeout=30)
            answers.append(("JoinGroup", ErrorCode.Name(joined.error)))
            if joined.error == ErrorCode.MEMBER_ID_REQUIRED:
                member[0] = joined.member_id
            return joined.error not in (ErrorCode.MEMBER_ID_REQUIRED, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)

        wait_until(join, JOINED_S_MAX, f"a JoinGroup answer at {found.endpoint}", RETRY_AFTER_S)
    return answers


def test_the_broker_findcoordinator_names_never_answers_the_first_join_with_not_coordinator(tmp_path):
    for round_ in range(FRESH_CLUSTERS):
        with LocalCluster(tmp_path / f"fresh-{round_}", controllers=1, brokers=3,
                          controller_flags=CONTROLLER_FLAGS, broker_flags=BROKER_FLAGS) as cluster:
            cluster.start(timeout_s=90)
            answers = first_join(cluster.brokers[round_ % 3].endpoint, f"fresh-group-{round_}")
        joins = [error for call, error in answers if call == "JoinGroup"]
        assert "NOT_COORDINATOR" not in joins, answers
        assert joins[-1] == "NONE", answers
