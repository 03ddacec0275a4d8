"""Fixtures for tests that run kanal's image in Docker (marker `containers`).

They need a Docker engine (tests/run starts one when none runs) and the image kanal:dev (or $KANAL_IMAGE,
so that several checkouts sharing one engine do not overwrite each other's image), which this session builds
once with deploy/image/build.sh unless tests/run already did (KANAL_IMAGE_BUILT=1); a missing engine fails
the tests loudly, never skips them.
"""

from __future__ import annotations

import os
import subprocess
import uuid
from collections.abc import Iterator

# testcontainers reads these when it is imported. No Ryuk reaper (its image cannot be pulled everywhere:
# containers are removed by label instead), and dial the engine on loopback, not the bridge address a
# process inside a container would otherwise pick.
os.environ.setdefault("TESTCONTAINERS_RYUK_DISABLED", "true")
os.environ.setdefault("TESTCONTAINERS_CONNECTION_MODE", "docker_host")
os.environ.setdefault("TC_HOST", "127.0.0.1")

import pytest

from .cluster import IMAGE, ContainerCluster, checkout_labels, remove_labelled
from .manifests import REPO


@pytest.fixture(scope="session")
def docker_image() -> str:
    if subprocess.run(["docker", "info"], check=False, capture_output=True, timeout=60).returncode != 0:
        raise RuntimeError("no Docker engine answers `docker info`: run `bash deploy/image/ensure-docker.sh` "
                           "(tests/run does) or start one")
    image = os.environ.get("KANAL_IMAGE", IMAGE)
    if os.environ.get("KANAL_IMAGE_BUILT") != "1":
        subprocess.run(["bash", str(REPO / "deploy" / "image" / "build.sh"), "--tag", image], check=True,
                       timeout=1800)
    remove_labelled(checkout_labels())  # whatever an interrupted run of this checkout left behind
    yield image
    remove_labelled(checkout_labels())


@pytest.fixture(scope="module")
def containers(docker_image, tmp_path_factory) -> Iterator[ContainerCluster]:
    """3 controllers and 3 brokers in containers; tests that kill or stop nodes start them again."""
    cluster = ContainerCluster(
        uuid.uuid4().hex[:8], tmp_path_factory.mktemp("containers"), image=docker_image
    )
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.remove()
