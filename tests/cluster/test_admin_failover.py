"""The admin client moves on from a broker it cannot reach: with the broker it was talking to SIGKILLed,
admin calls go to a live broker instead of failing with "failed to connect" (a defect `kanal chaos`
found: every create and delete failed for as long as that one broker was down)."""

from __future__ import annotations

import pytest

from kanal.clients.admin import Admin

from .conftest import start_cluster, wait_until


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = start_cluster(tmp_path_factory, "admin-failover")
    yield c
    c.stop()


def test_admin_calls_go_to_a_live_broker_when_theirs_dies(cluster):
    with Admin(cluster.bootstrap, request_timeout_ms=30_000) as admin:
        admin.create_topic("before-kill", 1, 1)
        talking_to = admin._metadata._good  # the broker this Admin's calls went to
        victim = next(n for n in cluster.brokers if n.endpoint == talking_to)
        victim.kill()
        try:
            admin.create_topic(
                "after-kill", 1, 3
            )  # RF 3: a leader placed on the dead broker moves once it is fenced
            assert "after-kill" in admin.list_topics()
            admin.delete_topic("before-kill")
            wait_until(
                lambda: "before-kill" not in admin.list_topics(), 30, "the deletion reaches the brokers"
            )
        finally:
            cluster.start_node(victim, 60)
