"""Fixtures of the storage tests: a real S3 API server (moto) for the remote-storage tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.harness.moto_server import MotoServer


@pytest.fixture(scope="module")
def moto_s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MotoServer]:
    """One moto server for a test module (its bucket exists); tests keep apart by key prefix. Stopped by
    PID at the module's end."""
    server = MotoServer.start(tmp_path_factory.mktemp("moto") / "moto.log")
    try:
        yield server
    finally:
        server.stop()
