"""Fixtures shared by the broker's tests."""

from __future__ import annotations

import pytest

from tests.broker.coordinator_broker import CoordinatorBroker


@pytest.fixture
def coordinators(tmp_path):
    """Both coordinators on one broker without sockets, one fake clock and one recording stop hook
    (tests/broker/coordinator_broker.py), closed after the test."""
    made = CoordinatorBroker(tmp_path)
    yield made
    made.close()
