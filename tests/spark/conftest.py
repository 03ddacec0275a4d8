"""Fixtures for the Spark tests: one local Spark session for the whole run (starting one costs 10-20 s and
about 1 GB, so every module shares it; `getOrCreate` would hand back the same session anyway)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest


@pytest.fixture(scope="session")
def spark() -> Iterator:
    from kanal.spark.session import kanal_session

    session = kanal_session("local[2]", "kanal-tests", shuffle_partitions=2)
    yield session
    session.stop()
