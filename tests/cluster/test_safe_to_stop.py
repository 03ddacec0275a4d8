"""`kanal brokers safe-to-stop` against a real cluster (issue 40, item 4): with every replica in sync any
broker may stop; with one broker down, stopping another that the ISR still needs is refused (exit 1,
NOT_ENOUGH_REPLICAS naming the partitions); with `--wait-ms-max` the command waits until the stopped broker
is back in the ISR and then says yes."""

from __future__ import annotations

import threading

import pytest

from kanal.clients import cli

from .conftest import broker_node, create_topic, partition_info, wait_until

pytestmark = pytest.mark.cluster


def safe_to_stop(cluster, broker_id: int, *extra: str) -> int:
    return cli.main(["brokers", "safe-to-stop", "--id", str(broker_id), "--bootstrap", cluster.bootstrap,
                     *extra])


def test_safe_to_stop_refuses_while_a_partition_would_drop_below_min_insync(cluster, capsys):
    create_topic(cluster, "roll", partitions=2, replication_factor=3, min_insync_replicas="2")
    create_topic(cluster, "single", partitions=1, replication_factor=1)
    wait_until(lambda: all(len(partition_info(cluster, "roll", p).isr) == 3 for p in range(2)), 30,
               "full ISRs")
    for b in cluster.brokers:
        assert safe_to_stop(cluster, b.node_id) == 0
    capsys.readouterr()

    down = broker_node(cluster, 1)
    down.stop()
    wait_until(lambda: all(1 not in partition_info(cluster, "roll", p).isr for p in range(2)), 30,
               "broker 1 out of the ISRs")
    assert safe_to_stop(cluster, 0) == 1
    err = capsys.readouterr().err
    assert "NOT_ENOUGH_REPLICAS" in err and "stopping broker 0 would leave 2 partitions" in err
    assert "roll-0 (isr [0, 2], min.insync 2)" in err or "roll-0 (isr [2, 0], min.insync 2)" in err
    assert safe_to_stop(cluster, 1) == 0  # not in any ISR: stopping it (again) costs nothing

    # It waits for the ISR: started again, broker 1 rejoins, and the waiting command says yes.
    answer: list[int] = []
    waiter = threading.Thread(
        target=lambda: answer.append(safe_to_stop(cluster, 0, "--wait-ms-max", "60000")))
    waiter.start()
    cluster.start_node(down)
    waiter.join(90)
    assert answer == [0]
    assert all(1 in partition_info(cluster, "roll", p).isr for p in range(2))
