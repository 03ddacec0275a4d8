"""Fixtures shared by every test package: the power-loss filesystem (kanal.deploy.lazyfs), the package
laid out as installed (tests/harness/package_tree.py), and a real S3 API server
(deploy/s3_server.py)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from kanal.deploy import lazyfs

# No timing in tests: Hypothesis' per-example deadline and its "input generation is slow" health check
# judge the machine's load, not the code (a loaded 2-core CI machine fails them at random). Every property
# test inherits this profile; the checks that remain are the ones about the data.
settings.register_profile("kanal", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("kanal")

_spec = importlib.util.spec_from_file_location("kanal_tests_package_tree",
                                               Path(__file__).parent / "harness" / "package_tree.py")
package_tree_module = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(package_tree_module)


@pytest.fixture
def package_tree(tmp_path) -> tuple[Path, dict[Path, Path]]:
    """(root, tree path → checkout path): the `kanal` package copied to tmp_path/tree as a wheel lays it
    out."""
    root = tmp_path / "tree"
    return root, package_tree_module.build_package_tree(root)


@pytest.fixture(scope="session")
def moto_s3(tmp_path_factory):
    """A moto S3 server process for the whole run (starting one takes seconds, and three modules use it),
    its bucket made (a `MotoServer`: endpoint, bucket, credentials, region); tests and modules keep apart by
    key prefix (each a uuid or its own temporary directory's name). moto keeps objects in memory, so it is
    never restarted: a test that needs an unreachable store starts one of its own. Stopped by PID at the
    end."""
    from kanal.deploy.s3_server import MotoServer

    server = MotoServer.start(tmp_path_factory.mktemp("moto") / "moto.log")
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def power_loss_fs(tmp_path):
    """`power_loss_fs(name, mountpoint=None)` mounts a PowerLossFS at `mountpoint` (default
    tmp_path/name) over tmp_path/name.backing; every mount is unmounted in teardown, whatever happened."""
    reason = lazyfs.fuse_available()
    if reason is not None:
        pytest.fail(f"power-loss tests need FUSE: {reason} (tests/run installs it as root)")
    mounts = []

    def make(name: str = "disk", mountpoint: Path | None = None):
        fs = lazyfs.PowerLossFS(tmp_path / f"{name}.backing", mountpoint or tmp_path / name)
        mounts.append(fs)
        fs.mount()
        return fs

    yield make
    for fs in mounts:
        fs.close()
    left = [fs.mountpoint for fs in mounts if fs._in_mount_table()]
    assert not left, f"mounts left behind: {left}"
