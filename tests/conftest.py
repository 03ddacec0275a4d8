"""Fixtures shared by every test package: the power-loss filesystem (tests/harness/lazyfs.py)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

_spec = importlib.util.spec_from_file_location("kanal_tests_lazyfs", Path(__file__).parent / "harness" / "lazyfs.py")
lazyfs = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = lazyfs  # dataclasses look their module up there
_spec.loader.exec_module(lazyfs)


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
