"""The power-loss filesystem itself: only what was fsynced survives a cut, as its docstring says."""

from __future__ import annotations

import mmap
import os
import time

import pytest


def _write(path, data: bytes, offset: int = 0, *, sync: bool = False) -> None:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        os.pwrite(fd, data, offset)
        if sync:
            os.fsync(fd)
    finally:
        os.close(fd)


def test_only_fsynced_writes_survive_a_cut(power_loss_fs):
    fs = power_loss_fs()
    f = fs.mountpoint / "f"
    _write(f, b"first", sync=True)
    _write(f, b"-second", 5)
    assert f.read_bytes() == b"first-second"  # the live view holds both
    result = fs.cut_power()
    assert result["dropped_ops"] == 1
    assert not fs.mounted
    fs.mount()
    assert f.read_bytes() == b"first"


def test_an_unsynced_overwrite_of_synced_bytes_is_undone(power_loss_fs):
    fs = power_loss_fs()
    f = fs.mountpoint / "f"
    _write(f, b"a" * 10_000, sync=True)
    _write(f, b"bb", 4095)  # across a page boundary
    os.truncate(f, 20)
    fs.cut_power()
    fs.mount()
    assert f.read_bytes() == b"a" * 10_000


def test_fdatasync_counts_like_fsync(power_loss_fs):
    fs = power_loss_fs()
    f = fs.mountpoint / "f"
    fd = os.open(f, os.O_RDWR | os.O_CREAT, 0o644)
    os.write(fd, b"kept")
    os.fdatasync(fd)
    os.write(fd, b"lost")
    os.close(fd)
    fs.cut_power()
    fs.mount()
    assert f.read_bytes() == b"kept"


def test_a_new_file_never_fsynced_survives_empty_and_renames_are_durable_at_once(power_loss_fs):
    fs = power_loss_fs()
    d = fs.mountpoint / "dir"
    d.mkdir()
    _write(d / "unsynced", b"data")
    _write(d / "synced.tmp", b"new", sync=True)
    os.replace(d / "synced.tmp", d / "target")
    fs.cut_power()
    fs.mount()
    # Documented semantics: namespace operations are durable at once; data only after fsync.
    assert (d / "unsynced").read_bytes() == b""
    assert (d / "target").read_bytes() == b"new"
    assert not (d / "synced.tmp").exists()


def test_keep_first_persists_a_prefix_of_the_unsynced_writes(power_loss_fs):
    fs = power_loss_fs()
    f = fs.mountpoint / "f"
    _write(f, b"0", sync=True)
    for i, chunk in enumerate((b"1", b"2", b"3"), start=1):
        _write(f, chunk, i)
    fs.cut_power(keep_first=2)
    fs.mount()
    assert f.read_bytes() == b"012"


def test_shared_mmap_writes_count_only_after_msync(power_loss_fs):
    # pysyncobj's own journal is a shared writable mmap that it never msyncs while running: the kernel
    # writes the dirty pages back to the filesystem as plain writes (at the latest when the file is
    # closed), which a cut drops. msync(MS_SYNC) reaches the filesystem as an fsync (Linux).
    fs = power_loss_fs()
    synced, unsynced = fs.mountpoint / "synced", fs.mountpoint / "unsynced"
    for path, sync in ((synced, True), (unsynced, False)):
        _write(path, b"\0" * 8192, sync=True)
        with open(path, "r+b") as f:
            mapped = mmap.mmap(f.fileno(), 0)
            mapped[0:5] = b"hello"
            if sync:
                mapped.flush()
            mapped.close()
    assert unsynced.read_bytes()[:5] == b"hello"  # the live view
    assert fs.stats()["pending_ops"] >= 1  # written back, not synced
    fs.cut_power()
    fs.mount()
    assert synced.read_bytes()[:5] == b"hello"
    assert unsynced.read_bytes()[:5] == b"\0" * 5


def test_the_mount_refuses_everything_after_a_cut_until_remounted(power_loss_fs, tmp_path):
    fs = power_loss_fs()
    f = fs.mountpoint / "f"
    fd = os.open(f, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fs._command("cut 0")  # the cut without the unmount: a process still holding a file
        with pytest.raises(OSError):
            os.pwrite(fd, b"late", 0)
    finally:
        os.close(fd)
    fs.close()
    assert not fs.mounted
    fs.mount()
    assert f.read_bytes() == b""


def test_a_copy_of_the_mount_in_another_namespace_does_not_keep_the_daemon_running(power_loss_fs):
    # `ip netns exec` gives each chaos node a mount namespace of its own, holding copies of every mount that
    # existed when it started; a copy keeps the FUSE session alive after the unmount. The daemon used to
    # wait there until it was killed, 10 s per cut, and a power fault on three controllers overran its
    # schedule by half a minute. It must leave by itself once its stdin is closed.
    import shutil
    import subprocess

    if shutil.which("unshare") is None:
        pytest.fail("this test needs unshare(1) (Debian: util-linux)")
    fs = power_loss_fs()
    holder = subprocess.Popen(["unshare", "--mount", "--propagation", "private", "cat"],
                              stdin=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 10
        while not _has_mount(holder.pid, fs.mountpoint):
            assert holder.poll() is None and time.monotonic() < deadline, "unshare never ran"
            time.sleep(0.01)
        daemon = fs._proc
        assert daemon is not None
        fs.cut_power()
        assert not fs.mounted
        assert daemon.returncode == 0  # it exited; a killed daemon says -9
        fs.mount()
    finally:
        holder.stdin.close()  # type: ignore[union-attr]
        holder.wait(10)


def _has_mount(pid: int, mountpoint) -> bool:
    try:
        with open(f"/proc/{pid}/mounts") as mounts:
            return any(line.split()[1] == str(mountpoint) for line in mounts)
    except FileNotFoundError:
        return False
