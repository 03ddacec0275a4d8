"""The chaos workloads tolerate the faults they run under (no cluster: the client is replaced)."""

from __future__ import annotations

import random

from kanal.deploy.chaos import workload
from kanal.deploy.chaos.history import Recorder
from kanal.v1.error import ErrorCode, KanalError


def test_a_consumer_member_starting_while_every_broker_is_down_tries_again_instead_of_failing_the_run(
        monkeypatch):
    # The isr-down episode kills every broker; a member that started then used to raise
    # BROKER_NOT_AVAILABLE out of its thread and end the run as a harness failure (seed 2, unclean-election).
    consumer = workload.ConsumerWorkload(0, Recorder(), "10.0.0.1:9", "chaos", random.Random(1))
    attempts = []

    def no_broker(config):
        attempts.append(config.client_id)
        if len(attempts) == 3:
            consumer.stop()  # the runner stops the workloads once the cluster is back (or given up on)
        raise KanalError(ErrorCode.BROKER_NOT_AVAILABLE, "no broker answered within 5000 ms")

    monkeypatch.setattr(workload, "Consumer", no_broker)
    consumer.start()
    consumer.join(10)
    assert not consumer.is_alive() and consumer.error is None
    assert attempts == ["consumer-0.0"] * 3


def test_a_consumer_that_cannot_start_for_a_lasting_reason_still_fails_the_run(monkeypatch):
    consumer = workload.ConsumerWorkload(0, Recorder(), "10.0.0.1:9", "chaos", random.Random(1))

    def refused(config):
        raise KanalError(ErrorCode.INVALID_CONFIG, "a bad consumer config")

    monkeypatch.setattr(workload, "Consumer", refused)
    consumer.start()
    consumer.join(10)
    assert isinstance(consumer.error, KanalError) and consumer.error.code == ErrorCode.INVALID_CONFIG
