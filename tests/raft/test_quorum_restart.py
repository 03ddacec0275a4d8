"""Restarting every controller, cleanly or by SIGKILL, gives back the same metadata image."""

from __future__ import annotations

import pytest

from kanal.v1 import admin_pb2, controller_pb2, metadata_pb2

pytestmark = pytest.mark.cluster

TOPICS = [f"keep-{n}" for n in range(12)]


def _populate(q, brokers):
    active = q.stub(q.wait_active())
    reply = active.CreateTopics(
        admin_pb2.CreateTopicsRequest(
            topics=[admin_pb2.CreatableTopic(name=n, partitions=3, replication_factor=2) for n in TOPICS]
            + [admin_pb2.CreatableTopic(name="doomed", partitions=1, replication_factor=1)]
        ),
        timeout=10,
    )
    assert all(r.error == 0 for r in reply.results), reply
    reply = active.AlterConfigs(
        admin_pb2.AlterConfigsRequest(
            changes=[
                admin_pb2.AlterConfigsRequest.Change(
                    resource=admin_pb2.ConfigResource(type=metadata_pb2.CONFIG_RESOURCE_TOPIC, name="keep-3"),
                    ops=[admin_pb2.AlterConfigOp(key="retention.ms", value="3600000")],
                )
            ]
        ),
        timeout=10,
    )
    assert all(r.error == 0 for r in reply.results), reply
    reply = active.AlterClientQuotas(
        admin_pb2.AlterClientQuotasRequest(
            entries=[
                admin_pb2.AlterClientQuotasRequest.Entry(
                    entity=admin_pb2.QuotaEntity(entity_type="client-id", entity_name="app"),
                    values=[admin_pb2.QuotaValue(key="producer_byte_rate", value=1048576)],
                )
            ]
        ),
        timeout=10,
    )
    assert all(r.error == 0 for r in reply.results), reply
    assert (
        active.DeleteTopics(admin_pb2.DeleteTopicsRequest(names=["doomed"]), timeout=10).results[0].error == 0
    )
    ids = active.AllocateProducerIds(
        controller_pb2.AllocateProducerIdsRequest(broker_id=1, broker_epoch=brokers.epochs[1]), timeout=10
    )
    assert ids.error == 0 and ids.block_size > 0


def _view(q, i, replay_log):
    """What controller i's committed image says, through its read RPCs and its metadata log."""
    stub = q.stub(i)
    configs = stub.DescribeConfigs(
        admin_pb2.DescribeConfigsRequest(
            resources=[
                admin_pb2.ConfigResource(type=metadata_pb2.CONFIG_RESOURCE_TOPIC, name=n)
                for n in [*TOPICS, "doomed"]
            ]
        ),
        timeout=10,
    )
    quotas = stub.DescribeClientQuotas(admin_pb2.DescribeClientQuotasRequest(), timeout=10)
    brokers = stub.DescribeCluster(admin_pb2.DescribeClusterRequest(), timeout=10).brokers
    image = replay_log(q.fetch_all(i))
    image.next_offset = 0  # a restart adds the new active controller's NoOp: compare content only
    image.controller_epoch = 0
    return (
        [(r.resource.name, r.error, [(e.key, e.value) for e in r.entries]) for r in configs.results],
        str(quotas),
        [str(b) for b in brokers],
        image,
    )


def test_restart_of_all_three_keeps_the_image(quorum_factory, fake_brokers_factory, replay_log, wait):
    q = quorum_factory(extra_args=["--session-timeout-ms", "600000"])
    q.wait_active()
    brokers = fake_brokers_factory(q)
    brokers.register_live([1, 2, 3])
    _populate(q, brokers)
    q.wait_all_serving()
    # Each controller records its disk's directory id once, in its own time after it starts: wait for all
    # three, so that the image compared across restarts is complete.
    wait(lambda: len(replay_log(q.fetch_all(q.wait_active())).controller_directories) == len(q.ids), 30,
         "every controller's directory id recorded")
    end = q.end_offset(q.wait_active())
    for i in q.ids:
        wait(lambda i=i: q.end_offset(i) == end, 30, f"controller {i} caught up")
    before = _view(q, 1, replay_log)
    assert [name for name, error, _ in before[0] if error == 0] == TOPICS  # "doomed" is gone
    assert ("retention.ms", "3600000") in {n: e for n, _, e in before[0]}["keep-3"]

    for restart in ("SIGTERM", "SIGKILL"):
        for i in q.ids:
            if restart == "SIGTERM":
                assert q.stop(i) == 0
            else:
                q.kill(i)
        q.start_all()
        new_end = wait(lambda: q.end_offset(q.wait_active()), 30, "an active controller")
        assert new_end > end  # the new active controller's NoOp, nothing else
        q.wait_all_serving()
        for i in q.ids:
            wait(lambda i=i, e=new_end: q.end_offset(i) == e, 30, f"controller {i} caught up")
            assert _view(q, i, replay_log) == before, f"controller {i} after {restart}"
        # The active controller's image has every topic: creating one again is refused.
        again = q.stub(q.wait_active()).CreateTopics(
            admin_pb2.CreateTopicsRequest(
                topics=[admin_pb2.CreatableTopic(name=n, partitions=1, replication_factor=1) for n in TOPICS],
                validate_only=True,
            ),
            timeout=10,
        )
        assert {r.error for r in again.results} == {19}  # TOPIC_ALREADY_EXISTS
        end = new_end
